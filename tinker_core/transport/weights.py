"""The weights channel: `WeightsPublisher` (PUB) and `WeightsSubscriber` (SUB, conflated: only the newest).

A publisher given a `FlowMonitor` counts each frame it sends (republished ones too) on its edge: rate and bytes;
the latency is unknown on the sending side (NaN).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Mapping

import numpy as np
import zmq

from tinker_core.errors import TransportError
from tinker_core.monitor import FlowMonitor
from tinker_core.transport.codec import MAX_MESSAGE_BYTES, WIRE_VERSION, _OK_KINDS, _dtype, _packb, _unpackb
from tinker_core.transport.curve import CurveClient, CurveServer
from tinker_core.transport.endpoints import _Endpoint


_WEIGHTS_TOPIC = b"tinker.weights"


def _blob_array(name: str, v: Mapping) -> np.ndarray:
    dt, shape, b = _dtype(v["d"]), tuple(v["s"]), v["b"]
    if not isinstance(b, bytes) or any(s < 0 for s in shape) or len(b) != dt.itemsize * int(np.prod(shape)):
        raise ValueError(f"blob {name!r}: bytes do not match {v['d']}{list(shape)}")
    return np.frombuffer(b, dt).reshape(shape)


class WeightsPublisher:
    """PUB side for versioned weight blobs (one self-contained frame per version)."""

    def __init__(self, endpoint: str, *, bind: bool = True, curve: CurveServer | CurveClient | None = None,
                 monitor: FlowMonitor | None = None, edge: str = "weights"):
        self._ep = _Endpoint(zmq.PUB, endpoint, bind, curve, {zmq.CONFLATE: 1, zmq.LINGER: 0})
        self.flow = None if monitor is None else monitor.edge(edge)
        """The edge's counters in ``monitor`` (None: not counted)."""
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
            if self.flow is not None:
                self.flow.add(len(frame), float("nan"), time.monotonic())

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
