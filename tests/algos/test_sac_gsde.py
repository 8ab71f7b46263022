"""SAC's gSDE (``use_sde``) against Stable-Baselines3's own distribution, and how tinker's SAC holds and redraws the
noise, as SB3's SAC does (RL Zoo's MountainCarContinuous-v0 SAC entry uses it)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from tinker_core.algos import SAC, SACConfig, native
from tinker_core.algos.networks import GSDESquashedActor
from tinker_core.errors import ConfigError


def test_gsde_sample_log_prob_and_gradients_match_sb3():
    """Same weights, same noise matrix: the action, its log-probability (tanh-corrected) and the gradients of the
    log-probability (through the learned latent, the noise matrix and the state-dependent std) are SB3's."""
    from stable_baselines3.common.distributions import StateDependentNoiseDistribution

    torch.manual_seed(0)
    actor = GSDESquashedActor(3, [16, 16], 2, "relu", log_std_init=-1.0)
    with torch.no_grad():
        actor.log_std.add_(0.3 * torch.randn_like(actor.log_std))
    feat = torch.randn(64, 3)

    ref = StateDependentNoiseDistribution(2, full_std=True, use_expln=False, learn_features=True, squash_output=True)
    ref.sample_weights(actor.log_std, batch_size=1)  # SB3's reset_noise(): exploration_mat, differentiable
    latent, mean = actor.latent_mean(feat)
    ref.proba_distribution(mean, actor.log_std, latent)
    ref_a = ref.sample()
    ref_logp = ref.log_prob(ref_a)  # SB3 recovers the pre-tanh action as atanh(a); tinker keeps it
    assert ref_a.abs().max() < 0.999  # (the same number away from saturation)

    actor.train_matrix = ref.exploration_mat
    a, logp = actor.sample(feat, None)
    torch.testing.assert_close(a, ref_a, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logp, ref_logp, rtol=1e-4, atol=1e-4)
    params = [actor.log_std, *actor.trunk.parameters(), *actor.mu.parameters()]
    ours = torch.autograd.grad(logp.sum() + a.sum(), params, retain_graph=True)
    theirs = torch.autograd.grad(ref_logp.sum() + ref_a.sum(), params)
    for g, h in zip(ours, theirs):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-5)
    assert torch.count_nonzero(ours[0]) > 0  # log_std learns through the noise and the std
    # the mean is SB3's clipped mean: tanh(clip(mu, -2, 2)) when acting deterministically
    big = torch.full((1, 3), 50.0)
    assert torch.all(actor.latent_mean(big)[1].abs() <= 2.0)
    torch.testing.assert_close(actor.deterministic(feat), torch.tanh(mean))


def test_sac_with_gsde_trains_on_the_fast_step_holds_and_redraws_noise(monkeypatch, caplog):
    """gSDE trains on plain SAC's fast step (compiled where it builds; test_sac_gsde_fast_paths.py holds it to the
    autograd step), with no fallback said; acting holds and redraws the matrices as SB3's SAC."""
    monkeypatch.setattr(native, "_slow_paths", set())
    cfg = SACConfig(use_sde=True, sde_sample_freq=4, log_std_init=-2.0, learning_starts=0, train_freq=8,
                    gradient_steps=2, batch_size=16, net_arch=[16, 16], seed=0)
    with caplog.at_level(logging.WARNING):
        algo = SAC("Pendulum-v1", cfg)
    assert algo.update_path in ("compiled", "python step")
    assert not any("gSDE" in r.getMessage() for r in caplog.records)
    assert isinstance(algo.actor, GSDESquashedActor) and algo.actor.log_std.shape == (16, 1)
    obs = np.zeros((1, 3), dtype=np.float32)
    seen = []
    for _ in range(9):
        algo.predict(obs, deterministic=False)
        seen.append(algo.actor.act_matrices.clone())
    # drawn on calls 1, 5, 9 (every sde_sample_freq steps): held in between
    assert [torch.equal(seen[i], seen[i + 1]) for i in range(8)] == [True, True, True, False, True, True, True, False]
    before = algo.actor.log_std.detach().clone()
    algo.learn(64, progress=False)
    assert algo.num_updates == 16
    assert not torch.equal(algo.actor.log_std, before)  # the actor loss reaches log_std
    held = algo.actor.act_matrices.clone()
    algo._train(1)  # a training redraws the acting noise at the next step (SB3: a new collection)
    algo.predict(obs, deterministic=False)
    assert not torch.equal(algo.actor.act_matrices, held)
    with pytest.raises(ConfigError, match="sde_sample_freq"):
        SACConfig(use_sde=True, sde_sample_freq=0)


def test_use_sde_at_warmup_acts_with_the_policy():
    """Before learning_starts: uniform random actions, or with use_sde_at_warmup the gSDE policy's, whose tiny
    noise (log_std_init -6) keeps them next to the deterministic action of the stored observation."""
    cfg = dict(use_sde=True, log_std_init=-6.0, learning_starts=1000, net_arch=[16, 16], seed=0)
    gap = {}
    for warm in (False, True):
        algo = SAC("Pendulum-v1", SACConfig(use_sde_at_warmup=warm, **cfg))
        algo.learn(40, progress=False)
        t = algo.replay.tensors()
        with torch.no_grad():
            det = algo.actor.deterministic(torch.as_tensor(t["obs"][:40])).numpy()
        gap[warm] = float(np.abs(t["actions"][:40] - det).max())
    assert gap[False] > 0.5  # uniform in [-1, 1]
    assert gap[True] < 0.05


