"""A live learner process: ctl commands act on the run; kill -9 and restart resume from the checkpoint
without losing acknowledged transitions; a sender never blocks and reconnects on its own."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np

from tinker_cli.learner import make_env
from tinker_core.learner import DistributedTrainer
from tinker_core.replay import ReplayBuffer
from tinker_core.transport import TransitionSender


def test_ctl_kill9_restart_resume_and_reconnect(learner_factory, pendulum, tmp_path):
    ckpt = tmp_path / "ckpt"
    lp = learner_factory(checkpoint_dir=str(ckpt)).start()
    # the "bridge": one sender for the whole test, never recreated, never blocking
    bridge = TransitionSender(lp.cfg["transitions_endpoint"], hwm=2000)
    sim_ts = pendulum(500, seed=1, source="sim")
    real_ts = pendulum(200, seed=2, source="real", start_seq=10_000)
    bridge.send_many(sim_ts[:400] + real_ts[:100])
    st = lp.wait(lambda s: sum(s["ingested"].values()) == 500 and s["updates"] > 20)
    assert st["ingested"] == {"sim": 400, "real": 100, "intervention": 0}

    # ctl set: the algorithm's learning rate changes on the live run
    rep = lp.ctl("set", lr=3e-4, real_fraction=0.25)
    assert rep["ok"], rep
    st = lp.status()
    assert st["algo_settings"]["lr"] == 3e-4 and st["settings"]["real_fraction"] == 0.25
    assert not lp.ctl("set", lr=-1.0)["ok"]  # refused with a message, the run goes on
    assert "lr" in lp.ctl("set", nonsense=1.0)["error"]

    # ctl pause: ingest continues, the update count stops growing; resume: it grows again
    assert lp.ctl("pause")["ok"]
    u_paused = lp.status()["updates"]
    bridge.send_many(sim_ts[400:] + real_ts[100:])
    st = lp.wait(lambda s: sum(s["ingested"].values()) == 700)
    time.sleep(1.0)
    st = lp.status()
    assert st["paused"] and st["updates"] == u_paused
    assert lp.ctl("resume")["ok"]
    lp.wait(lambda s: s["updates"] > u_paused + 10)

    # ctl checkpoint: everything ingested so far is acknowledged
    rep = lp.ctl("checkpoint")
    assert rep["ok"], rep
    acked, ckpt_updates = rep["checkpoint"]["acked"], rep["checkpoint"]["updates"]
    assert acked == 700

    # kill -9 mid-run; the bridge keeps sending while nobody listens: it never blocks
    lp.kill9()
    later = pendulum(300, seed=3, source="sim", start_seq=20_000)
    for t in later[:150]:
        bridge.send(t)
    assert bridge.sent + bridge.dropped == 700 + 150

    # restart with the same checkpoint dir: algorithm, replay, counters and settings come back
    lp.start()
    st = lp.wait(lambda s: s["restored_from"] is not None)
    assert st["restored_from"] == str(ckpt)
    assert st["updates"] >= ckpt_updates
    assert st["replay"]["sim"] + st["replay"]["real"] >= acked
    assert st["settings"]["lr"] == 3e-4 and st["algo_settings"]["lr"] == 3e-4
    # the same sender object reaches the new process (ZeroMQ reconnects; queued messages are delivered)
    for t in later[150:]:
        bridge.send(t)
    st = lp.wait(lambda s: s["ingested"]["sim"] >= 500 + 150 and s["updates"] > ckpt_updates)

    # the local backend (same worker code as the Ray actors, on threads here) feeds the restarted learner
    # and, in sync mode, acts with parameters the learner sent after its restart
    before = lp.status()["ingested"]["sim"]
    env_factory = functools.partial(make_env, "Pendulum-v1")
    with DistributedTrainer(env_factory, lp.cfg["transitions_endpoint"], lp.cfg["params_endpoint"],
                            lp.cfg["control_endpoint"], backend="local", num_workers=2, sync="sync",
                            worker_cache_size=50, param_sync_every=100) as trainer:
        out = trainer.run(total_steps=400, steps_per_round=100, wait_timeout_s=60)
    assert out["steps"] == 400 and out["dropped"] == 0 and out["rounds"] == 2
    assert all(v is not None for v in out["param_versions"])
    lp.wait(lambda s: s["ingested"]["sim"] == before + 400)

    # every acknowledged transition is in the restored replay: count them by their ids
    rep = lp.ctl("checkpoint")
    assert rep["ok"], rep
    seqs = set()
    for src in ("sim", "real"):
        buf = ReplayBuffer.load(ckpt / f"replay_{src}")
        seqs |= {i["seq"] for i in buf.storage.get(np.arange(len(buf))).info}
    acked_ids = {t.info["seq"] for t in sim_ts + real_ts}
    assert acked_ids <= seqs
    assert {t.info["seq"] for t in later[150:]} <= seqs  # sent after the restart: arrived
    assert lp.stop() == 0
    assert (Path(ckpt) / "learner.json").is_file()
    bridge.close()
