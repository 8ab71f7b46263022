"""`CommandLatencyProbe` on the PyBullet arm: the latency the simulator puts between a command and the motors
(``action_latency_steps``) is found from the commands and joint states alone."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import tinker_sim
from tinker_core.errors import ConfigError
from tinker_sim.dynamics import DynamicsParams
from tinker_sim.latency_probe import CommandLatencyProbe


@pytest.mark.parametrize("latency", [0, 3])
def test_the_probe_finds_the_arms_command_latency(latency):
    env = CommandLatencyProbe(tinker_sim.make("tinker/ArmReach-v0", dynamics=DynamicsParams(
        action_latency_steps=latency)), until_known=True)
    rng = np.random.default_rng(latency)
    try:
        for episode in range(8):
            env.reset(seed=100 + episode)
            for _ in range(25):  # a wandering arm: the reach's random actions
                env.step(rng.uniform(-1, 1, env.action_space.shape))
    finally:
        env.close()
    got = env.estimate()
    assert got.periods == latency, got
    assert env.episodes_fed < 8  # it stopped listening once the estimate stood


def test_the_probe_refuses_an_env_that_reports_no_commanded_target():
    with pytest.raises(ConfigError, match="commanded_target"):
        CommandLatencyProbe(gym.make("CartPole-v1"))
    with pytest.raises(ConfigError, match="episodes"):
        CommandLatencyProbe(tinker_sim.make("tinker/ArmReach-v0"), episodes=0)
