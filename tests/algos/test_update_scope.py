"""`update_scope`: every gradient update runs with denormals flushed to zero on its thread (Adam's second moments
decay into that range, where an x86 core is many times slower), and nothing outside an update is changed."""

from __future__ import annotations

import platform
import threading

import pytest
import torch

from tinker_core.algos import PPO, SAC, PPOConfig, SACConfig
from tinker_core.algos.optim import update_scope

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                                reason="flush-to-zero is an x86 CPU setting here (torch.set_flush_denormal)")


def flushed() -> bool:
    """A denormal times one is zero only while this thread flushes denormals."""
    return float(torch.tensor([1e-39]) * 1.0) == 0.0


def test_the_scope_flushes_on_its_own_thread_and_restores_after_the_outermost_scope():
    assert not flushed()
    seen: list[bool] = []
    ask, done = threading.Event(), threading.Event()

    def other_thread() -> None:  # started before the scope (a new thread copies its creator's setting)
        ask.wait(10)
        seen.append(flushed())
        done.set()

    other = threading.Thread(target=other_thread)
    other.start()
    with update_scope():
        assert flushed()
        ask.set()
        done.wait(10)
        with update_scope():
            assert flushed()
        assert flushed()  # an inner scope leaves the setting to the outer one
    other.join()
    assert not flushed() and seen == [False]  # another thread keeps its own setting


@pytest.mark.parametrize("algo", ["sac", "ppo"])
def test_training_runs_its_updates_flushed_and_leaves_the_env_steps_as_they_were(algo):
    if algo == "sac":
        a = SAC("Pendulum-v1", SACConfig(batch_size=32, learning_starts=50, seed=0))
        step = "_train_step"
    else:
        a = PPO("Pendulum-v1", PPOConfig(n_steps=64, batch_size=32, n_epochs=1, seed=0))
        step = "_minibatch"
    owner = a._native if algo == "ppo" and a._native is not None else a  # PPO's compiled update: one call
    step = "update" if owner is not a else step
    inner, during = getattr(owner, step), []

    def spy(*args, **kwargs):
        during.append(flushed())
        return inner(*args, **kwargs)

    setattr(owner, step, spy)
    a.learn(200, progress=False, tensorboard=False)
    assert during and all(during), during
    assert not flushed()
