"""ZeroMQ transport for the tinker bus: transitions, weight blobs and control requests between processes.

Three channels, each a pair of small classes:

* `TransitionSender` (PUSH) / `TransitionReceiver` (PULL): `Transition` and `TransitionBatch` values.
  The sender never waits by default: its queue is bounded (``hwm``) and a full queue drops the
  message and counts it in ``dropped``. The receiver never crashes on bad input: a malformed message
  is counted in ``rejected`` and skipped.
* `WeightsPublisher` (PUB) / `WeightsSubscriber` (SUB, conflated): versioned weight blobs; a slow
  subscriber only ever sees the latest version.
* `ControlServer` (REP) / `ControlClient` (REQ): msgpack dict requests with timeouts (never blocks forever).

Wire format of a transition message (multipart)::

    frame 0   u32 n | msgpack layout [1, kind, [[path, dtype, shape, lz4, offset, size], ...]]
              u32 m | msgpack scalars ([reward, terminated, truncated, info] or [infos])
              pad to 8 | the small arrays, each 8-byte aligned at its offset
    frame 1.. one frame per array of FRAME_MIN_BYTES (64 KiB) or more (offset -1), in layout order

kind is ``t`` (a Transition), ``b`` (a TransitionBatch) or ``m`` (a stacked ``send_many`` batch
the receiver hands out as single transitions again). The layout repeats from message to message,
so the sender caches its bytes and the receiver parses and checks it once. Small arrays cost one
memcpy into the first frame (cheaper than a frame of their own); big arrays (images) are handed to
ZeroMQ as their own frames without a copy. Either way they come back as read-only
``np.frombuffer`` views: copy one before writing into it, and do not mutate an array after ``send``
returns if it may still be queued. With ``compress=True`` arrays of 512 bytes or more are lz4
compressed when that makes them smaller (flag per array in the layout).

Send many small transitions with ``send_many``: one message per ``batch`` transitions carries far
more per second than one message each (see benchmarks/bus.py).

CURVE: `curve_keypair` creates or reads z85 key files; a `CurveServer` on the binding side lists the
client public keys it accepts (checked by a ZAP authenticator), a `CurveClient` names the server's
public key. A client with the wrong keys gets nothing through.

Endpoints: ``tcp://HOST:PORT`` (``tcp://127.0.0.1:*`` picks a free port; read ``.endpoint`` after
binding) and ``ipc:///path``. Errors are `TransportError` with the endpoint in the message.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import lz4.block
import msgpack
import numpy as np
import zmq
import zmq.auth

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


def free_endpoints(n: int, host: str = "127.0.0.1") -> list[str]:
    """``n`` distinct ``tcp://host:port`` endpoints on ports free right now. The sockets are held open
    until all ``n`` are picked: picked one at a time, the kernel may hand the same port out twice
    (seen here: a learner whose transitions and weights endpoints clashed never started)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((host, 0))
        return [f"tcp://{host}:{s.getsockname()[1]}" for s in socks]
    finally:
        for s in socks:
            s.close()


# -- keys and CURVE -------------------------------------------------------------------------------


def _as_key(key: bytes | str, what: str) -> bytes:
    k = key.encode() if isinstance(key, str) else bytes(key)
    if len(k) != 40:
        raise TransportError(f"{what}: expected a 40-character z85 CURVE key, got {len(k)} characters")
    try:
        zmq.utils.z85.decode(k)
    except Exception:
        raise TransportError(f"{what}: not a valid z85 key") from None
    return k


