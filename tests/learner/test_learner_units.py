"""In-process pieces of the learner: the sim/real mix, config checks, and publishing only through the gate."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from tinker_core.errors import ConfigError
from tinker_core.learner import Learner, LearnerConfig, MixedReplay
from tinker_core.replay import StorageConfig


def test_mix_draws_the_configured_real_fraction(pendulum):
    mix = MixedReplay(1000, 1000, real_fraction=0.25, prioritized=True, storage=StorageConfig(), seed=0)
    for t in pendulum(100, source="sim") + pendulum(40, seed=1, source="real", start_seq=1000):
        mix.add(t)
    assert {k: len(b) for k, b in mix.buffers.items()} == {"sim": 100, "real": 40, "intervention": 0}
    batch, weights, slots = mix.sample(64)
    assert len(batch) == 64 and weights.shape == (64,)
    assert len(slots["real"]) == 16 and len(slots["sim"]) == 48
    mix.update_priorities(slots, np.ones(64))  # one TD error per sampled transition, split back per source
    only_sim = MixedReplay(100, 100, real_fraction=0.5, prioritized=False, storage=StorageConfig())
    for t in pendulum(10):
        only_sim.add(t)
    assert only_sim.split(8) == {"sim": 8, "real": 0, "intervention": 0}  # no real data yet: everything from simulation


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"LearnerConfig.real_fraction: expected 0..1, got 1.5"):
        LearnerConfig(real_fraction=1.5)
    with pytest.raises(ConfigError, match=r"LearnerConfig.device"):
        LearnerConfig(device="tpu")
    with pytest.raises(ConfigError, match=r"LearnerConfig.transitions_endpoint and LearnerConfig.weights_endpoint "
                                          r"are both 'tcp://127.0.0.1:6000'"):
        LearnerConfig(transitions_endpoint="tcp://127.0.0.1:6000", weights_endpoint="tcp://127.0.0.1:6000")


@pytest.fixture
def small_learner(tmp_path):
    from tinker_cli.learner import make_algo, make_env
    from tinker_core.transport import free_endpoints

    calls: list[int] = []

    def publisher(algo, version: int, recorded_obs=None) -> Path:
        calls.append(version)
        out = tmp_path / f"v{version}"
        out.mkdir()
        (out / "policy.bin").write_bytes(b"weights")
        return out

    t, w, p, c = free_endpoints(4)
    cfg = LearnerConfig(transitions_endpoint=t, weights_endpoint=w, params_endpoint=p,
                        control_endpoint=c, env_id="Pendulum-v1", gate_episodes=1,
                        algo_kwargs={"net_arch": [16], "torch_threads": 1})
    algo_factory = functools.partial(make_algo, "sac", "Pendulum-v1", None, cfg.algo_kwargs, "cpu", 0)
    learner = Learner(cfg, algo_factory, publisher, functools.partial(make_env, "Pendulum-v1")).open()
    yield learner, calls
    learner.close(checkpoint=False)


def test_bundles_are_published_only_after_the_gate_passes(small_learner):
    learner, calls = small_learner
    learner.config.gate_min_return = 1e9  # no policy reaches this: the gate must hold it back
    gate = learner.command({"cmd": "publish"})["gate"]
    assert not gate["passed"] and "mean return" in gate["reason"] and calls == []
    assert learner.version == 0
    learner.command({"cmd": "set", "values": {"gate_min_return": None}})
    gate = learner.command({"cmd": "publish"})["gate"]
    assert gate["passed"] and calls == [1] and learner.version == 1
    assert learner.published[-1]["sha256"] and learner.published[-1]["version"] == 1
    # no update since: the same weights are not published again as v2 (the demo's final publish did, right after the
    # periodic one, and waited 30 s for a policy node that saw the same actor and kept reporting v1)
    again = learner.command({"cmd": "publish"})["gate"]
    assert not again["published"] and "nothing new to publish" in again["reason"] and again["version"] == 1
    assert calls == [1] and learner.version == 1 and len(learner.published) == 1
    learner.env_factory = None  # without a gate env nothing can be published
    assert not learner.try_publish()["passed"] and calls == [1]


def test_ppo_learns_from_whole_rollouts_of_one_stream(tmp_path, pendulum):
    """An on-policy algorithm gets time-ordered rollouts per source stream instead of replay samples."""
    import time

    from tinker_cli.learner import make_algo
    from tinker_core.transport import TransitionSender, free_endpoints

    t, w, p, c = free_endpoints(4)
    cfg = LearnerConfig(transitions_endpoint=t, weights_endpoint=w, params_endpoint=p,
                        control_endpoint=c, algo="ppo", param_sync_every=1)
    factory = functools.partial(make_algo, "ppo", "Pendulum-v1", None,
                                {"n_steps": 64, "batch_size": 32, "n_epochs": 1, "net_arch": [16], "torch_threads": 1},
                                "cpu", 0)
    learner = Learner(cfg, factory).open()
    try:
        assert learner.on_policy
        tx = TransitionSender(cfg.transitions_endpoint)
        tx.send_many(pendulum(150))
        deadline = time.monotonic() + 30
        while learner.updates < 2 and time.monotonic() < deadline:
            learner.tick()
        assert learner.updates == 2  # 150 transitions = two rollouts of 64, 22 left waiting
        assert learner.ingested["sim"] == 150 and len(learner.replay) == 0
        assert sum(len(v) for v in learner._streams.values()) == 22
        tx.close()
    finally:
        learner.close(checkpoint=False)


def test_non_finite_weights_are_never_published_or_checkpointed_and_roll_back(small_learner, tmp_path):
    import torch

    from tinker_core.diagnostics import DivergenceError
    from tinker_core.learner.params import weights_finite

    learner, calls = small_learner
    learner.config.checkpoint_dir = str(tmp_path / "ckpt")
    with torch.no_grad():
        next(learner.algo.parameters()).fill_(float("nan"))  # what a diverged update leaves behind
    with pytest.raises(DivergenceError, match="weights"):
        learner.try_publish()
    with pytest.raises(DivergenceError, match="weights"):
        learner.checkpoint()
    assert calls == [] and not (tmp_path / "ckpt" / "algo").exists()
    learner.on_divergence(DivergenceError("critic_loss is NaN"))
    assert weights_finite(learner.algo) and not learner.paused
    st = learner.status()
    assert st["divergences"] == 1 and st["last_divergence"]["from"] == "the last parameters sent to workers"
    assert "critic_loss is NaN" in st["last_divergence"]["message"]
    assert learner.try_publish()["passed"] and calls == [1]


def test_gate_refuses_a_candidate_that_latches_the_safety_estop():
    """The gate env is the CLI's (SafetyWrapper in the loop); a candidate that drives the arm down into the
    table latches the collision e-stop; one that holds still does not."""
    from tinker_cli.learner import make_gate_env
    from tinker_core.learner.gate import run_gate

    class DivePolicy:
        def predict(self, obs, deterministic=True):
            return np.array([0, 1, 0, 1, 0, 1, 0], dtype=np.float32)

    class ZeroPolicy:
        def predict(self, obs, deterministic=True):
            return np.zeros(7, dtype=np.float32)

    factory = functools.partial(make_gate_env, "tinker/ArmReach-v0", {"randomize": True})
    bad = run_gate(DivePolicy(), factory, episodes=2, min_success=0.0, min_return=None, seed=0)
    assert not bad.passed and bad.estops >= 1 and "e-stop" in bad.reason
    ok = run_gate(ZeroPolicy(), factory, episodes=2, min_success=0.0, min_return=None, seed=0)
    assert ok.passed and ok.estops == 0, ok.reason


def test_updates_per_interval_sets_the_replay_ratio(small_learner, pendulum):
    learner, _ = small_learner
    learner.config.warmup = 10
    for t in pendulum(20):
        learner.replay.add(t)
    learner.ingested["sim"] = 20
    assert learner._update_budget() == 11  # (20 - 10) // 1 + 1 updates allowed, none done yet
    learner.config.updates_per_interval = 4
    assert learner._update_budget() == 44
    with pytest.raises(ConfigError, match=r"LearnerConfig.updates_per_interval"):
        LearnerConfig(updates_per_interval=0)
