"""A live learner process survives divergence: NaN transitions are refused at ingest, a run driven to NaN
weights (an absurd learning rate set through ctl) rolls back to its last good state instead of dying, pauses
with the reason in ``ctl status`` when it keeps diverging, and never checkpoints or publishes non-finite weights."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from tinker_core.transition import Transition
from tinker_core.transport import TransitionSender


def onnx_weights_finite(bundle: Path) -> bool:
    import onnx
    from onnx import numpy_helper

    models = sorted(bundle.glob("*.onnx"))
    assert models, f"no ONNX file in {bundle}"
    for m in models:
        for init in onnx.load(str(m)).graph.initializer:
            a = numpy_helper.to_array(init)
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                return False
    return True


def test_divergence_rolls_back_pauses_and_never_publishes_non_finite(learner_factory, pendulum, tmp_path):
    ckpt = tmp_path / "ckpt"
    lp = learner_factory(checkpoint_dir=str(ckpt), publish_every=40, gate_episodes=1, param_sync_every=10,
                         checkpoint_every=40).start()
    sender = TransitionSender(lp.cfg["transitions_endpoint"], hwm=5000)
    ts = pendulum(700, seed=4)
    # a sensor glitch: NaN reward and NaN observation; replay refuses both, the learner counts them
    bad = [Transition(ts[0].obs, ts[0].action, float("nan"), False, False, {"source": "sim"}, ts[0].next_obs),
           Transition(np.full(3, np.nan, np.float32), ts[1].action, -1.0, False, False, {"source": "sim"},
                      ts[1].next_obs)]
    sender.send_many(ts[:400] + bad)
    st = lp.wait(lambda s: s["rejected"] == 2 and s["version"] >= 1 and s["last_checkpoint"] is not None
                 and s["updates"] >= 80, timeout=120)
    assert st["ingested"]["sim"] == 400 and st["divergences"] == 0
    good_version = st["version"]

    # drive the weights to inf/NaN on the live run: the learner must not die
    rep = lp.ctl("set", lr=1e30)
    assert rep["ok"]
    set_at = rep["updates"]  # the loop applies it between two updates: every later update uses lr 1e30
    st = lp.wait(lambda s: s["paused"] and s["divergences"] >= 3, timeout=60)
    assert lp.proc.poll() is None, lp.log()
    assert "diverged" in st["paused_reason"] and "ctl resume" in st["paused_reason"]
    div = st["last_divergence"]
    assert div["rolled_back_to"] is not None and ("NaN" in div["error"] or "inf" in div["error"])
    assert div["rolled_back_to"] <= div["at_update"] and st["updates"] == div["rolled_back_to"]
    assert "Training diverged in update" in lp.log()  # said in plain words, in the process log
    # nothing from the diverged weights went out: a version published after good_version (the learner may publish
    # once more between that status and the set) was made from an update before lr 1e30; while paused,
    # transitions are still ingested
    assert st["version"] == good_version or st["published"]["updates"] <= set_at, (st["published"], set_at)
    good_version = st["version"]
    u_paused = st["updates"]
    sender.send_many(ts[400:550])
    lp.wait(lambda s: s["ingested"]["sim"] == 550)
    time.sleep(0.5)
    assert lp.status()["updates"] == u_paused
    # the weights in memory are the rolled-back good ones: a checkpoint now saves them, never the diverged ones
    rep = lp.ctl("checkpoint")
    assert rep["ok"] and rep["checkpoint"]["updates"] == u_paused, rep

    # the operator fixes the learning rate and resumes: training goes on and publishes finite bundles again
    assert lp.ctl("set", lr=1e-3)["ok"]
    assert lp.ctl("resume")["ok"]
    sender.send_many(ts[550:])
    st = lp.wait(lambda s: not s["paused"] and s["version"] > good_version and s["updates"] > u_paused + 40,
                 timeout=120)
    assert st["paused_reason"] is None
    bundles = sorted(p for p in Path(lp.cfg["bundle_dir"]).iterdir() if p.is_dir())
    assert len(bundles) == st["version"]
    assert all(onnx_weights_finite(b) for b in bundles)
    assert lp.stop() == 0
    # the checkpoint written on the clean stop holds finite weights
    from tinker_core.algos import load_algorithm
    from tinker_core.learner.params import weights_finite

    assert weights_finite(load_algorithm(ckpt / "algo"))
    sender.close()
