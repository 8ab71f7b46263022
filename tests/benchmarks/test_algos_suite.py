"""benchmarks/algos.py's task suite (benchmarks/_suite.py): the task table is well-formed (each RL Zoo entry
loads into tinker's config, the suite covers what issue 27 names) and the FLOP counter behind the GFLOP/s
figures counts a known MLP right. No training, no timing."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _suite  # noqa: E402
from _suite import TASKS, entry_without, mlp_flops, not_applied, parse_kwargs, steps_to, update_flops  # noqa: E402

from tinker_core.algos import DQNConfig, PPOConfig, SACConfig  # noqa: E402
from tinker_core.rlzoo import from_rlzoo  # noqa: E402

CONFIGS = {"ppo": PPOConfig, "sac": SACConfig, "dqn": DQNConfig}


def test_the_suite_covers_issue_27s_tasks():
    covered = {(t.env, t.algo, "replay_buffer_class" in t.entry) for t in TASKS.values()}
    for need in [("Pendulum-v1", "ppo", False), ("Pendulum-v1", "sac", False),
                 ("MountainCarContinuous-v0", "ppo", False), ("MountainCarContinuous-v0", "sac", False),
                 ("Acrobot-v1", "dqn", False), ("CartPole-v1", "dqn", False), ("PandaReach-v3", "sac", True)]:
        assert need in covered, need


@pytest.mark.parametrize("name", sorted(TASKS))
def test_each_task_is_well_formed_and_loads_into_tinker(name):
    t = TASKS[name]
    assert t.name == name and t.algo in CONFIGS
    assert t.steps >= 10_000 and 0 < t.quick_steps < t.steps
    assert t.threshold_source
    if t.goal:
        assert t.env_import == "panda_gym" and t.gym_id == "panda_gym:PandaReach-v3"
    # what tinker cannot apply is named, and the rest is a valid tinker config
    settings = from_rlzoo(entry_without(t, "tinker"), t.algo, CONFIGS[t.algo], where=name)
    cfg = CONFIGS[t.algo](**settings.section)
    if "learning_rate" in t.entry:
        assert cfg.learning_rate == pytest.approx(float(t.entry["learning_rate"]))
    if "policy_kwargs" in t.entry:
        parse_kwargs(t.entry["policy_kwargs"])


def test_sac_on_mountaincar_applies_gsde_for_tinker_and_records_sbx_without():
    t = TASKS["sac_mountaincar"]
    assert not_applied(t, "tinker") == {}  # tinker's SAC and PPO have gSDE
    e = entry_without(t, "tinker")
    assert e["use_sde"] is True and "log_std_init" in str(e["policy_kwargs"])
    assert not_applied(TASKS["ppo_mountaincar"], "tinker") == {}
    assert not_applied(t, "sb3") == {}
    assert set(not_applied(t, "sbx")) == {"use_sde", "policy_kwargs.log_std_init"}


def test_mlp_flops_of_a_known_mlp():
    # 3 -> 64 -> 64 -> 1: weights 3*64 + 64*64 + 64*1 = 4352 multiply-adds, biases 64 + 64 + 1
    assert mlp_flops([3, 64, 64, 1]) == 2 * 4352 + 129
    # one DQN gradient step: Q net forward + backward (3 forwards) and the target's forward, per sample
    assert update_flops("dqn", 3, 1, [64, 64], batch=10) == 10 * 4 * (2 * 4352 + 129)
    fa = mlp_flops([3, 256, 256, 2])
    fc = mlp_flops([4, 256, 256, 1])
    assert update_flops("sac", 3, 1, [256, 256], batch=1) == 4 * fa + 2 * 7 * fc


def test_task_flops_use_the_entrys_networks_and_batch():
    t = TASKS["sac_mountaincar"]  # net_arch [64, 64], batch 512
    assert _suite.task_update_flops(t, 2, 1) == update_flops("sac", 2, 1, [64, 64], 512)
    p = TASKS["ppo_mountaincar"]  # batch 256 > rollout 8: one minibatch of the rollout
    assert _suite.task_update_flops(p, 2, 1) == update_flops("ppo", 2, 1, [64, 64], 8)
    assert _suite.ppo_samples_per_update(p) == 10


def test_steps_to_threshold():
    curve = [(i * 100, float(r)) for i, r in enumerate([0] * 10 + [100] * 10)]
    assert steps_to(curve, 50.0) == 1400  # the 15th episode: mean of the last 10 reaches 50
    assert steps_to(curve, 101.0) is None
