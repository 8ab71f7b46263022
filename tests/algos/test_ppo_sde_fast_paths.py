"""PPO's gSDE against Stable-Baselines3's own distribution, and the fast paths (numpy acting,
flat-parameter optimizer step) against the plain torch computation they replace."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinker_core.algos import PPO, PPOConfig
from tinker_core.algos.flat_params import FlatParams
from tinker_core.algos.networks import GaussianActor
from tinker_core.errors import ConfigError


def test_gsde_log_prob_and_entropy_match_sb3():
    from stable_baselines3.common.distributions import StateDependentNoiseDistribution

    torch.manual_seed(0)
    actor = GaussianActor(3, [16, 16], 2, "tanh", log_std_init=-0.5, sde=True)
    with torch.no_grad():
        actor.log_std.add_(0.3 * torch.randn_like(actor.log_std))
    feat, actions = torch.randn(32, 3), torch.randn(32, 2)
    logp, ent = actor.log_prob_entropy(feat, actions)

    latent, mean = actor.latent_mean(feat)
    ref = StateDependentNoiseDistribution(2)  # SB3 defaults: full_std, exp, latent not learned
    ref.latent_sde_dim = 16
    ref.proba_distribution(mean, actor.log_std, latent)
    torch.testing.assert_close(logp, ref.log_prob(actions), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent, ref.entropy(), rtol=1e-5, atol=1e-5)
    # gradients reach log_std through the state-dependent variance, not the (detached) latent
    logp.sum().backward()
    assert actor.log_std.grad is not None and torch.count_nonzero(actor.log_std.grad) > 0


def test_gsde_noise_is_held_for_sde_sample_freq_steps():
    algo = PPO("Pendulum-v1", PPOConfig(n_steps=16, batch_size=16, n_envs=2, net_arch=[8], seed=0,
                                        use_sde=True, sde_sample_freq=4))
    assert algo.pi.log_std.shape == (8, 1)
    feat = torch.randn(2, 3)
    seen = []
    for _ in range(9):
        algo._sample(feat)
        seen.append(algo._sde_matrices.clone())
    same = [torch.equal(seen[i], seen[i + 1]) for i in range(8)]
    # drawn on calls 1, 5, 9: held in between
    assert same == [True, True, True, False, True, True, True, False]
    with pytest.raises(ConfigError, match="sde_sample_freq"):
        PPOConfig(use_sde=True, sde_sample_freq=0)


@pytest.mark.parametrize("env,kw", [("Pendulum-v1", {}), ("Pendulum-v1", {"use_sde": True, "sde_sample_freq": 4}),
                                    ("CartPole-v1", {})])
def test_numpy_acting_matches_torch(env, kw):
    algo = PPO(env, PPOConfig(n_steps=16, batch_size=16, n_envs=4, net_arch=[32, 32], seed=0, **kw))
    nets = algo._numpy_nets()
    assert nets is not None
    obs = np.random.default_rng(0).normal(size=(4, *algo.obs_spec.shape)).astype(np.float32)
    state = algo.gen.get_state()
    a_np, logp_np, v_np = algo._step_numpy(nets, obs)
    algo.gen.set_state(state)
    if algo.sde:
        algo._sde_calls -= 1  # the same draw schedule for the second pass
    with torch.no_grad():
        feat = algo.perception(torch.from_numpy(obs))
        a, logp = algo._sample_logp(feat)
        v = algo.vf(feat).squeeze(-1)
    np.testing.assert_allclose(a_np, a.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logp_np, logp.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(v_np, v.numpy(), rtol=1e-5, atol=1e-5)


def test_flat_params_clip_and_step_match_per_tensor_torch():
    torch.manual_seed(0)
    nets = [torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    x = torch.randn(16, 3)
    # reference: per-tensor clip_grad_norm_ and Adam
    ref_opt = torch.optim.Adam(nets[0].parameters(), lr=1e-2, eps=1e-5)
    loss = nets[0](x).square().sum()
    loss.backward()
    ref_norm = torch.nn.utils.clip_grad_norm_(list(nets[0].parameters()), 0.5)
    ref_opt.step()
    # flat
    params = list(nets[1].parameters())
    flat = FlatParams(params)
    opt = torch.optim.Adam([flat.flat], lr=1e-2, eps=1e-5)
    flat.set_grad(nets[1](x).square().sum())
    norm = flat.clip_grad_norm_(0.5)
    opt.step()
    torch.testing.assert_close(norm, ref_norm)
    for p_ref, p in zip(nets[0].parameters(), nets[1].parameters()):
        torch.testing.assert_close(p, p_ref)  # the module's own parameters moved (shared storage)
    # loading weights writes through to the optimizer's buffer
    nets[1].load_state_dict({k: torch.zeros_like(v) for k, v in nets[1].state_dict().items()})
    assert torch.count_nonzero(flat.flat) == 0


@pytest.mark.parametrize("env,kw", [("Pendulum-v1", {"use_sde": True, "sde_sample_freq": 4}),
                                    ("Pendulum-v1", {"ent_coef": 0.01}), ("CartPole-v1", {"ent_coef": 0.01})])
def test_fused_actor_critic_step_matches_the_module_path(env, kw):
    from tinker_core.algos.buffers import RolloutSamples

    cfg = dict(n_steps=16, batch_size=16, n_envs=2, net_arch=[16, 16], seed=0, **kw)
    fused, plain = PPO(env, PPOConfig(**cfg)), PPO(env, PPOConfig(**cfg))
    assert fused.fused is not None
    plain.fused = None  # the per-module path: perception, actor and value MLPs one by one
    g = torch.Generator().manual_seed(1)
    n = 32
    obs = torch.randn(n, *fused.obs_spec.shape, generator=g)
    act = (torch.randint(0, 2, (n,), generator=g) if fused.discrete else torch.randn(n, 1, generator=g))
    b = RolloutSamples(obs, act, torch.randn(n, generator=g), torch.randn(n, generator=g) - 1.0,
                       torch.randn(n, generator=g), torch.randn(n, generator=g))
    for _ in range(3):
        (s1, lr1, gn1), (s2, lr2, gn2) = fused._minibatch(b), plain._minibatch(b)
        torch.testing.assert_close(s1, s2, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(lr1, lr2, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(gn1, gn2, rtol=1e-5, atol=1e-6)
    for (k, a), (_, c) in zip(fused.state_dict().items(), plain.state_dict().items()):
        torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6, msg=k)


def test_flat_adam_step_equals_optimizer_step():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    b.load_state_dict(a.state_dict())
    fa, fb = FlatParams(list(a.parameters())), FlatParams(list(b.parameters()))
    oa = torch.optim.Adam([fa.flat], lr=1e-2, eps=1e-5, fused=True)
    ob = torch.optim.Adam([fb.flat], lr=1e-2, eps=1e-5, fused=True)
    x = torch.randn(8, 4)
    for i in range(4):
        if i == 2:
            for o in (oa, ob):
                o.param_groups[0]["lr"] = 3e-3  # a changed learning rate is honoured
        fa.set_grad(a(x).square().sum())
        fb.set_grad(b(x).square().sum())
        oa.step()
        fb.adam_step(ob)
        assert torch.equal(fa.flat, fb.flat)
    assert torch.equal(oa.state[fa.flat]["exp_avg_sq"], ob.state[fb.flat]["exp_avg_sq"])
    assert float(ob.state[fb.flat]["step"]) == 4