def _write_private(path: Path, text: str) -> None:
    """Write a secret file atomically with mode 0600 from its first byte on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _write_public(path: Path, text: str) -> None:
    from tinker_core.module import atomic_write_bytes

    atomic_write_bytes(path, text.encode())


def _key_file_text(public: bytes, secret: bytes | None) -> str:
    # The ZeroMQ certificate format (zmq.auth.load_certificate reads it).
    lines = ["#   ****  Generated by tinker: ZeroMQ CURVE certificate  ****", "metadata", "curve",
             f'    public-key = "{public.decode()}"']
    if secret is not None:
        lines.append(f'    secret-key = "{secret.decode()}"')
    return "\n".join(lines) + "\n"


def curve_keypair(directory: str | os.PathLike, name: str) -> tuple[bytes, bytes]:
    """Return ``(public, secret)`` z85 keys for ``name``, creating them in ``directory`` if absent.

    Writes ``NAME.key`` (public, shareable) and ``NAME.key_secret`` (mode 0600, keep private), in the
    ZeroMQ certificate format. An existing secret file readable by others is refused.
    """
    d = Path(directory)
    pub_p, sec_p = d / f"{name}.key", d / f"{name}.key_secret"
    if sec_p.exists():
        mode = sec_p.stat().st_mode & 0o077
        if mode:
            raise TransportError(f"{sec_p}: secret key file is readable by group/others (mode "
                                 f"{oct(sec_p.stat().st_mode & 0o777)}); chmod 600 it")
        try:
            public, secret = zmq.auth.load_certificate(str(sec_p))
        except Exception as e:
            raise TransportError(f"{sec_p}: not a readable CURVE certificate ({e})") from e
        if secret is None:
            raise TransportError(f"{sec_p}: holds no secret-key")
        if not pub_p.exists():
            _write_public(pub_p, _key_file_text(public, None))
        return public, secret
    public, secret = zmq.curve_keypair()
    _write_private(sec_p, _key_file_text(public, secret))
    _write_public(pub_p, _key_file_text(public, None))
    return public, secret


def read_public_key(path: str | os.PathLike) -> bytes:
    """Read the public key from a ``NAME.key`` (or secret) certificate file."""
    try:
        public, _ = zmq.auth.load_certificate(str(path))
    except Exception as e:
        raise TransportError(f"{path}: not a readable CURVE certificate ({e})") from e
    return public


@dataclass(frozen=True)
class CurveServer:
    """CURVE settings of the binding side: its own keys and, optionally, the client keys it admits."""

    secret: bytes | str
    public: bytes | str
    allowed_clients: Sequence[bytes | str] | None = None
    """Client public keys (z85) let through; None admits any client that knows the server's public key."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "secret", _as_key(self.secret, "CurveServer.secret"))
        object.__setattr__(self, "public", _as_key(self.public, "CurveServer.public"))
        if self.allowed_clients is not None:
            object.__setattr__(self, "allowed_clients", tuple(
                _as_key(k, f"CurveServer.allowed_clients[{i}]") for i, k in enumerate(self.allowed_clients)))


@dataclass(frozen=True)
class CurveClient:
    """CURVE settings of the connecting side: its own keys and the server's public key."""

    secret: bytes | str
    public: bytes | str
    server_public: bytes | str

    def __post_init__(self) -> None:
        for f in ("secret", "public", "server_public"):
            object.__setattr__(self, f, _as_key(getattr(self, f), f"CurveClient.{f}"))


class _AllowList:
    def __init__(self, keys: Iterable[bytes]):
        self.keys = frozenset(keys)

    def callback(self, domain: str, key: bytes) -> bool:
        return key in self.keys


# -- sockets --------------------------------------------------------------------------------------

_SCHEMES = ("tcp://", "ipc://", "inproc://")


class _Endpoint:
    """A socket in its own context (so a CURVE authenticator never leaks between endpoints)."""

    def __init__(self, kind: int, endpoint: str, bind: bool, curve: CurveServer | CurveClient | None,
                 options: Mapping[int, Any] = ()):
        if not isinstance(endpoint, str) or not endpoint.startswith(_SCHEMES):
            raise TransportError(f"endpoint {endpoint!r}: expected tcp://HOST:PORT, ipc:///PATH or inproc://NAME")
        self.ctx = zmq.Context(io_threads=1)
        self.sock = self.ctx.socket(kind)
        self._auth = None
        self.closed = False
        try:
            for opt, val in dict(options).items():
                self.sock.setsockopt(opt, val)
            self._setup_curve(curve, bind)
            if bind:
                if endpoint.startswith("ipc://"):
                    Path(endpoint[len("ipc://"):]).parent.mkdir(parents=True, exist_ok=True)
                self.sock.bind(endpoint)
                self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
            else:
                self.sock.connect(endpoint)
                self.endpoint = endpoint
        except zmq.ZMQError as e:
            self._close(0)
            why = "address already in use" if e.errno == zmq.EADDRINUSE else str(e)
            verb = "bind" if bind else "connect"
            raise TransportError(f"endpoint {endpoint!r}: cannot {verb}: {why}") from None
        except BaseException:
            self._close(0)
            raise

    def _setup_curve(self, curve: CurveServer | CurveClient | None, bind: bool) -> None:
        if curve is None:
            return
        if isinstance(curve, CurveServer):
            from zmq.auth.thread import ThreadAuthenticator

            self._auth = ThreadAuthenticator(self.ctx)
            self._auth.start()
            if curve.allowed_clients is None:
                self._auth.configure_curve(domain="*", location=zmq.auth.CURVE_ALLOW_ANY)
            else:
                self._auth.configure_curve_callback(domain="*", credentials_provider=_AllowList(curve.allowed_clients))
            self.sock.curve_secretkey = curve.secret
            self.sock.curve_publickey = curve.public
            self.sock.curve_server = True
        elif isinstance(curve, CurveClient):
            self.sock.curve_secretkey = curve.secret
            self.sock.curve_publickey = curve.public
            self.sock.curve_serverkey = curve.server_public
        else:
            raise TransportError(f"curve: expected CurveServer or CurveClient, got {type(curve).__name__}")

    def _close(self, linger_ms: int) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.close(linger=linger_ms)
        finally:
            if self._auth is not None:
                self._auth.stop()
            self.ctx.term()


