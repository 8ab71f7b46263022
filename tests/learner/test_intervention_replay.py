"""A person's interventions as the learner's own buffer (HIL-SERL / RLPD): routing, the declared batch share,
persistence with the learner's replay (nothing half-written), and the counts in ``ctl status``. No ROS: the
transitions come over the learner's real ZeroMQ socket, as the experience bridge sends them."""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path

import numpy as np
import pytest

from tinker_core.errors import ConfigError
from tinker_core.learner import Learner, LearnerConfig, MixedReplay
from tinker_core.learner.mix import source_of
from tinker_core.replay import StorageConfig

MARK = 77.0  # the reward of every intervention transition here, so a batch shows where each row came from


def flagged(ts: list) -> list:
    """The bridge's transitions of cycles a person took over: real-robot data with ``info["intervention"]``."""
    return [dataclasses.replace(t, reward=MARK, info={**t.info, "source": "real", "intervention": True}) for t in ts]


def test_interventions_go_to_their_own_buffer_and_fill_the_declared_share(pendulum):
    mix = MixedReplay(1000, 1000, real_fraction=0.25, prioritized=True, storage=StorageConfig(), seed=0,
                      intervention_fraction=0.5, intervention_warmup=30)
    person = flagged(pendulum(40, seed=2, source="real", start_seq=5000))
    assert source_of(person[0]) == "intervention" and source_of(pendulum(1, source="real")[0]) == "real"
    for t in pendulum(100, source="sim") + pendulum(40, seed=1, source="real", start_seq=1000) + person[:20]:
        mix.add(t)
    assert {k: len(b) for k, b in mix.buffers.items()} == {"sim": 100, "real": 40, "intervention": 20}
    assert mix.split(64) == {"sim": 48, "real": 16, "intervention": 0}  # 20 < warm-up 30: not drawn yet
    batch, _, _ = mix.sample(64)
    assert not np.any(batch.reward == MARK)
    for t in person[20:]:
        mix.add(t)
    assert mix.split(64) == {"sim": 24, "real": 8, "intervention": 32}  # half; real_fraction splits the rest
    batch, weights, slots = mix.sample(64)
    assert len(batch) == 64 and weights.shape == (64,)
    assert int(np.sum(batch.reward == MARK)) == 32 and np.all(batch.reward[-32:] == MARK)  # SOURCES order
    assert {k: len(v) for k, v in slots.items()} == {"sim": 24, "real": 8, "intervention": 32}
    assert mix.sampled == {"sim": 48 + 24, "real": 16 + 8, "intervention": 32}
    td = np.zeros(64)
    td[-32:] = 50.0  # large TD errors on the interventions only
    mix.update_priorities(slots, td)
    prio = mix.buffers["intervention"].tree  # type: ignore[attr-defined]
    assert prio.total > mix.buffers["real"].tree.total  # type: ignore[attr-defined]
    only_person = MixedReplay(100, 100, real_fraction=0.5, prioritized=False, storage=StorageConfig(),
                              intervention_warmup=1000)
    for t in person[:5]:
        only_person.add(t)
    assert only_person.split(8) == {"sim": 0, "real": 0, "intervention": 8}  # nothing else to draw from


def test_config_checks_the_intervention_settings():
    assert LearnerConfig().intervention_fraction == 0.5
    with pytest.raises(ConfigError, match=r"LearnerConfig.intervention_fraction: expected 0..1, got 1.2"):
        LearnerConfig(intervention_fraction=1.2)
    with pytest.raises(ConfigError, match=r"LearnerConfig.intervention_warmup: expected an integer >= 0"):
        LearnerConfig(intervention_warmup=-1)
    with pytest.raises(ConfigError, match=r"LearnerConfig.intervention_capacity: expected an integer >= 1"):
        LearnerConfig(intervention_capacity=0)


def _learner(ckpt: Path, **over) -> Learner:
    from tinker_cli.learner import make_algo
    from tinker_core.transport import free_endpoints

    t, w, p, c = free_endpoints(4)
    cfg = LearnerConfig(transitions_endpoint=t, weights_endpoint=w, params_endpoint=p, control_endpoint=c,
                        env_id="Pendulum-v1", batch_size=32, warmup=50, publish_every=0, param_sync_every=0,
                        checkpoint_every=0, checkpoint_dir=str(ckpt), real_fraction=0.5,
                        algo_kwargs={"net_arch": [16], "torch_threads": 1}, **over)
    return Learner(cfg, functools.partial(make_algo, "sac", "Pendulum-v1", None, cfg.algo_kwargs, "cpu", 0)).open()


