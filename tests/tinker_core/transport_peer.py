"""A second process for the transport tests: sends transitions to, or receives them from, an endpoint.

    python transport_peer.py send ENDPOINT N TAG [KEYDIR CLIENT_NAME SERVER_NAME]
    python transport_peer.py recv ENDPOINT N

``send`` writes one line ``sent=<n> dropped=<n>`` to stdout; ``recv`` binds, prints ``ready``,
then prints ``received=<n> rejected=<n> checksum=<sum of obs>`` once N arrived or 20 s passed.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from tinker_core.transition import Transition
from tinker_core.transport import (
    CurveClient, TransitionReceiver, TransitionSender, curve_keypair, read_public_key,
)


def transition(i: int, tag: str) -> Transition:
    obs = {"joints": np.full(7, i, np.float32), "image": np.full((8, 8, 3), i % 256, np.uint8)}
    return Transition(obs, np.array([i * 0.5], np.float32), float(i), i % 50 == 49, False, {"i": i, "src": tag},
                      {"joints": np.full(7, i + 1, np.float32), "image": np.zeros((8, 8, 3), np.uint8)})


def send(endpoint: str, n: int, tag: str, keydir: str | None = None, client: str | None = None,
         server: str | None = None) -> None:
    curve = None
    if keydir:
        pub, sec = curve_keypair(keydir, client)
        curve = CurveClient(sec, pub, read_public_key(f"{keydir}/{server}.key"))
    s = TransitionSender(endpoint, curve=curve, compress=True)
    time.sleep(0.3)  # let the connection (and CURVE handshake) finish before the first message
    for i in range(n):
        s.send(transition(i, tag))
    s.close(linger_ms=1000)  # long enough to flush to a real peer; refused ones give up
    print(f"sent={s.sent} dropped={s.dropped}", flush=True)


def recv(endpoint: str, n: int) -> None:
    r = TransitionReceiver(endpoint)
    print("ready", flush=True)
    total, deadline = 0.0, time.monotonic() + 20
    while r.received < n and time.monotonic() < deadline:
        for t in r.recv_many(256, 200):
            total += float(t.obs.sum())
    print(f"received={r.received} rejected={r.rejected} checksum={total:g}", flush=True)
    r.close()


if __name__ == "__main__":
    mode, endpoint, n, *rest = sys.argv[1:]
    send(endpoint, int(n), *rest) if mode == "send" else recv(endpoint, int(n))
