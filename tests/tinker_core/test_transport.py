"""The ZeroMQ transport with real sockets: framing round trips (tcp and ipc, lz4, nested obs, big
zero-copy frames), bounded queues that drop instead of waiting, malformed input that is counted and
skipped, weights with conflation, control with timeouts, CURVE keys, and two real processes
exchanging transitions, with CURVE on and clients holding the wrong keys getting nothing through."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq

from tinker_core.errors import TransportError
from tinker_core.transition import Transition, TransitionBatch
from tinker_core.transport import (
    ControlClient, ControlServer, CurveClient, CurveServer, TransitionReceiver, TransitionSender,
    WeightsPublisher, WeightsSubscriber, curve_keypair, read_public_key,
)

PEER = str(Path(__file__).with_name("transport_peer.py"))


def _t(i: int, big: bool = False) -> Transition:
    rng = np.random.default_rng(i)
    obs = {"image": rng.integers(0, 255, (120, 160, 3) if big else (16, 16, 3), dtype=np.uint8),
           "joints": rng.standard_normal(7).astype(np.float32)}
    return Transition(obs, rng.standard_normal(2).astype(np.float32), float(i), i % 3 == 0, i % 3 == 1,
                      {"i": i, "policy_version": 3, "gain": np.float32(0.5)},
                      {"image": obs["image"][::-1].copy(), "joints": obs["joints"] + 1})


def _same(a: Transition, b: Transition) -> None:
    for k in ("image", "joints"):
        np.testing.assert_array_equal(a.obs[k], b.obs[k])
        np.testing.assert_array_equal(a.next_obs[k], b.next_obs[k])
        assert a.obs[k].dtype == b.obs[k].dtype
    np.testing.assert_array_equal(a.action, b.action)
    assert (a.reward, a.terminated, a.truncated) == (b.reward, b.terminated, b.truncated)
    assert b.info == {"i": a.info["i"], "policy_version": 3, "gain": 0.5}


def _recv_n(r: TransitionReceiver, n: int, timeout_s: float = 10.0) -> list:
    out: list = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out.extend(r.recv_many(n - len(out), 100))
    return out


@pytest.mark.parametrize("scheme", ["tcp", "ipc"])
@pytest.mark.parametrize("compress", [False, True])
def test_round_trip(tmp_path, scheme, compress):
    ep = "tcp://127.0.0.1:*" if scheme == "tcp" else f"ipc://{tmp_path}/bus.sock"
    with TransitionReceiver(ep) as r, TransitionSender(r.endpoint, compress=compress) as s:
        items = [_t(0), _t(1, big=True), TransitionBatch.from_transitions([_t(2), _t(3)])]
        assert all(s.send(x) for x in items)
        assert s.send_many([_t(i) for i in range(4, 9)]) == 5
        got = _recv_n(r, 8)
        assert [type(g).__name__ for g in got] == ["Transition"] * 2 + ["TransitionBatch"] + ["Transition"] * 5
        _same(items[0], got[0])
        _same(items[1], got[1])
        for j, t in enumerate(got[2].to_transitions()):
            _same(_t(2 + j), t)
        for j, t in enumerate(got[3:]):
            _same(_t(4 + j), t)
        assert s.sent == r.received == 9 and s.dropped == 0 and r.rejected == 0
        assert s.bytes_sent == r.bytes_received > 0
        raw = sum(x.nbytes() for x in [_t(0), _t(1, big=True)])
        if compress:  # the big image is random, but the rest compresses
            assert s.bytes_sent < raw + 8 * _t(0).nbytes()


def test_plain_array_transitions_round_trip():
    # Plain (non-dict) observations take the sender's and receiver's fast path: same bytes, same result.
    sent = [Transition(np.arange(12, dtype=np.float64).reshape(3, 4) * i, np.array([i, -i], np.int64), -0.5 * i,
                       False, i == 2, {"i": i} if i else {}, None if i == 1 else np.full((3, 4), i, np.float64))
            for i in range(3)]
    sent.append(Transition(np.asfortranarray(np.ones((3, 4))), np.zeros(2, np.int64), 0.0, True))  # not C order
    with TransitionReceiver("tcp://127.0.0.1:*") as r, TransitionSender(r.endpoint) as s:
        assert all(s.send(t) for t in sent)
        got = _recv_n(r, len(sent))
    assert len(got) == len(sent)
    for a, b in zip(sent, got):
        np.testing.assert_array_equal(a.obs, b.obs)
        np.testing.assert_array_equal(a.action, b.action)
        assert b.action.dtype == np.int64 and b.obs.shape == (3, 4)
        assert (a.reward, a.terminated, a.truncated, a.info) == (b.reward, b.terminated, b.truncated, b.info)
        assert (b.next_obs is None) == (a.next_obs is None)
        if a.next_obs is not None:
            np.testing.assert_array_equal(a.next_obs, b.next_obs)


def test_received_arrays_are_read_only_views():
    with TransitionReceiver("tcp://127.0.0.1:*") as r, TransitionSender(r.endpoint) as s:
        s.send(_t(0))
        got = _recv_n(r, 1)[0]
        assert not got.obs["joints"].flags.writeable
        got.obs["joints"].copy()[0] = 1.0  # a copy is writable


def test_a_full_queue_drops_and_never_waits():
    # A sender connected to a port where nobody listens: its bounded queue fills, then it drops.
    s = TransitionSender("tcp://127.0.0.1:1", hwm=4)
    results = [s.send(_t(i)) for i in range(50)]
    assert results[:4] == [True] * 4 and not any(results[10:])
    assert s.sent + s.dropped == 50 and s.dropped >= 40
    assert s.send_many([_t(i) for i in range(10)]) == 0 and s.dropped >= 50
    s.close(linger_ms=0)


def test_malformed_messages_are_counted_and_skipped():
    with TransitionReceiver("tcp://127.0.0.1:*") as r:
        ctx = zmq.Context()
        raw = ctx.socket(zmq.PUSH)
        raw.connect(r.endpoint)
        good, _ = _encode(_t(0))
        first = good[0]
        l1 = int.from_bytes(first[:4], "little")
        layout = msgpack.unpackb(first[4:4 + l1])  # [version, kind, [[path, dtype, shape, lz4, offset, size]...]]
        l2 = int.from_bytes(first[4 + l1:8 + l1], "little")
        scalars = msgpack.unpackb(first[8 + l1:8 + l1 + l2])  # [reward, terminated, truncated, info]
        data = first[(8 + l1 + l2 + 7) & ~7:]

        def forged(layout=layout, scalars=scalars, data=data):
            lay, sc = msgpack.packb(layout), msgpack.packb(scalars)
            pad = b"\0" * (-(8 + len(lay) + len(sc)) & 7)
            return [len(lay).to_bytes(4, "little") + lay + len(sc).to_bytes(4, "little") + sc + pad + data]

        v, k, arrays = layout
        obs = arrays[0]
        bad = [
            [b"x"],                                                  # shorter than the length prefixes
            [b"\xff\xff\xff\x00junkjunk"],                          # layout length past the end
            [b"\x02\x00\x00\x00\xc1\xc1\x00\x00\x00\x00"],          # not msgpack
            forged(layout=[99, k, arrays]),                          # another wire version
            forged(layout=[v, "zz", arrays]),                        # unknown kind
            forged(layout=[v, k, [[*obs[:1], "|O", *obs[2:]]]]),     # object dtype refused
            forged(layout=[v, k, [[obs[0], obs[1], [-3], 0, 0, 12]]]),   # negative shape
            forged(layout=[v, k, [[obs[0], obs[1], [3], 0, 0, 16]]]),    # size does not match shape
            forged(data=data[:100]),                                 # arrays run past the frame
            forged(layout=[v, k, [[obs[0], obs[1], obs[2], 0, -1, obs[5]]]]),  # names a frame that is not there
            forged(scalars=[0.0, False, False, [1, 2]]),             # info is not a dict
            forged(scalars=[0.0, False]),                            # scalars missing
            [good[0], b"extra frame"],                               # a frame the layout does not name
        ]
        for frames in bad:
            raw.send_multipart(frames)
        raw.send_multipart(good)
        got = _recv_n(r, 1)
        assert len(got) == 1 and isinstance(got[0], Transition)
        _same(_t(0), got[0])
        assert r.rejected == len(bad) and r.received == 1
        assert r.recv(50) is None
        raw.close(0)
        ctx.term()


def _encode(t):
    from tinker_core.transport import encode

    frames, _ = encode(t)
    return [bytes(f) for f in frames], None


def test_send_refuses_what_it_cannot_frame():
    with TransitionSender("tcp://127.0.0.1:1") as s:
        with pytest.raises(TransportError, match="send: expected a Transition or TransitionBatch, got dict"):
            s.send({"obs": 1})  # type: ignore[arg-type]
        t = Transition(np.zeros(3, np.float32), np.zeros(1, np.float32), 0.0, False, info={"f": object()})
        with pytest.raises(TransportError, match="cannot frame the message: cannot send a object in info"):
            s.send(t)
        t = Transition(np.array(["a"], dtype=object), np.zeros(1, np.float32), 0.0, False)
        with pytest.raises(TransportError, match="obs: cannot send an array of dtype object"):
            s.send(t)
        with pytest.raises(TransportError, match=r"send_many\[1\]: expected a Transition, got int"):
            s.send_many([_t(0), 5])  # type: ignore[list-item]
    with pytest.raises(TransportError, match="sender is closed"):
        s.send(_t(0))


def test_endpoint_errors_are_clear(tmp_path):
    with pytest.raises(TransportError, match=r"endpoint 'localhost:5555': expected tcp://HOST:PORT, ipc:///PATH"):
        TransitionReceiver("localhost:5555")
    with TransitionReceiver("tcp://127.0.0.1:*") as r:
        with pytest.raises(TransportError, match=rf"endpoint '{r.endpoint}': cannot bind: address already in use"):
            TransitionReceiver(r.endpoint)
    with pytest.raises(TransportError, match="endpoint 'tcp://no-such-host.invalid:x': cannot bind"):
        TransitionReceiver("tcp://no-such-host.invalid:x")
    with pytest.raises(TransportError, match="hwm: expected >= 1, got 0"):
        TransitionSender("tcp://127.0.0.1:1", hwm=0)


def test_weights_latest_version_wins():
    pub = WeightsPublisher("tcp://127.0.0.1:*")
    sub = WeightsSubscriber(pub.endpoint)
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    deadline = time.monotonic() + 10
    got = None
    while got is None and time.monotonic() < deadline:  # PUB/SUB: wait until the subscription is up
        pub.publish(0, {"w": w}, {})
        got = sub.poll(50)
    for v in range(1, 10):
        pub.publish(v, {"w": w * v, "onnx": b"\x08\x01model"}, {"step": v * 100, "shape": (3, 4)})
    latest = None
    while time.monotonic() < deadline:
        g = sub.poll(100)
        if g is None:
            break
        latest = g
        if g[0] == 9:
            break
    assert latest is not None and latest[0] == 9, "the newest version must arrive"
    version, blobs, meta = latest
    np.testing.assert_array_equal(blobs["w"], w * 9)
    assert blobs["onnx"] == b"\x08\x01model" and meta == {"step": 900, "shape": [3, 4]}
    assert sub.received < 10  # conflated: a slow subscriber skips stale versions
    with pytest.raises(TransportError, match="blob 'x' must be bytes or a numpy array, got list"):
        pub.publish(10, {"x": [1, 2]})
    with pytest.raises(TransportError, match="version must be an int, got str"):
        pub.publish("10", {})  # type: ignore[arg-type]
    pub.close()
    sub.close()


def test_control_request_reply_errors_and_timeouts():
    def handler(req):
        if req.get("cmd") == "boom":
            raise RuntimeError("handler failed")
        return {"ok": True, "cmd": req.get("cmd"), "n": 3}

    server = ControlServer("tcp://127.0.0.1:*", handler).start()
    client = ControlClient(server.endpoint, timeout_ms=2000)
    assert client.request({"cmd": "status"}) == {"ok": True, "cmd": "status", "n": 3}
    assert client.request({"cmd": "boom"}) == {"ok": False, "error": "RuntimeError: handler failed"}
    ep = server.endpoint
    server.close()
    t0 = time.monotonic()
    with pytest.raises(TransportError, match=r"no reply within 300 ms \(is the server running\?\)"):
        client.request({"cmd": "status"}, timeout_ms=300)
    assert time.monotonic() - t0 < 5  # bounded, never forever
    server = ControlServer(ep, handler).start()  # the client recovers once a server is back
    assert client.request({"cmd": "again"})["cmd"] == "again"
    server.close()
    client.close()


def test_curve_keypair_files(tmp_path):
    pub, sec = curve_keypair(tmp_path, "learner")
    assert stat.S_IMODE(os.stat(tmp_path / "learner.key_secret").st_mode) == 0o600
    assert curve_keypair(tmp_path, "learner") == (pub, sec)
    assert read_public_key(tmp_path / "learner.key") == pub
    assert b"secret" not in (tmp_path / "learner.key").read_bytes()
    os.chmod(tmp_path / "learner.key_secret", 0o644)
    with pytest.raises(TransportError, match=r"readable by group/others \(mode 0o644\); chmod 600 it"):
        curve_keypair(tmp_path, "learner")
    with pytest.raises(TransportError, match="CurveClient.server_public: expected a 40-character z85 CURVE key"):
        CurveClient(sec, pub, b"short")


def _peer(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.Popen([sys.executable, PEER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def test_two_processes_exchange_transitions(tmp_path):
    rx = _peer("recv", f"ipc://{tmp_path}/x.sock", "300")
    assert rx.stdout.readline().strip() == "ready"
    with TransitionSender(f"ipc://{tmp_path}/x.sock", hwm=100000) as s:
        time.sleep(0.2)
        ts = [Transition(np.full(1024, i, np.float32), np.zeros(2, np.float32), 0.0, False) for i in range(300)]
        assert s.send_many(ts[:200]) == 200
        assert all(s.send(t) for t in ts[200:])
        out, err = rx.communicate(timeout=60)
    assert out.strip() == f"received=300 rejected=0 checksum={1024 * sum(range(300)):g}", err


def test_two_processes_with_curve_and_wrong_keys_get_nothing_through(tmp_path):
    keys = tmp_path / "keys"
    spub, ssec = curve_keypair(keys, "learner")
    gpub, _ = curve_keypair(keys, "robot")
    curve_keypair(keys, "intruder")  # a valid key pair that the server does not list
    curve_keypair(keys, "fake_server")
    server = CurveServer(ssec, spub, allowed_clients=[gpub])
    with TransitionReceiver("tcp://127.0.0.1:*", curve=server) as r:
        ep = r.endpoint
        # All four clients send at the same time; only the listed one with the right server key gets through.
        intruder = _peer("send", ep, "40", "intruder", str(keys), "intruder", "learner")
        wrong_server = _peer("send", ep, "40", "wrong_server", str(keys), "robot", "fake_server")
        plain = _peer("send", ep, "40", "plain")  # no CURVE at all
        robot = _peer("send", ep, "60", "robot", str(keys), "robot", "learner")
        got = _recv_n(r, 60, timeout_s=30)
        for p in (intruder, wrong_server, plain):
            p.communicate(timeout=60)
            assert p.returncode == 0
        out, err = robot.communicate(timeout=60)
        assert out.strip() == "sent=60 dropped=0", err
        got += _recv_n(r, 1, timeout_s=0.5)  # nothing else may arrive after the bad clients finished
        assert len(got) == 60 and {t.info["src"] for t in got} == {"robot"}
        assert [t.info["i"] for t in got] == list(range(60))
        np.testing.assert_array_equal(got[7].obs["joints"], np.full(7, 7, np.float32))
        assert got[49].terminated and not got[48].terminated
        assert r.rejected == 0


def test_free_endpoints_are_distinct_and_bindable():
    from tinker_core.transport import free_endpoints

    ends = free_endpoints(8)
    assert len(set(ends)) == 8 and all(e.startswith("tcp://127.0.0.1:") for e in ends)
    socks = [zmq.Context.instance().socket(zmq.PULL) for _ in ends]
    try:
        for s, e in zip(socks, ends):
            s.bind(e)  # all at once: none was handed out twice
    finally:
        for s in socks:
            s.close(linger=0)