# -- framing --------------------------------------------------------------------------------------

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


# -- transitions ------------------------------------------------------------------------------------


class TransitionSender:
    """PUSH side for transitions. ``send`` never blocks unless ``block=True``: a full queue drops."""

    def __init__(self, endpoint: str, *, bind: bool = False, compress: bool = False,
                 curve: CurveClient | CurveServer | None = None, hwm: int = 10000, block: bool = False,
                 batch: int = 64):
        if hwm < 1:
            raise TransportError(f"TransitionSender.hwm: expected >= 1, got {hwm}")
        self.compress, self.block, self.batch = compress, block, max(1, int(batch))
        self._ep = _Endpoint(zmq.PUSH, endpoint, bind, curve, {zmq.SNDHWM: hwm, zmq.LINGER: 0})
        self.endpoint = self._ep.endpoint
        self._flags = 0 if block else zmq.NOBLOCK
        self._lock = threading.Lock()
        self.sent = 0
        """Transitions handed to ZeroMQ (a batch counts its length)."""
        self.dropped = 0
        """Transitions dropped because the queue was full (never waits when ``block`` is False)."""
        self.bytes_sent = 0
        """Payload bytes handed to ZeroMQ (after compression), headers included."""

    def _send_frames(self, frames: list, n: int, nbytes: int) -> bool:
        with self._lock:
            if self._ep.closed:
                raise TransportError(f"{self.endpoint}: sender is closed")
            try:
                if len(frames) == 1:
                    self._ep.sock.send(frames[0], flags=self._flags, copy=True)
                else:
                    self._ep.sock.send_multipart(frames, flags=self._flags, copy=False)
            except zmq.Again:
                self.dropped += n
                return False
            except zmq.ZMQError as e:
                raise TransportError(f"{self.endpoint}: send failed: {e}") from None
            self.sent += n
            self.bytes_sent += nbytes
            return True

    def send(self, t: Message) -> bool:
        """Queue one transition or batch; False (and ``dropped`` += its length) if the queue is full."""
        if not isinstance(t, (Transition, TransitionBatch)):
            raise TransportError(f"send: expected a Transition or TransitionBatch, got {type(t).__name__}")
        frames, nbytes = encode(t, self.compress)
        return self._send_frames(frames, len(t) if isinstance(t, TransitionBatch) else 1, nbytes)

    def send_many(self, ts: Sequence[Transition]) -> int:
        """Queue many transitions, stacked ``batch`` to a message (one copy, far fewer messages); the
        receiver hands them out as single transitions again. Returns how many were queued."""
        ok = 0
        for i in range(0, len(ts), self.batch):
            chunk = ts[i:i + self.batch]
            for j, t in enumerate(chunk):
                if not isinstance(t, Transition):
                    raise TransportError(f"send_many[{i + j}]: expected a Transition, got {type(t).__name__}")
            try:
                b = TransitionBatch.from_transitions(chunk)
            except (ValueError, KeyError, TypeError):  # layouts differ: send them one by one
                ok += sum(self.send(t) for t in chunk)
                continue
            frames, nbytes = encode(b, self.compress, unstack=True)
            if self._send_frames(frames, len(chunk), nbytes):
                ok += len(chunk)
        return ok

    def close(self, linger_ms: int = 1000) -> None:
        """Close; waits up to ``linger_ms`` for queued messages to leave, never longer."""
        with self._lock:
            self._ep._close(linger_ms)

    def __enter__(self) -> "TransitionSender":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_NOBLOCK = int(zmq.NOBLOCK)