def test_gsde_sac_reloads_and_deploys_its_mean(tmp_path):
    algo = SAC("Pendulum-v1", SACConfig(use_sde=True, learning_starts=0, net_arch=[16, 16], batch_size=16, seed=0))
    algo.learn(40, progress=False)
    back = SAC.load(algo.save(tmp_path / "m"))
    assert isinstance(back.actor, GSDESquashedActor) and back.config.use_sde
    torch.testing.assert_close(back.actor.log_std, algo.actor.log_std)
    obs = np.array([[0.3, -0.2, 0.5], [-1.0, 0.1, -2.0]], dtype=np.float32)
    np.testing.assert_allclose(back.predict(obs), algo.predict(obs), rtol=1e-6, atol=1e-6)
    perception, head = algo._deploy_modules()  # what the bundle exports: tanh of the clipped mean, in env units
    with torch.no_grad():
        np.testing.assert_allclose(head(perception(torch.from_numpy(obs))).numpy(), algo.predict(obs), rtol=1e-5,
                                   atol=1e-5)


@pytest.mark.parametrize("path", ["compiled", "python step", "autograd"])
def test_gsde_train_step_is_sb3_sac_train(path):
    """Same weights, same minibatch, same noise matrices: three gradient steps of tinker's SAC with gSDE leave the
    actor (trunk, clipped mean, log_std), the critics and the target critics where SB3's ``SAC.train`` leaves them,
    on each of SAC's paths (compiled where it builds, else the Python step)."""
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    from tinker_core.algos.buffers import ReplaySamples

    kw = dict(learning_rate=1e-3, batch_size=32, gamma=0.99, tau=0.05, learning_starts=0)
    ref = SB3SAC("MlpPolicy", "Pendulum-v1", ent_coef=0.1, use_sde=True, seed=0, device="cpu",
                 policy_kwargs=dict(log_std_init=-2.0, net_arch=[16, 16]), **kw)
    ref.set_logger(configure(folder=None, format_strings=[]))
    ref._current_progress_remaining = 1.0
    algo = SAC("Pendulum-v1", SACConfig(ent_coef="0.1", use_sde=True, log_std_init=-2.0, net_arch=[16, 16], seed=0,
                                        compiled_step=path == "compiled", **kw))
    if path == "autograd":
        algo._update = None  # what a non-MLP perception trains on
    assert algo.update_path in ((path, "python step") if path == "compiled" else (path,))
    actor, sa = algo.actor, ref.actor
    with torch.no_grad():
        for t, s in [(actor.trunk[0], sa.latent_pi[0]), (actor.trunk[2], sa.latent_pi[2]), (actor.mu[0], sa.mu[0])]:
            t.weight.copy_(s.weight)
            t.bias.copy_(s.bias)
        actor.log_std.copy_(sa.log_std)
        for ens, nets in ((algo.critic, ref.critic.q_networks), (algo.critic_target, ref.critic_target.q_networks)):
            for j, layer in enumerate(ens.layers):
                for i, q in enumerate(nets):
                    lin = q[2 * j]
                    layer.weight[i].copy_(lin.weight.t())
                    layer.bias[i, 0].copy_(lin.bias)

    g = torch.Generator().manual_seed(1)
    eps = [torch.randn(16, 1, generator=g) for _ in range(3)]
    step = {"i": 0}

    def sb3_noise(batch_size: int = 1) -> None:
        d = sa.action_dist
        d.exploration_mat = sa.log_std.exp() * eps[step["i"]]
        d.exploration_matrices = d.exploration_mat.unsqueeze(0)

    sa.reset_noise = sb3_noise
    actor.draw = lambda n, gen: actor.log_std.exp() * eps[step["i"]].unsqueeze(0)  # type: ignore[method-assign]
    n = 32
    obs, nxt = torch.randn(n, 3, generator=g), torch.randn(n, 3, generator=g)
    act = torch.rand(n, 1, generator=g) * 2 - 1
    rew, done = torch.randn(n, generator=g), (torch.rand(n, generator=g) < 0.2).float()
    ref.replay_buffer.sample = lambda *a, **k: ReplayBufferSamples(obs, act, nxt, done[:, None], rew[:, None])
    for i in range(3):
        step["i"] = i
        ref.train(gradient_steps=1, batch_size=n)
        algo._train_step(ReplaySamples(obs, act, nxt, rew, done))
    tol = dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(actor.log_std, sa.log_std, **tol)
    for t, s in [(actor.trunk[0], sa.latent_pi[0]), (actor.trunk[2], sa.latent_pi[2]), (actor.mu[0], sa.mu[0])]:
        torch.testing.assert_close(t.weight, s.weight, **tol)
        torch.testing.assert_close(t.bias, s.bias, **tol)
    for ens, nets in ((algo.critic, ref.critic.q_networks), (algo.critic_target, ref.critic_target.q_networks)):
        for j, layer in enumerate(ens.layers):
            for i, q in enumerate(nets):
                torch.testing.assert_close(layer.weight[i], q[2 * j].weight.t(), **tol)
    assert not torch.allclose(actor.log_std, torch.full_like(actor.log_std, -2.0))  # the steps moved it
