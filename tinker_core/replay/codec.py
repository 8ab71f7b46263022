"""Encoding of replay fields: lz4 for arrays, JPEG for camera frames, msgpack for structured data.

Each frame is compressed on its own inside a chunk so that a sampled transition is decoded
without decoding its neighbours; the chunk (see `storage.py`) is the unit of storage and of
persistence. lz4 round trips are exact; JPEG is lossy (quality 1..95, default 85).
"""

from __future__ import annotations

import io
from typing import Any, Sequence

import lz4.block
import msgpack
import numpy as np

from tinker_core.errors import ValidationError

CODECS = ("none", "lz4", "jpeg")


def is_image(shape: tuple[int, ...], dtype: np.dtype) -> bool:
    """An HxWxC uint8 array with 1 or 3 channels: what a camera gives and JPEG can hold."""
    return np.dtype(dtype) == np.uint8 and len(shape) == 3 and shape[-1] in (1, 3) and min(shape[:2]) >= 8


def encode_frames(frames: np.ndarray, codec: str, quality: int = 85, lz4_level: int = 0) -> list[bytes]:
    """Encode each ``frames[i]`` separately; returns one bytes object per frame.

    ``lz4_level`` 0 is lz4's fast mode; 1..12 is lz4-HC at that level (smaller, slower to write).
    """
    if codec == "none":
        return [np.ascontiguousarray(f).tobytes() for f in frames]
    if codec == "lz4":
        kw = {"mode": "high_compression", "compression": int(lz4_level)} if lz4_level else {}
        return [lz4.block.compress(np.ascontiguousarray(f), store_size=False, **kw) for f in frames]
    if codec == "jpeg":
        from PIL import Image

        out = []
        for f in frames:
            img = Image.fromarray(f[..., 0] if f.shape[-1] == 1 else f)
            buf = io.BytesIO()
            img.save(buf, format="JPEG", quality=int(quality))
            out.append(buf.getvalue())
        return out
    raise ValidationError("codec", f"one of {CODECS}", repr(codec))


_POOLS: dict[int, Any] = {}


def decode_frames_into(out: np.ndarray, blobs: Sequence[bytes], codec: str, threads: int = 1) -> None:
    """Decode ``blobs[i]`` into ``out[i]`` (``out`` has the frame shape and dtype).

    With ``threads`` > 1 the frames are split across a thread pool (lz4 and Pillow release the GIL).
    """
    if threads > 1 and len(blobs) >= 32:
        from concurrent.futures import ThreadPoolExecutor

        pool = _POOLS.get(threads)
        if pool is None:
            pool = _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="tinker-decode")
        step = -(-len(blobs) // threads)
        parts = [(lo, min(lo + step, len(blobs))) for lo in range(0, len(blobs), step)]
        list(pool.map(lambda r: decode_frames_into(out[r[0]:r[1]], blobs[r[0]:r[1]], codec), parts))
        return
    nbytes = out[0].nbytes if len(out) else 0
    if codec == "none":
        for i, b in enumerate(blobs):
            out[i] = np.frombuffer(b, dtype=out.dtype).reshape(out.shape[1:])
    elif codec == "lz4":
        for i, b in enumerate(blobs):
            out[i] = np.frombuffer(lz4.block.decompress(b, uncompressed_size=nbytes),
                                   dtype=out.dtype).reshape(out.shape[1:])
    elif codec == "jpeg":
        from PIL import Image

        for i, b in enumerate(blobs):
            a = np.asarray(Image.open(io.BytesIO(b)))
            out[i] = a.reshape(out.shape[1:])
    else:
        raise ValidationError("codec", f"one of {CODECS}", repr(codec))


def pack(obj: Any) -> bytes:
    """msgpack with numpy arrays and tuples kept as such (for info dicts and chunk headers)."""
    return msgpack.packb(obj, default=_default, use_bin_type=True)


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False)


_EXT_NDARRAY = 1


def _default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        a = np.ascontiguousarray(o)
        return msgpack.ExtType(_EXT_NDARRAY, msgpack.packb([a.dtype.str, list(a.shape), a.tobytes()],
                                                           use_bin_type=True))
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"cannot store a {type(o).__name__} in replay info (use numbers, strings, lists, dicts, arrays)")


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_NDARRAY:
        dt, shape, raw = msgpack.unpackb(data, raw=False)
        return np.frombuffer(raw, dtype=np.dtype(dt)).reshape(shape).copy()
    return msgpack.ExtType(code, data)
