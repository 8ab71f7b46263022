"""The training loop's two edges (`tinker_core.training.flow`): measured in every algorithm's ``learn``, checked where
the algorithm meets its env and on every batch, a NaN found at the step it appears. Real gymnasium envs, real PPO."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from tinker_core.algos import PPO, PPOConfig
from tinker_core.algos.vec_env import VecEnv
from tinker_core.diagnostics import DivergenceError
from tinker_core.errors import SpecError, ValidationError
from tinker_core.spec import spec_from_space
from tinker_core.training.flow import TRAINING, WatchedVecEnv


def test_learn_measures_both_edges_of_the_training_graph():
    algo = PPO("Pendulum-v1", PPOConfig(n_steps=32, batch_size=32, n_epochs=1, n_envs=2, net_arch=[16], seed=1))
    algo.learn(256, progress=False, tensorboard=False)
    flow = algo.flow
    assert [e.port for e in TRAINING.edges] == ["obs", "action"]
    assert set(flow) == {"env->algorithm", "algorithm->env"}
    iterations = 256 // 2  # one vector step moves both envs
    assert flow["algorithm->env"]["messages"] == iterations
    assert flow["env->algorithm"]["messages"] == iterations  # the algorithm's time: from the observations to its next actions
    assert flow["algorithm->env"]["bytes"] == iterations * 2 * 4  # float32[1] per env
    assert flow["algorithm->env"]["latency_p50_us"] > 0 and flow["env->algorithm"]["latency_p50_us"] > 0


def test_an_env_of_another_layout_is_refused_where_it_meets_the_algorithm():
    pendulum = spec_from_space(gym.make("Pendulum-v1").observation_space)
    act = spec_from_space(gym.make("Pendulum-v1").action_space)
    cartpole = VecEnv.make(lambda: gym.make("CartPole-v1"), 1)
    with pytest.raises(SpecError, match=r"algorithm\.obs: .*\(edge env->algorithm\)"):
        WatchedVecEnv(cartpole, pendulum, act)


class _Broken(gym.Wrapper):
    """Observations turn NaN (or float64) after ``k`` steps: a broken sensor model, made on purpose."""

    def __init__(self, env, k, what):
        super().__init__(env)
        self.k, self.n, self.what = k, 0, what

    def step(self, a):
        o, r, te, tr, i = self.env.step(a)
        self.n += 1
        if self.n > self.k:
            o = np.full_like(o, np.nan) if self.what == "nan" else o.astype(np.float64)
        return o, r, te, tr, i


def test_a_nan_observation_stops_training_at_its_step_naming_the_edge():
    algo = PPO(_Broken(gym.make("Pendulum-v1"), 40, "nan"),
               PPOConfig(n_steps=32, batch_size=32, n_epochs=1, n_envs=1, net_arch=[16], seed=1))
    with pytest.raises(DivergenceError, match=r"algorithm\.obs: expected finite float32\[3\]"):
        algo.learn(256, progress=False, tensorboard=False)
    assert algo.num_timesteps < 64  # stopped within the rollout the NaN arrived in


def test_a_float64_observation_of_a_float32_space_trains_as_before_and_a_wrong_shape_does_not():
    algo = PPO(_Broken(gym.make("Pendulum-v1"), 0, "float64"),
               PPOConfig(n_steps=32, batch_size=32, n_epochs=1, n_envs=1, net_arch=[16], seed=1))
    algo.learn(64, progress=False, tensorboard=False)
    assert algo.num_timesteps == 64
    watched = algo.vec_env
    with pytest.raises(ValidationError, match=r"env\.action"):
        watched.step(np.zeros((1, 2), dtype=np.float32))
