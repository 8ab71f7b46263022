"""The transition channel: `TransitionSender` (PUSH, drops on a full queue) and `TransitionReceiver` (PULL).

A receiver given a `FlowMonitor` counts what arrives on its edge as the ROS edges are counted (`tinker flow`): per
transition its share of the bytes, and its latency from ``info["stamp_ns"]`` (the stamp of the robot state it ends
in, set by `tinker_core.loop.cycle_join`) to its arrival, on the wall clock; a transition without that stamp (a
rollout worker's) counts with an unknown latency.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Sequence

import zmq

from tinker_core.errors import TransportError
from tinker_core.monitor import EdgeStats, FlowMonitor
from tinker_core.transition import Transition, TransitionBatch
from tinker_core.transport.codec import MAX_MESSAGE_BYTES, Message, decode, encode
from tinker_core.transport.curve import CurveClient, CurveServer
from tinker_core.transport.endpoints import _Endpoint


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


def _count(flow: EdgeStats, msgs: list[Message], nbytes: int) -> None:
    """One received message's transitions onto ``flow``: latency from each one's ``info["stamp_ns"]``."""
    now_ns, now = time.time_ns(), time.monotonic()
    lat = []
    for m in msgs:
        infos = m.info if isinstance(m, TransitionBatch) else [m.info or {}]
        if not infos or not isinstance(infos[0], dict) or "stamp_ns" not in infos[0]:  # a worker's batch: none
            lat += [float("nan")] * len(m) if isinstance(m, TransitionBatch) else [float("nan")]
            continue
        for info in infos:
            stamp = info.get("stamp_ns", 0) if isinstance(info, dict) else 0
            lat.append((now_ns - int(stamp)) / 1e9 if isinstance(stamp, int) and stamp > 0 else float("nan"))
    flow.add_many(nbytes, lat, now, now)


class TransitionReceiver:
    """PULL side for transitions. Malformed messages are counted in ``rejected`` and skipped.

    Use one receiver from one thread (ZeroMQ sockets are not thread-safe).
    """

    def __init__(self, endpoint: str, *, bind: bool = True, curve: CurveServer | CurveClient | None = None,
                 hwm: int = 10000, max_message_bytes: int = MAX_MESSAGE_BYTES, monitor: FlowMonitor | None = None,
                 edge: str = "transitions"):
        self._ep = _Endpoint(zmq.PULL, endpoint, bind, curve,
                             {zmq.RCVHWM: hwm, zmq.LINGER: 0, zmq.MAXMSGSIZE: max_message_bytes})
        self.flow = None if monitor is None else monitor.edge(edge)
        """The edge's counters in ``monitor`` (None: not counted)."""
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
        if self.flow is not None:
            _count(self.flow, msgs, nbytes)
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