_RCVMORE = int(zmq.RCVMORE)


class TransitionReceiver:
    """PULL side for transitions. Malformed messages are counted in ``rejected`` and skipped.

    Use one receiver from one thread (ZeroMQ sockets are not thread-safe).
    """

    def __init__(self, endpoint: str, *, bind: bool = True, curve: CurveServer | CurveClient | None = None,
                 hwm: int = 10000, max_message_bytes: int = MAX_MESSAGE_BYTES):
        self._ep = _Endpoint(zmq.PULL, endpoint, bind, curve,
                             {zmq.RCVHWM: hwm, zmq.LINGER: 0, zmq.MAXMSGSIZE: max_message_bytes})
        self.endpoint = self._ep.endpoint
        self._queue: deque[Message] = deque()
        self._rcvtimeo = -1
        self.received = 0
        """Transitions decoded (a batch counts its length)."""
        self.bytes_received = 0
        """Bytes of every frame received, accepted or not."""
        self.rejected = 0
        """Messages that were not valid tinker transition messages (skipped)."""
        self.last_error = ""
        """Why the last message was rejected."""

    def _take(self, timeout_ms: int) -> bool:
        """Receive one message into the queue, waiting up to ``timeout_ms`` (0: only one already
        waiting); False if none came. Blocking in ``recv`` with a timeout (no poll before it) keeps
        the common path to one call into ZeroMQ per message."""
        sock = self._ep.sock
        try:
            if timeout_ms <= 0:
                first = sock.recv(_NOBLOCK, copy=True)
            else:
                if self._rcvtimeo != timeout_ms:
                    sock.setsockopt(zmq.RCVTIMEO, timeout_ms)
                    self._rcvtimeo = timeout_ms
                first = sock.recv(copy=True)
            frames: list = [first]
            nbytes = len(first)
            while sock.get(_RCVMORE):  # big arrays: keep them in ZeroMQ's buffer, no copy
                f = sock.recv(copy=False)
                frames.append(f)
                nbytes += len(f.buffer)
        except zmq.Again:
            return False
        except zmq.ZMQError as e:
            raise TransportError(f"{self.endpoint}: receive failed: {e}") from None
        self.bytes_received += nbytes
        try:
            msgs = decode(frames)
        except Exception as e:  # anything malformed: count and skip, never crash
            self.rejected += 1
            self.last_error = f"{type(e).__name__}: {e}"
            return True
        if len(msgs) == 1 and type(msgs[0]) is Transition:
            self.received += 1
            self._queue.append(msgs[0])
        else:
            for m in msgs:
                self.received += len(m) if isinstance(m, TransitionBatch) else 1
            self._queue.extend(msgs)
        return True

    def recv(self, timeout_ms: int = 100) -> Message | None:
        """The next transition or batch, or None after ``timeout_ms`` (0: don't wait)."""
        if self._ep.closed:
            raise TransportError(f"{self.endpoint}: receiver is closed")
        q = self._queue
        if q:
            return q.popleft()
        if timeout_ms <= 0:
            while self._take(0):
                if q:
                    return q.popleft()
            return None
        deadline = time.monotonic() + timeout_ms / 1e3
        left = timeout_ms
        while True:
            if not self._take(left):
                return None
            if q:
                return q.popleft()
            left = int((deadline - time.monotonic()) * 1e3)  # a rejected message: wait out the rest
            if left <= 0:
                return self.recv(0)

    def recv_many(self, max_n: int = 1024, timeout_ms: int = 100) -> list[Message]:
        """Up to ``max_n`` messages: waits up to ``timeout_ms`` for the first, then takes what is waiting."""
        out: list[Message] = []
        first = self.recv(timeout_ms)
        if first is None:
            return out
        out.append(first)
        q = self._queue
        while len(out) < max_n:
            if q:
                out.append(q.popleft())
            elif not self._take(0):
                break
        return out

    def close(self) -> None:
        self._ep._close(0)

    def __enter__(self) -> "TransitionReceiver":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# -- weights ----------------------------------------------------------------------------------------

_WEIGHTS_TOPIC = b"tinker.weights"


