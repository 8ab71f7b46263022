"""The wire codec of transition messages (see the package docstring for the frame layout)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, Mapping, Sequence

import lz4.block
import msgpack
import numpy as np
import zmq

from tinker_core.errors import TransportError
from tinker_core.transition import Transition, TransitionBatch

WIRE_VERSION = 1
#: arrays smaller than this are never lz4-compressed (the frame overhead outweighs the gain)
COMPRESS_MIN_BYTES = 512
#: default cap on one received message; larger ones are dropped by ZeroMQ before they use memory
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
#: arrays at least this big travel as their own frame without a copy; smaller ones share the first frame
FRAME_MIN_BYTES = 64 * 1024

Message = Transition | TransitionBatch


_DTYPES: dict[str, np.dtype] = {}
_SEND_DT: dict[np.dtype, str] = {}
_OK_KINDS = frozenset("biufc")
_LEN = struct.Struct("<I")
_PAD = [b"\0" * i for i in range(8)]


def _dtype(s: str) -> np.dtype:
    dt = _DTYPES.get(s)
    if dt is None:
        dt = np.dtype(s)
        if dt.kind not in _OK_KINDS or dt.hasobject:
            raise ValueError(f"dtype {s!r} not allowed on the wire")
        _DTYPES[s] = dt
    return dt


def _pack_default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, (tuple, set, frozenset)):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot send a {type(o).__name__} in info/meta (use numbers, strings, lists, dicts, arrays)")


_packb = msgpack.Packer(default=_pack_default, use_bin_type=True).pack


def _unpackb(b: Any) -> Any:
    return msgpack.unpackb(b, raw=False, strict_map_key=False)


class _Encoder:
    """Collects arrays: small ones packed (8-byte aligned) behind the header, big ones as own frames."""

    __slots__ = ("compress", "descs", "parts", "frames", "off", "big", "any_z")

    def __init__(self, compress: bool):
        self.compress = compress
        self.descs: list = []
        self.parts: list = []
        self.frames: list = []
        self.off = 0
        self.big = 0
        self.any_z = False

    def add(self, path: Any, x: Any) -> None:
        if isinstance(x, np.ndarray):
            if not x.flags.c_contiguous:
                x = np.ascontiguousarray(x)
            dts = _SEND_DT.get(x.dtype)
            if dts is None:
                if x.dtype.kind not in _OK_KINDS:
                    raise TransportError(f"{_path_str(path)}: cannot send an array of dtype {x.dtype}")
                dts = _SEND_DT[x.dtype] = x.dtype.str
            n = x.nbytes
            buf: Any = x
            z = 0
            if self.compress and n >= COMPRESS_MIN_BYTES:
                c = lz4.block.compress(x, store_size=True)
                if len(c) < n:
                    buf, z, n = c, 1, len(c)
                    self.any_z = True
            if n >= FRAME_MIN_BYTES:
                self.descs.append((path, dts, x.shape, z, -1, n))
                self.frames.append(buf)
                self.big += n
            else:
                self.descs.append((path, dts, x.shape, z, self.off, n))
                self.parts.append(buf)
                pad = -n & 7
                if pad:
                    self.parts.append(_PAD[pad])
                self.off += n + pad
        elif isinstance(x, Mapping):
            base = path if isinstance(path, tuple) else (path,)
            for k, v in x.items():
                if not isinstance(k, str):
                    raise TransportError(f"{_path_str(path)}: dict keys must be strings, got {k!r}")
                self.add(base + (k,), v)
        elif isinstance(x, (int, float, bool, np.number, np.bool_, list, tuple)):
            self.add(path, np.asarray(x))
        else:
            raise TransportError(
                f"{_path_str(path)}: expected an array or a dict of arrays, got {type(x).__name__}")

    def finish(self, kind: str, scalars: list) -> tuple[list, int]:
        """Frames: ``u32 | layout | u32 | scalars | pad | small arrays`` then the big arrays.

        The layout (kind, paths, dtypes, shapes, offsets) repeats from message to message, so both
        sides cache it: the sender its packed bytes, the receiver its parsed and checked form.
        """
        key = None if self.any_z else (kind, tuple(self.descs))
        lay = _LAYOUT_OUT.get(key) if key is not None else None
        try:
            if lay is None:
                lay = _packb([WIRE_VERSION, kind, self.descs])
                if key is not None and len(_LAYOUT_OUT) < _LAYOUT_CACHE:
                    _LAYOUT_OUT[key] = lay
            sc = _packb(scalars)
        except (TypeError, ValueError, OverflowError) as e:
            raise TransportError(f"cannot frame the message: {e}") from e
        hl = 8 + len(lay) + len(sc)
        first = b"".join([_LEN.pack(len(lay)), lay, _LEN.pack(len(sc)), sc, _PAD[-hl & 7], *self.parts])
        return [first, *self.frames], len(first) + self.big


_LAYOUT_CACHE = 256
_LAYOUT_OUT: dict = {}


_FIELDS = {"o": "obs", "a": "action", "n": "next_obs", "r": "reward", "te": "terminated", "tr": "truncated"}


def _path_str(path: Any) -> str:
    parts = path if isinstance(path, (list, tuple)) else [path]
    s = _FIELDS.get(parts[0], str(parts[0]))
    return s + "".join(f"[{p!r}]" for p in parts[1:])


_FLAT: dict = {}


def _encode_flat(t: Transition) -> tuple[list, int] | None:
    """The common case, fast: plain small arrays, no compression. Same bytes as the general path."""
    o, a, n = t.obs, t.action, t.next_obs
    if type(o) is not np.ndarray or type(a) is not np.ndarray or (n is not None and type(n) is not np.ndarray):
        return None
    key = (o.dtype, o.shape, a.dtype, a.shape, None if n is None else n.dtype, None if n is None else n.shape)
    plan = _FLAT.get(key)
    if plan is None:
        enc = _Encoder(False)
        enc.add("o", o)
        enc.add("a", a)
        if n is not None:
            enc.add("n", n)
        if enc.frames:
            return None
        lay = _packb([WIRE_VERSION, "t", enc.descs])
        pads = [_PAD[-x.nbytes & 7] for x in (o, a, n if n is not None else a)]
        plan = (_LEN.pack(len(lay)) + lay, len(lay), *pads)
        if len(_FLAT) < _LAYOUT_CACHE:
            _FLAT[key] = plan
    if not (o.flags.c_contiguous and a.flags.c_contiguous and (n is None or n.flags.c_contiguous)):
        return None
    prefix, n_lay, p_o, p_a, p_n = plan
    try:
        sc = _packb([float(t.reward), bool(t.terminated), bool(t.truncated), t.info or None])
    except (TypeError, ValueError, OverflowError) as e:
        raise TransportError(f"cannot frame the message: {e}") from e
    pad = _PAD[-(8 + n_lay + len(sc)) & 7]
    if n is None:
        first = b"".join((prefix, _LEN.pack(len(sc)), sc, pad, o, p_o, a, p_a))
    else:
        first = b"".join((prefix, _LEN.pack(len(sc)), sc, pad, o, p_o, a, p_a, n, p_n))
    return [first], len(first)


def encode(msg: Message, compress: bool = False, unstack: bool = False) -> tuple[list, int]:
    """Frames of one message and its byte count.

    The first frame holds the msgpack layout and scalars and the small arrays (8-byte aligned);
    arrays of `FRAME_MIN_BYTES` or more follow as their own frames, handed to ZeroMQ without a copy.
    ``unstack`` marks a batch that the receiver hands out again as single transitions (``send_many``).
    """
    if isinstance(msg, Transition) and not compress:
        fast = _encode_flat(msg)
        if fast is not None:
            return fast
    enc = _Encoder(compress)
    if isinstance(msg, Transition):
        enc.add("o", msg.obs)
        enc.add("a", msg.action)
        if msg.next_obs is not None:
            enc.add("n", msg.next_obs)
        return enc.finish("t", [float(msg.reward), bool(msg.terminated), bool(msg.truncated), msg.info or None])
    if isinstance(msg, TransitionBatch):
        enc.add("o", msg.obs)
        enc.add("a", msg.action)
        if msg.next_obs is not None:
            enc.add("n", msg.next_obs)
        enc.add("r", np.asarray(msg.reward))
        enc.add("te", np.asarray(msg.terminated))
        enc.add("tr", np.asarray(msg.truncated))
        return enc.finish("m" if unstack else "b", [msg.info or None])
    raise TransportError(f"send: expected a Transition or TransitionBatch, got {type(msg).__name__}")


def _buffer(frame: Any) -> Any:
    return frame.buffer if isinstance(frame, zmq.Frame) else frame


def _put(root: dict, path: Any, value: np.ndarray) -> None:
    if type(path) is str:
        root[path] = value
        return
    d = root
    for k in path[:-1]:
        d = d.setdefault(k, {})
    d[path[-1]] = value


class _Layout:
    __slots__ = ("kind", "entries", "n_frames", "need", "flat")

    def __init__(self, kind: str, entries: list, n_frames: int, need: int):
        self.kind, self.entries, self.n_frames, self.need = kind, entries, n_frames, need
        paths = [e[0] for e in entries]
        # A single transition of plain arrays in the first frame: decoded without building a tree.
        self.flat = (kind == "t" and n_frames == 0 and not any(e[4] for e in entries)
                     and paths in (["o", "a"], ["o", "a", "n"]))


_LAYOUT_IN: dict[bytes, _Layout] = {}


def _parse_layout(raw: bytes) -> _Layout:
    lay = _unpackb(raw)
    if not isinstance(lay, list) or len(lay) != 3 or lay[0] != WIRE_VERSION:
        raise ValueError(f"not a tinker v{WIRE_VERSION} message")
    kind, descs = lay[1], lay[2]
    if kind not in ("t", "b", "m"):
        raise ValueError(f"unknown message kind {kind!r}")
    entries, n_frames, need, cacheable = [], 0, 0, True
    for path, dts, shape, z, off, n in descs:
        dt = _dtype(dts)
        if not isinstance(path, (str, list)) or not all(type(d) is int and d >= 0 for d in shape):
            raise ValueError(f"bad path {path!r} or shape {shape!r}")
        count = int(np.prod(shape, dtype=np.int64))
        if type(off) is not int or type(n) is not int or off < -1 or n < 0:
            raise ValueError(f"bad offset {off!r} or size {n!r}")
        if not z and n != count * dt.itemsize:
            raise ValueError(f"{n} bytes for {dts}{list(shape)} ({count * dt.itemsize} bytes)")
        if off < 0:
            n_frames += 1
        else:
            need = max(need, off + n)
        cacheable = cacheable and not z
        entries.append((path, dt, tuple(shape), count, bool(z), off, n, len(shape) == 1))
    layout = _Layout(kind, entries, n_frames, need)
    if cacheable and len(_LAYOUT_IN) < _LAYOUT_CACHE:
        _LAYOUT_IN[raw] = layout
    return layout


def _arrays(frames: Sequence[Any]) -> tuple[str, Any, dict]:
    """Kind, scalars and ``{path: array}`` tree of one message; raises on anything malformed."""
    if not frames:
        raise ValueError("empty message")
    first = _buffer(frames[0])
    size = len(first)
    if size < 8:
        raise ValueError(f"first frame of {size} bytes is too short")
    l1 = _LEN.unpack_from(first, 0)[0]
    if 8 + l1 > size:
        raise ValueError(f"layout length {l1} runs past the frame ({size} bytes)")
    raw = bytes(first[4:4 + l1])
    lay = _LAYOUT_IN.get(raw) or _parse_layout(raw)
    l2 = _LEN.unpack_from(first, 4 + l1)[0]
    if 8 + l1 + l2 > size:
        raise ValueError(f"scalars length {l2} runs past the frame ({size} bytes)")
    scalars = _unpackb(memoryview(first)[8 + l1:8 + l1 + l2])
    base = (8 + l1 + l2 + 7) & ~7
    if base + lay.need > size:
        raise ValueError(f"arrays run past the frame ({base + lay.need} > {size} bytes)")
    extra = frames[1:]
    if len(extra) != lay.n_frames:
        raise ValueError(f"message has {len(extra)} extra frames, its layout names {lay.n_frames}")
    if lay.flat:
        arrs = [np.frombuffer(first, dt, count, base + off) if flat else
                np.frombuffer(first, dt, count, base + off).reshape(shape)
                for _, dt, shape, count, _, off, _, flat in lay.entries]
        return "flat", scalars, arrs
    fi = 0
    root: dict = {}
    for path, dt, shape, count, z, off, n, flat in lay.entries:
        if off < 0:
            buf, start = _buffer(extra[fi]), 0
            fi += 1
            if len(buf) != n:
                raise ValueError(f"frame of {len(buf)} bytes, layout says {n}")
        else:
            buf, start = first, base + off
        if z:
            buf, start = lz4.block.decompress(memoryview(buf)[start:start + n]), 0
            if len(buf) != count * dt.itemsize:
                raise ValueError(f"{len(buf)} bytes unpacked for {dt}{list(shape)}")
        arr = np.frombuffer(buf, dt, count, start)
        _put(root, path, arr if flat else arr.reshape(shape))
    return lay.kind, scalars, root


def _check_batch(x: Any, n: int, name: str) -> None:
    if isinstance(x, dict):
        for v in x.values():
            _check_batch(v, n, name)
    elif x is not None and (x.ndim == 0 or x.shape[0] != n):
        raise ValueError(f"batch field {name} has shape {x.shape}, expected {n} rows")


def _rows(x: Any, n: int) -> list:
    if isinstance(x, dict):
        cols = {k: _rows(v, n) for k, v in x.items()}
        return [{k: c[j] for k, c in cols.items()} for j in range(n)]
    return list(x)  # views, one per row


def _unstack(b: TransitionBatch) -> list[Transition]:
    n = len(b)
    obs, act = _rows(b.obs, n), list(b.action)
    nxt = _rows(b.next_obs, n) if b.next_obs is not None else [None] * n
    info = b.info or [{}] * n
    rew, te, tr = b.reward.tolist(), b.terminated.tolist(), b.truncated.tolist()
    return [Transition(obs[j], act[j], float(rew[j]), bool(te[j]), bool(tr[j]), info[j] or {}, nxt[j])
            for j in range(n)]


def decode(frames: Sequence[Any]) -> list[Message]:
    """Inverse of `encode`; raises ValueError/TypeError/KeyError on anything malformed."""
    kind, sc, root = _arrays(frames)
    if kind == "flat":
        r, te, tr, info = sc
        if info is not None and not isinstance(info, dict):
            raise TypeError("info is not a dict")
        return [Transition(root[0], root[1], float(r), bool(te), bool(tr), info or {},
                           root[2] if len(root) == 3 else None)]
    if kind == "t":
        r, te, tr, info = sc
        if info is not None and not isinstance(info, dict):
            raise TypeError("info is not a dict")
        return [Transition(root["o"], root["a"], float(r), bool(te), bool(tr), info or {}, root.get("n"))]
    if kind == "b" or kind == "m":
        (info,) = sc
        info = info or []
        n = len(root["r"])
        if not isinstance(info, list) or (info and len(info) != n):
            raise TypeError("info is not a list with one dict per transition")
        b = TransitionBatch(root["o"], root["a"], root["r"], root["te"], root["tr"], root.get("n"), info)
        for name in ("obs", "action", "terminated", "truncated", "next_obs"):
            _check_batch(getattr(b, name), n, name)
        return [b] if kind == "b" else _unstack(b)
    raise ValueError(f"unknown message kind {kind!r}")
