"""Shared fixtures for the decision-core tests: small, seeded configs that run in seconds."""

from __future__ import annotations

import pytest
import torch

from tinker_core.algos import DQNConfig, PPOConfig, SACConfig


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture
def tiny_sac() -> SACConfig:
    return SACConfig(net_arch=[32, 32], batch_size=32, learning_starts=50, buffer_size=5000, seed=3, log_interval=100)


@pytest.fixture
def tiny_ppo() -> PPOConfig:
    return PPOConfig(n_steps=64, batch_size=32, n_epochs=2, n_envs=2, net_arch=[32, 32], seed=3, log_interval=64,
                     normalize_obs=True, normalize_reward=True)


@pytest.fixture
def tiny_dqn() -> DQNConfig:
    return DQNConfig(net_arch=[32, 32], batch_size=32, learning_starts=50, buffer_size=5000, seed=3,
                     target_update_interval=20, train_freq=4, log_interval=100, prioritized=True)


@pytest.fixture
def tiny_ppo_sde() -> PPOConfig:
    return PPOConfig(n_steps=64, batch_size=32, n_epochs=2, n_envs=2, net_arch=[32, 32], seed=3, log_interval=64,
                     use_sde=True, sde_sample_freq=4)
