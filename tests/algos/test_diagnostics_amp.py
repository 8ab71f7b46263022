"""Diagnostics warn in plain words; NaN stops training and keeps the last good checkpoint; loss scaling."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest
import torch

from tinker_core.algos import SAC
from tinker_core.amp import LossScalerConfig, ModulePrecision
from tinker_core.diagnostics import Diagnostics, DivergenceError
from tinker_core.transition import TransitionBatch


def test_reward_scale_warnings(caplog):
    d = Diagnostics()
    with caplog.at_level(logging.WARNING, "tinker.diagnostics"):
        assert d.rewards(np.array([500.0, -800.0, 300.0])) and "Rewards are large" in caplog.text
    assert d.rewards(np.zeros(8))[0].startswith("Rewards are all zero")
    assert d.rewards(np.ones(8)) == []  # constant nonzero reward (CartPole) is fine


def test_gradient_norm_flags_per_group():
    d = Diagnostics()
    out = d.grad_norms({"actor": 1e5, "critic": 1e-12, "encoder": 0.5})
    assert any("'actor' are exploding" in w for w in out)
    assert any("'critic' are vanishing" in w for w in out)
    assert not any("encoder" in w for w in out)


def test_entropy_collapse_and_value_loss_explosion():
    d = Diagnostics()
    assert "collapsed" in d.entropy(-20.0, floor=-7.0)[0]
    assert d.entropy(0.5, floor=-7.0) == []
    for v in [1.0, 2.0, 1.5, 1.2, 0.9, 1.1]:
        assert d.value_loss(v) == []
    assert "exploding" in d.value_loss(5e4)[0]


def test_nan_anywhere_raises():
    with pytest.raises(DivergenceError, match="NaN"):
        Diagnostics().finite("critic loss", float("nan"))
    with pytest.raises(DivergenceError, match="inf"):
        Diagnostics().grad_norms({"actor": float("inf")})


class _NaNAfter(gym.Wrapper):
    """Rewards turn NaN after ``k`` steps: a broken reward function, made on purpose."""

    def __init__(self, env, k):
        super().__init__(env)
        self.k, self.n = k, 0

    def step(self, a):
        o, r, te, tr, i = self.env.step(a)
        self.n += 1
        return o, (float("nan") if self.n > self.k else r), te, tr, i


def test_nan_stops_training_and_keeps_last_good_checkpoint(tmp_path, tiny_sac):
    tiny_sac.log_interval = 50
    algo = SAC(_NaNAfter(gym.make("Pendulum-v1"), 160), tiny_sac)
    with pytest.raises(DivergenceError):
        algo.learn(600, progress=False, out_dir=tmp_path, checkpoint_every=100, tensorboard=False)
    assert algo.num_timesteps < 600
    good = algo.last_good_checkpoint
    assert good is not None and good.name == "step_100"
    from tinker_core.algos import load_algorithm

    back = load_algorithm(good, env=gym.make("Pendulum-v1"))
    assert all(torch.isfinite(p).all() for p in back.parameters())
    assert not (tmp_path / "final").exists()


def _toy():
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    return net, opt


def test_forced_overflow_skips_the_step_and_recovers():
    net, opt = _toy()
    amp = ModulePrecision("critic", "bf16", "cpu", LossScalerConfig(init_scale=2.0 ** 16))
    w0 = net.weight.detach().clone()
    x = torch.randn(8, 4)
    with amp.autocast():
        y = net(x)
    assert y.dtype == torch.bfloat16
    stepped = amp.step(y.float().sum() * 1e38, opt, list(net.parameters()))  # overflows once scaled
    assert not stepped and amp.overflows == 1 and amp.scale == 2.0 ** 15
    assert torch.equal(net.weight, w0), "an overflowing step must not touch the weights"
    with amp.autocast():
        loss = net(x).float().square().mean()
    assert amp.step(loss, opt, list(net.parameters()))
    assert not torch.equal(net.weight, w0) and torch.isfinite(net.weight).all()
    assert amp.mode == "bf16"


def test_underflow_raises_the_scale():
    net, opt = _toy()
    amp = ModulePrecision("critic", "bf16", "cpu", LossScalerConfig(init_scale=1.0))
    w0 = net.weight.detach().clone()
    # gradients that come back all zero while the loss is not: what an fp16 underflow looks like
    loss = net(torch.randn(8, 4)).float().sum() * 0.0 + 1.0
    assert not amp.step(loss, opt, list(net.parameters()))
    assert amp.underflows == 1 and amp.scale == 2.0
    assert torch.equal(net.weight, w0)


def test_repeated_non_finite_gradients_fall_back_to_fp32():
    net, opt = _toy()
    amp = ModulePrecision("critic", "auto", "cpu", LossScalerConfig(fallback_after=3))
    assert amp.mode == "bf16"
    for _ in range(3):
        amp.step(net(torch.randn(2, 4)).float().sum() * float("nan"), opt, list(net.parameters()))
    assert amp.fell_back and amp.mode == "fp32" and not amp.enabled
    assert torch.isfinite(net.weight).all()


def test_sac_critic_in_bf16_actor_in_fp32(tiny_sac):
    tiny_sac.critic_precision = "bf16"
    algo = SAC("Pendulum-v1", tiny_sac)
    algo.learn(120, progress=False)
    assert algo.num_updates > 0 and algo.critic_amp.mode == "bf16"
    assert all(p.dtype == torch.float32 for p in algo.parameters())
    assert all(torch.isfinite(p).all() for p in algo.parameters())


@pytest.mark.parametrize("precision", ["fp32", "bf16"])  # the written-out step, autograd
def test_sac_measures_both_gradient_norms_every_50th_update(tiny_sac, precision):
    tiny_sac.critic_precision = precision
    algo = SAC("Pendulum-v1", tiny_sac)
    rng = np.random.default_rng(0)
    lo, hi = [-1, -1, -8], [1, 1, 8]
    for i in range(51):
        n = 32
        batch = TransitionBatch(obs=rng.uniform(lo, hi, (n, 3)).astype(np.float32),
                                action=rng.uniform(-2, 2, (n, 1)).astype(np.float32),
                                reward=rng.uniform(-16, 0, n).astype(np.float32), terminated=np.zeros(n, bool),
                                truncated=np.zeros(n, bool), next_obs=rng.uniform(lo, hi, (n, 3)).astype(np.float32))
        out = algo.train_on_batch(batch)
        measured = {k: out[k] for k in ("grad_norm/critic", "grad_norm/actor") if k in out}
        if i % 50 == 0:
            assert set(measured) == {"grad_norm/critic", "grad_norm/actor"}, i
            assert all(np.isfinite(v) and v > 0 for v in measured.values())
        else:
            assert not measured, i