def _content(learner: Learner, src: str) -> np.ndarray:
    buf = learner.replay.buffers[src]
    b = buf.storage.get(np.arange(len(buf)), with_info=False)
    return np.concatenate([np.asarray(b.obs).reshape(len(buf), -1), np.asarray(b.action).reshape(len(buf), -1)], 1)


def test_learner_ingests_counts_trains_on_and_persists_interventions(pendulum, tmp_path):
    from tinker_core.transport import TransitionSender

    ckpt = tmp_path / "ckpt"
    learner = _learner(ckpt, intervention_warmup=40)
    try:
        tx = TransitionSender(learner.config.transitions_endpoint)
        tx.send_many(pendulum(60, source="real") + flagged(pendulum(50, seed=3, start_seq=900)))
        deadline = time.monotonic() + 30
        while sum(learner.ingested.values()) < 110 and time.monotonic() < deadline:
            learner.tick()
        while learner.updates < 5 and time.monotonic() < deadline:
            learner.tick()
        st = learner.command({"cmd": "status"})
        assert st["ingested"] == {"sim": 0, "real": 60, "intervention": 50}
        assert st["replay"] == {"sim": 0, "real": 60, "intervention": 50}
        assert st["batch_mix"] == {"sim": 0, "real": 16, "intervention": 16}
        assert st["updates"] >= 5 and st["sampled"]["intervention"] == 16 * st["updates"]
        learner.command({"cmd": "set", "values": {"intervention_fraction": 0.25}})  # live, like real_fraction
        assert learner.replay.split(32)["intervention"] == 8
        saved = _content(learner, "intervention")
        learner.checkpoint()
        tx.close()
    finally:
        learner.close(checkpoint=False)
    assert (ckpt / "replay_intervention" / "index.json").is_file()
    again = _learner(ckpt)
    try:
        assert len(again.replay.buffers["intervention"]) == 50
        np.testing.assert_array_equal(_content(again, "intervention"), saved)
        assert again.ingested["intervention"] == 50
        assert again.replay.intervention_fraction == 0.25  # the operator's setting is restored with the rest
    finally:
        again.close(checkpoint=False)


def test_a_save_cut_short_leaves_the_last_checkpoint_whole(pendulum, tmp_path, monkeypatch):
    """A crash while the intervention buffer is written (its index never replaced) restores the previous save."""
    import tinker_core.replay.persist as persist

    ckpt = tmp_path / "ckpt"
    learner = _learner(ckpt)
    try:
        for t in pendulum(30, source="real") + flagged(pendulum(20, seed=3)):
            learner.ingested[learner.replay.add(t)] += 1
        learner.checkpoint()
        before = _content(learner, "intervention")
        for t in flagged(pendulum(25, seed=4)):
            learner.replay.add(t)
        real_write = persist.atomic_write_bytes

        def crash_on_index(path, data):  # fault injection: the process dies before this index is replaced
            if Path(path).name == "index.json" and Path(path).parent.name == "replay_intervention":
                raise OSError("simulated crash")
            return real_write(path, data)

        monkeypatch.setattr(persist, "atomic_write_bytes", crash_on_index)
        with pytest.raises(OSError, match="simulated crash"):
            learner.checkpoint()
        monkeypatch.setattr(persist, "atomic_write_bytes", real_write)
    finally:
        learner.close(checkpoint=False)
    again = _learner(ckpt)
    try:
        assert len(again.replay.buffers["intervention"]) == 20
        np.testing.assert_array_equal(_content(again, "intervention"), before)
    finally:
        again.close(checkpoint=False)


def test_a_checkpoint_from_before_the_intervention_buffer_restores(pendulum, tmp_path):
    """An older checkpoint (no replay_intervention, ``ingested`` without the key) resumes with an empty buffer."""
    import json
    import shutil

    ckpt = tmp_path / "ckpt"
    learner = _learner(ckpt)
    try:
        for t in pendulum(30, source="real"):
            learner.ingested[learner.replay.add(t)] += 1
        learner.checkpoint()
    finally:
        learner.close(checkpoint=False)
    shutil.rmtree(ckpt / "replay_intervention", ignore_errors=True)
    state = json.loads((ckpt / "learner.json").read_text())
    state["ingested"] = {"sim": 0, "real": 30}
    (ckpt / "learner.json").write_text(json.dumps(state))
    again = _learner(ckpt)
    try:
        assert again.ingested == {"sim": 0, "real": 30, "intervention": 0}
        assert len(again.replay.buffers["real"]) == 30 and len(again.replay.buffers["intervention"]) == 0
        again.ingested[again.replay.add(flagged(pendulum(1))[0])] += 1
        assert again.ingested["intervention"] == 1
    finally:
        again.close(checkpoint=False)
