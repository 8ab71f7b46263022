"""PPO's compiled update (ppo_native.cpp) against the autograd update it replaces (`PPO._minibatch`,
held to Stable-Baselines3's losses in test_ppo_sde_fast_paths.py), and where it does not apply.

The extension is really built here (once per machine, cached); only a machine without a C++ compiler
skips, and says so. Bit-for-bit resume of the compiled update is in test_checkpoint_resume.py
(`tiny_ppo_sde` runs it)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from tinker_core.algos import PPO, PPOConfig, native
from tinker_core.algos.ppo_native import NativePPOUpdate

needs_compiler = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                    reason="no C++ compiler on this machine: the compiled update cannot be built")


def _params(algo: PPO) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in algo.parameters()])


@needs_compiler
@pytest.mark.parametrize("kw", [
    dict(use_sde=True, sde_sample_freq=4),  # RL Zoo's Pendulum-v1 entry
    dict(),  # state-independent std
    dict(use_sde=True, ent_coef=0.5, clip_range_vf=0.2, normalize_advantage=False),
    dict(ent_coef=0.5, activation="relu", net_arch=[32, 24], max_grad_norm=0.1),
    dict(net_arch=[16, 16, 16], n_steps=100, batch_size=48),  # three hidden layers, a short last minibatch
])
def test_compiled_update_is_the_autograd_update(kw):
    """Same weights, Adam state and metrics after several updates, up to float rounding."""
    cfg = dict(n_steps=128, n_epochs=3, batch_size=64, n_envs=2, learning_rate=1e-3, gamma=0.9, seed=0)
    cfg.update(kw)
    algos = [PPO("Pendulum-v1", PPOConfig(**cfg, compiled_update=c)) for c in (True, False)]
    assert isinstance(algos[0]._native, NativePPOUpdate) and algos[1]._native is None
    assert not algos[0]._native.ready(algos[0].opt)  # the first update makes Adam's state, through autograd
    steps = cfg["n_steps"] * cfg["n_envs"]
    for a in algos:
        a.learn(steps, progress=False)
    assert algos[0]._native.ready(algos[0].opt), native.unavailable_reason()
    torch.testing.assert_close(_params(algos[0]), _params(algos[1]), rtol=0, atol=0)
    for a in algos:  # one update from the same weights and the same rollout
        a.learn(steps, progress=False)
    # the last minibatch's clipped gradient, and the weights after every minibatch's Adam step
    g = [a.flat.flat.grad for a in algos]
    torch.testing.assert_close(g[0], g[1], rtol=1e-4, atol=1e-4 * float(g[1].abs().max()))
    torch.testing.assert_close(_params(algos[0]), _params(algos[1]), rtol=1e-5, atol=1e-6)
    for a in algos:
        a.learn(2 * steps, progress=False)
    assert algos[0].num_updates == algos[1].num_updates > 0
    torch.testing.assert_close(_params(algos[0]), _params(algos[1]), rtol=1e-4, atol=1e-5)
    st = [a.opt.state[a.flat.flat] for a in algos]
    assert float(st[0]["step"]) == float(st[1]["step"]) == algos[0].num_updates
    torch.testing.assert_close(st[0]["exp_avg"], st[1]["exp_avg"], rtol=1e-3, atol=1e-6)
    for k in ("policy_loss", "value_loss", "grad_norm/policy", "approx_kl", "clip_fraction"):
        assert float(algos[0]._metrics[k]) == pytest.approx(float(algos[1]._metrics[k]), rel=1e-3, abs=1e-6), k
    h = [np.array(a.episode_history) for a in algos]  # (step, return): the same episodes, up to rounding
    assert h[0].shape == h[1].shape and len(h[0]) > 0
    np.testing.assert_allclose(h[0], h[1], rtol=1e-4)


@needs_compiler
def test_hot_changes_reach_the_compiled_update():
    """A learning rate or clip range changed while running (the control interface) is what the next
    compiled update uses: a zero learning rate freezes the weights."""
    algo = PPO("Pendulum-v1", PPOConfig(n_steps=64, batch_size=32, n_epochs=2, n_envs=2, use_sde=True, seed=0))
    algo.learn(256, progress=False)
    assert algo._native.ready(algo.opt)
    algo.control.set(lr=0.0)
    algo.control.apply_pending()
    before = _params(algo)
    algo.learn(128, progress=False)
    torch.testing.assert_close(_params(algo), before, rtol=0, atol=0)


def test_where_the_compiled_update_does_not_apply():
    """Discrete actions, non-MLP perception or compiled_update=False keep autograd; so does TINKER_NATIVE=0."""
    assert PPO("CartPole-v1", PPOConfig(n_steps=16, batch_size=16))._native is None
    assert PPO("Pendulum-v1", PPOConfig(n_steps=16, batch_size=16, compiled_update=False))._native is None
    plain = PPO("Pendulum-v1", PPOConfig(n_steps=16, batch_size=16))
    assert NativePPOUpdate.create(plain.fused, False, False, torch.device("meta")) is None
    assert NativePPOUpdate.create(None, False, False, torch.device("cpu")) is None


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv("TINKER_NATIVE", "0")
    algo = PPO("Pendulum-v1", PPOConfig(n_steps=32, batch_size=32, n_epochs=1, seed=0))
    assert algo._native is None
    algo.learn(96, progress=False)
    assert algo.num_updates == 3 and np.isfinite(_params(algo).numpy()).all()
