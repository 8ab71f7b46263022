"""The control channel: `ControlServer` (REP) and `ControlClient` (REQ), msgpack requests with timeouts."""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

import zmq

from tinker_core.errors import TransportError
from tinker_core.transport.codec import _packb, _unpackb
from tinker_core.transport.curve import CurveClient, CurveServer
from tinker_core.transport.endpoints import _Endpoint

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