def _blob_array(name: str, v: Mapping) -> np.ndarray:
    dt, shape, b = _dtype(v["d"]), tuple(v["s"]), v["b"]
    if not isinstance(b, bytes) or any(s < 0 for s in shape) or len(b) != dt.itemsize * int(np.prod(shape)):
        raise ValueError(f"blob {name!r}: bytes do not match {v['d']}{list(shape)}")
    return np.frombuffer(b, dt).reshape(shape)


class WeightsPublisher:
    """PUB side for versioned weight blobs (one self-contained frame per version)."""

    def __init__(self, endpoint: str, *, bind: bool = True, curve: CurveServer | CurveClient | None = None):
        self._ep = _Endpoint(zmq.PUB, endpoint, bind, curve, {zmq.CONFLATE: 1, zmq.LINGER: 0})
        self.endpoint = self._ep.endpoint
        self.published = 0
        self.bytes_sent = 0
        self.last_version: int | None = None
        self._last: bytes | None = None
        self._lock = threading.Lock()  # ZeroMQ sockets are not thread-safe; publishing may come from several

    def publish(self, version: int, blobs: Mapping[str, bytes | np.ndarray], meta: Mapping[str, Any] | None = None) -> None:
        """Publish ``blobs`` (bytes or arrays) as ``version``; subscribers keep only the newest."""
        if not isinstance(version, (int, np.integer)) or isinstance(version, bool):
            raise TransportError(f"publish: version must be an int, got {type(version).__name__}")
        packed: dict[str, Any] = {}
        for k, v in blobs.items():
            if isinstance(v, np.ndarray):
                a = np.ascontiguousarray(v)
                if a.dtype.hasobject or a.dtype.kind not in _OK_KINDS:
                    raise TransportError(f"publish: blob {k!r} has dtype {a.dtype}, not sendable")
                packed[k] = {"d": a.dtype.str, "s": list(a.shape), "b": a.data}
            elif isinstance(v, (bytes, bytearray, memoryview)):
                packed[k] = bytes(v)
            else:
                raise TransportError(f"publish: blob {k!r} must be bytes or a numpy array, got {type(v).__name__}")
        try:
            body = _packb({"v": WIRE_VERSION, "ver": int(version), "blobs": packed, "meta": dict(meta or {})})
        except (TypeError, ValueError, OverflowError) as e:
            raise TransportError(f"publish: cannot frame meta: {e}") from e
        self._last = _WEIGHTS_TOPIC + body
        self._send(self._last)
        self.last_version = int(version)

    def republish(self) -> bool:
        """Send the last version again (for subscribers that joined late); False if none yet."""
        if self._last is None:
            return False
        self._send(self._last)
        return True

    def _send(self, frame: bytes) -> None:
        with self._lock:
            if self._ep.closed:
                raise TransportError(f"{self.endpoint}: publisher is closed")
            try:
                self._ep.sock.send(frame, flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:  # PUB never raises Again in practice; a full queue drops silently
                return
            except zmq.ZMQError as e:
                raise TransportError(f"{self.endpoint}: publish failed: {e}") from None
            self.published += 1
            self.bytes_sent += len(frame)

    def close(self) -> None:
        with self._lock:
            self._ep._close(200)


class WeightsSubscriber:
    """SUB side, conflated: ``poll`` returns the newest ``(version, blobs, meta)`` or None."""

    def __init__(self, endpoint: str, *, bind: bool = False, curve: CurveClient | CurveServer | None = None,
                 max_message_bytes: int = MAX_MESSAGE_BYTES):
        self._ep = _Endpoint(zmq.SUB, endpoint, bind, curve,
                             {zmq.CONFLATE: 1, zmq.LINGER: 0, zmq.MAXMSGSIZE: max_message_bytes,
                              zmq.SUBSCRIBE: _WEIGHTS_TOPIC})
        self.endpoint = self._ep.endpoint
        self.received = 0
        self.rejected = 0
        self.last_error = ""
        self.version: int | None = None

    def poll(self, timeout_ms: int = 0) -> tuple[int, dict[str, bytes | np.ndarray], dict] | None:
        if not self._ep.sock.poll(max(0, int(timeout_ms))):
            return None
        frame = None
        while True:  # keep only the newest of what has arrived
            try:
                frame = self._ep.sock.recv(flags=zmq.NOBLOCK, copy=True)
            except zmq.Again:
                break
        if frame is None:
            return None
        try:
            msg = _unpackb(memoryview(frame)[len(_WEIGHTS_TOPIC):])
            if not isinstance(msg, dict) or msg.get("v") != WIRE_VERSION:
                raise ValueError("not a tinker weights message")
            blobs: dict[str, bytes | np.ndarray] = {}
            for k, v in msg["blobs"].items():
                if isinstance(v, dict):
                    blobs[k] = _blob_array(k, v)
                elif isinstance(v, bytes):
                    blobs[k] = v
                else:
                    raise TypeError(f"blob {k!r} is a {type(v).__name__}")
            version, meta = int(msg["ver"]), msg.get("meta") or {}
            if not isinstance(meta, dict):
                raise TypeError("meta is not a dict")
        except Exception as e:
            self.rejected += 1
            self.last_error = f"{type(e).__name__}: {e}"
            return None
        self.received += 1
        self.version = version
        return version, blobs, meta

    def close(self) -> None:
        self._ep._close(0)


# -- control ----------------------------------------------------------------------------------------

Handler = Callable[[dict], Mapping[str, Any]]


class ControlServer:
    """REP side: answers msgpack dict requests with ``handler(request)`` in a background thread.

    A handler exception becomes ``{"ok": False, "error": "..."}``; a malformed request gets the same
    kind of reply. ``start()`` runs the loop in a daemon thread; ``serve_once`` handles one request.
    """

    def __init__(self, endpoint: str, handler: Handler, *, bind: bool = True,
                 curve: CurveServer | CurveClient | None = None):
        self._ep = _Endpoint(zmq.REP, endpoint, bind, curve, {zmq.LINGER: 0, zmq.MAXMSGSIZE: 16 * 1024 * 1024})
        self.endpoint = self._ep.endpoint
        self.handler = handler
        self.handled = 0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def serve_once(self, timeout_ms: int = 100) -> bool:
        if not self._ep.sock.poll(max(0, timeout_ms)):
            return False
        raw = self._ep.sock.recv()
        try:
            req = _unpackb(raw)
            if not isinstance(req, dict):
                raise TypeError(f"expected a dict request, got {type(req).__name__}")
            rep = dict(self.handler(req))
        except Exception as e:
            rep = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        try:
            out = _packb(rep)
        except Exception as e:
            out = _packb({"ok": False, "error": f"reply not serializable: {e}"})
        self._ep.sock.send(out)
        self.handled += 1
        return True

    def start(self) -> "ControlServer":
        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.serve_once(50)
                except zmq.ZMQError:
                    if self._stop.is_set():
                        return
                    raise
        self._thread = threading.Thread(target=loop, name=f"tinker-ctl {self.endpoint}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self._ep._close(0)


class ControlClient:
    """REQ side: ``request(dict) -> dict`` with a timeout; a lost reply raises `TransportError`."""

    def __init__(self, endpoint: str, *, timeout_ms: int = 2000, curve: CurveClient | CurveServer | None = None):
        self._endpoint, self._curve, self.timeout_ms = endpoint, curve, timeout_ms
        self._ep = self._open()
        self.endpoint = self._ep.endpoint

    def _open(self) -> _Endpoint:
        return _Endpoint(zmq.REQ, self._endpoint, False, self._curve, {zmq.LINGER: 0})

    def request(self, req: Mapping[str, Any], timeout_ms: int | None = None) -> dict:
        t = self.timeout_ms if timeout_ms is None else timeout_ms
        try:
            payload = _packb(dict(req))
        except (TypeError, ValueError, OverflowError) as e:
            raise TransportError(f"{self._endpoint}: cannot frame request: {e}") from e
        sock = self._ep.sock
        sock.send(payload)
        if not sock.poll(max(0, t)):
            # REQ is stuck awaiting a reply now; replace the socket so the next request can go.
            self._ep._close(0)
            self._ep = self._open()
            raise TransportError(f"{self._endpoint}: no reply within {t} ms (is the server running?)")
        rep = _unpackb(sock.recv())
        if not isinstance(rep, dict):
            raise TransportError(f"{self._endpoint}: reply is not a dict: {rep!r}")
        return rep

    def close(self) -> None:
        self._ep._close(0)


__all__ = [
    "ControlClient", "ControlServer", "CurveClient", "CurveServer", "TransitionReceiver", "TransitionSender",
    "WeightsPublisher", "WeightsSubscriber", "curve_keypair", "read_public_key", "decode", "encode", "free_endpoints",
]
