"""Encoding of replay fields: lz4 for arrays, JPEG for camera frames, msgpack for structured data.

Each frame is compressed on its own inside a chunk so that a sampled transition is decoded
without decoding its neighbours; the chunk (see `storage.py`) is the unit of storage and of
persistence. lz4 round trips are exact; JPEG is lossy (quality 1..95, default 85).

Sampling cost is decoding: each lz4 frame is decompressed straight into its row of the batch
(no intermediate bytes, no copy), with the GIL released, so decode threads share the work.
"""

from __future__ import annotations

import io
import itertools
import os
import threading
from typing import Any, Callable, Sequence

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


_POOLS: dict[tuple[int, int], Any] = {}


def _lz4_decompress_into() -> Callable[[bytes, int, int, int], int] | None:
    """``LZ4_decompress_safe(src, dst_address, src_size, dst_capacity)`` from python-lz4's own extension module.

    `lz4.block.decompress` can only return a new bytes object, which then has to be copied into the
    batch: calling the C function through ctypes writes each frame straight into its batch row, with
    no allocation and no copy, and ctypes releases the GIL during the call, so decode threads run in
    parallel. None (the portable path is used) when the symbol is not exported by this build.
    """
    try:
        import ctypes

        import lz4.block._block as ext

        fn = ctypes.CDLL(ext.__file__).LZ4_decompress_safe
    except (ImportError, OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_LZ4_INTO = _lz4_decompress_into()


class _Lz4Frames:
    """Decode many lz4 blocks with one C call (``LZ4F_decompress`` through ctypes, GIL released once).

    The blocks of consecutive batch rows are framed as one lz4 frame of independent blocks (header,
    ``u32 size + block`` each, end mark) and decoded straight into those rows. A decode thread then
    holds the GIL once per piece instead of once per frame: with per-frame calls two threads spend
    more time handing the GIL over than decoding. Only for frames whose blocks fit lz4's 64 KiB
    frame block (84x84x3 is 21 KiB); larger frames are few per batch and decode one call each.
    """

    MAX_FRAME_BYTES = 65536 - 65536 // 255 - 16  # LZ4_compressBound of this fits a 64 KiB block
    _END = b"\0\0\0\0"

    def __init__(self) -> None:
        import ctypes as C

        import lz4.frame
        import lz4.frame._frame as ext

        lib = C.CDLL(ext.__file__)
        self.create, self.decompress = lib.LZ4F_createDecompressionContext, lib.LZ4F_decompress
        self.free, self.is_error = lib.LZ4F_freeDecompressionContext, lib.LZ4F_isError
        self.create.argtypes, self.create.restype = [C.POINTER(C.c_void_p), C.c_uint], C.c_size_t
        self.decompress.argtypes = [C.c_void_p, C.c_void_p, C.POINTER(C.c_size_t), C.c_char_p,
                                    C.POINTER(C.c_size_t), C.c_void_p]
        self.decompress.restype = C.c_size_t
        self.free.argtypes, self.free.restype = [C.c_void_p], C.c_size_t
        self.is_error.argtypes, self.is_error.restype = [C.c_size_t], C.c_uint
        self.C = C
        hdr = lz4.frame.compress(b"", block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                 content_checksum=False, block_checksum=False, store_size=False)[:7]
        # magic; FLG: version 1, independent blocks, no checksums, no content size; BD: 64 KiB blocks
        if hdr[:6] != bytes.fromhex("04224d186040"):
            raise OSError(f"unexpected lz4 frame header {hdr.hex()}")
        self.header = hdr

    def decode(self, dst_address: int, blobs: Sequence[bytes], frame_bytes: int) -> None:
        """Decode ``blobs`` (raw lz4 blocks of ``frame_bytes`` each) into consecutive rows at ``dst_address``."""
        C = self.C
        parts = [self.header]
        for b in blobs:
            parts += (len(b).to_bytes(4, "little"), b)
        parts.append(self._END)
        src = b"".join(parts)
        want = len(blobs) * frame_bytes
        ctx = C.c_void_p()
        if self.is_error(self.create(C.byref(ctx), 100)):  # 100: LZ4F_VERSION
            raise MemoryError("lz4: cannot create a decompression context")
        dsize, ssize = C.c_size_t(want), C.c_size_t(len(src))
        try:
            ret = self.decompress(ctx, dst_address, C.byref(dsize), src, C.byref(ssize), None)
        finally:
            self.free(ctx)
        if self.is_error(ret) or ret != 0 or dsize.value != want or ssize.value != len(src):
            raise ValidationError("replay frame", f"{len(blobs)} lz4 blocks of {frame_bytes} bytes",
                                  "a damaged one among them")


def _lz4_frames() -> _Lz4Frames | None:
    try:
        return _Lz4Frames()
    except (ImportError, OSError, AttributeError):
        return None


_LZ4_FRAMES = _lz4_frames()


def decode_frames_into(out: np.ndarray, blobs: Sequence[bytes], codec: str, threads: int = 1,
                       rows: Sequence[int] | np.ndarray | None = None) -> None:
    """Decode ``blobs[i]`` into ``out[rows[i]]`` (``rows`` defaults to ``0..len(blobs)-1``).

    ``out`` is a C-contiguous batch of frames. lz4 frames are decompressed in place, straight into
    their row. With ``threads`` > 1 the frames are split across a thread pool (lz4 through ctypes and
    Pillow release the GIL). A blob that does not decode to exactly one frame raises `ValidationError`.
    """
    rows = np.arange(len(blobs)) if rows is None else np.asarray(rows, dtype=np.int64)
    if len(rows) != len(blobs):
        raise ValidationError("decode_frames_into.rows", f"one row per blob ({len(blobs)})", f"{len(rows)} rows")
    if not out.flags.c_contiguous:
        raise ValidationError("decode_frames_into.out", "a C-contiguous array", "a strided view")
    if threads > 1 and len(blobs) >= 32:
        _decode_shared(out, blobs, codec, threads, rows)
        return
    shape = out.shape[1:]
    nbytes = int(np.prod(shape, dtype=np.int64)) * out.itemsize
    if codec == "lz4" and _LZ4_INTO is not None:
        base, into = out.ctypes.data, _LZ4_INTO
        for r, b in zip(rows.tolist(), blobs):
            got = into(b, base + r * nbytes, len(b), nbytes)
            if got != nbytes:
                raise ValidationError("replay frame", f"an lz4 block of {nbytes} bytes",
                                      f"a damaged one (lz4 returned {got})")
    elif codec in ("none", "lz4"):
        for r, b in zip(rows.tolist(), blobs):
            try:
                raw = lz4.block.decompress(b, uncompressed_size=nbytes) if codec == "lz4" else b
            except lz4.block.LZ4BlockError as e:
                raise ValidationError("replay frame", f"an lz4 block of {nbytes} bytes", f"a damaged one ({e})") from e
            if len(raw) != nbytes:
                raise ValidationError("replay frame", f"{nbytes} bytes", f"{len(raw)} bytes")
            out[r] = np.frombuffer(raw, dtype=out.dtype).reshape(shape)
    elif codec == "jpeg":
        from PIL import Image

        for r, b in zip(rows.tolist(), blobs):
            out[r] = np.asarray(Image.open(io.BytesIO(b))).reshape(shape)
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


def _decode_shared(out: np.ndarray, blobs: Sequence[bytes], codec: str, threads: int, rows: np.ndarray) -> None:
    """Split the decode into small pieces that the caller and ``threads - 1`` pool threads claim in turn.

    The caller works too and waits only for pieces a helper has claimed, so on a busy machine, where a
    helper may not get a core at all, the batch costs about what one thread would take, never more.
    """
    from concurrent.futures import ThreadPoolExecutor

    key = (os.getpid(), threads)  # a forked child gets its own pool: the parent's threads do not exist there
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ThreadPoolExecutor(threads - 1, thread_name_prefix="tinker-decode")
    n = len(blobs)
    step = max(16, -(-n // (4 * threads)))
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1  # pieces never straddle a gap in the rows
    parts = [(lo, min(lo + step, hi)) for lo0, hi in zip([0, *breaks.tolist()], [*breaks.tolist(), n])
             for lo in range(lo0, hi, step)]
    shape = out.shape[1:]
    frame_bytes = int(np.prod(shape, dtype=np.int64)) * out.itemsize
    frames = _LZ4_FRAMES if codec == "lz4" and frame_bytes <= _Lz4Frames.MAX_FRAME_BYTES else None
    base = out.ctypes.data
    claim = itertools.count()  # next() on it is atomic under the GIL
    lock, finished, left, errors = threading.Lock(), threading.Event(), [len(parts)], []

    def work() -> None:
        while (i := next(claim)) < len(parts):
            lo, hi = parts[i]
            try:
                if frames is not None:
                    frames.decode(base + int(rows[lo]) * frame_bytes, blobs[lo:hi], frame_bytes)
                else:
                    decode_frames_into(out, blobs[lo:hi], codec, 1, rows[lo:hi])
            except BaseException as e:  # handed to the caller below
                errors.append(e)
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    finished.set()

    for _ in range(threads - 1):
        pool.submit(work)
    work()
    finished.wait()
    if errors:
        raise errors[0]
