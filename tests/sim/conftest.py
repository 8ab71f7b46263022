"""Shared fixtures for the sim tests: real PyBullet envs, closed after each test."""

from __future__ import annotations

import pytest

import tinker_sim as sim


@pytest.fixture
def make_env():
    """Factory ``make_env(env_id="tinker/ArmReach-v0", **kwargs)``; every env it makes is closed afterwards."""
    made = []

    def _make(env_id: str = "tinker/ArmReach-v0", **kwargs):
        env = sim.make(env_id, **kwargs)
        made.append(env)
        return env

    yield _make
    for env in made:
        env.close()
