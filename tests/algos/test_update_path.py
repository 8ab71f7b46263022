"""A configuration that keeps an update off the compiled step says so, once, and the algorithm reports its path."""

from __future__ import annotations

import logging

import pytest

from tinker_core.algos import PPO, SAC, PPOConfig, SACConfig, native


@pytest.fixture(autouse=True)
def fresh_process_memory(monkeypatch):
    """What was already said in this test process (other tests build such algorithms too) is forgotten."""
    monkeypatch.setattr(native, "_slow_paths", set())


def test_sac_says_when_its_networks_leave_the_compiled_step(caplog):
    with caplog.at_level(logging.WARNING, logger="tinker.train"):
        fast = SAC("Pendulum-v1", SACConfig(net_arch=[16], seed=0))
        slow = SAC("Pendulum-v1", SACConfig(net_arch=[16], activation="elu", seed=0))
        SAC("Pendulum-v1", SACConfig(net_arch=[16], activation="elu", seed=1))
    assert fast.update_path in ("compiled", "python step") and slow.update_path == "autograd"
    said = [r.getMessage() for r in caplog.records if "SAC: the update runs on the autograd path" in r.getMessage()]
    assert len(said) == 1 and "ReLU or Tanh" in said[0], said  # once per process and reason


def test_ppo_reports_its_path_and_why_not_compiled(caplog):
    with caplog.at_level(logging.WARNING, logger="tinker.train"):
        off = PPO("Pendulum-v1", PPOConfig(n_steps=64, batch_size=32, compiled_update=False, seed=0))
        on = PPO("Pendulum-v1", PPOConfig(n_steps=64, batch_size=32, seed=0))
    assert off.update_path == "autograd" and on.update_path == "compiled"
    assert any("PPO: the update runs on the autograd path, not the compiled step: compiled_update=False"
               in r.getMessage() for r in caplog.records)
