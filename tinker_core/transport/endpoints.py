"""Endpoints: a socket in its own ZeroMQ context, bound or connected, with CURVE; and free loopback ports."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any, Mapping

import zmq
import zmq.auth

from tinker_core.errors import TransportError
from tinker_core.transport.curve import CurveClient, CurveServer, _AllowList


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
