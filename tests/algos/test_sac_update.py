"""SAC's update against Stable-Baselines3's, and what its replay holds across a time limit.

The parity test gives both libraries the same weights, batches and exploration noise and compares
every weight after several updates: the compiled step and the written-out backward in Python (relu,
the default, and tanh) and the autograd path (elu) must all be SB3's step, up to float rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from tinker_core.algos import SAC, SACConfig
from tinker_core.transition import TransitionBatch


def _sb3_sac(hidden: list[int], act: type[nn.Module]):
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure

    model = sb3.SAC("MlpPolicy", make_vec_env("Pendulum-v1", n_envs=1, seed=0), seed=0, device="cpu",
                    learning_rate=1e-3, policy_kwargs=dict(net_arch=hidden, activation_fn=act))
    model.set_logger(configure(None, []))
    return model


def _linears(seq: nn.Module) -> list[nn.Linear]:
    return [m for m in seq if isinstance(m, nn.Linear)]


def _copy_weights(algo: SAC, model) -> None:
    actor, critic, target = model.policy.actor, model.policy.critic, model.policy.critic_target
    with torch.no_grad():
        for mine, theirs in zip(_linears(algo.actor.trunk) + [algo.actor.mu, algo.actor.log_std],
                                _linears(actor.latent_pi) + [actor.mu, actor.log_std]):
            mine.weight.copy_(theirs.weight)
            mine.bias.copy_(theirs.bias)
        for ens, ref in ((algo.critic, critic), (algo.critic_target, target)):
            for i, q in enumerate(ref.q_networks):
                for layer, lin in zip(ens.layers, _linears(q)):
                    layer.weight[i].copy_(lin.weight.T)
                    layer.bias[i, 0].copy_(lin.bias)


def _max_diff(algo: SAC, model) -> float:
    actor, critic, target = model.policy.actor, model.policy.critic, model.policy.critic_target
    diffs = [(algo.log_ent_coef - model.log_ent_coef).abs().max()]
    for mine, theirs in zip(_linears(algo.actor.trunk) + [algo.actor.mu, algo.actor.log_std],
                            _linears(actor.latent_pi) + [actor.mu, actor.log_std]):
        diffs += [(mine.weight - theirs.weight).abs().max(), (mine.bias - theirs.bias).abs().max()]
    for ens, ref in ((algo.critic, critic), (algo.critic_target, target)):
        for i, q in enumerate(ref.q_networks):
            for layer, lin in zip(ens.layers, _linears(q)):
                diffs += [(layer.weight[i] - lin.weight.T).abs().max(), (layer.bias[i, 0] - lin.bias).abs().max()]
    return float(torch.stack(diffs).detach().max())


@pytest.mark.parametrize("activation,act,n,compiled", [
    ("relu", nn.ReLU, 128, True), ("relu", nn.ReLU, 128, False), ("tanh", nn.Tanh, 100, True),
    ("tanh", nn.Tanh, 100, False), ("elu", nn.ELU, 128, True)])
def test_sac_update_matches_sb3(activation, act, n, compiled, monkeypatch):
    import torch.distributions.normal as normal
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    from tinker_core.algos.native import unavailable_reason
    from tinker_core.algos.sac_native import NativeSACUpdate

    hidden = [64, 64]
    algo = SAC("Pendulum-v1", SACConfig(learning_rate=1e-3, net_arch=hidden, activation=activation, seed=0,
                                        compiled_step=compiled))
    if activation == "elu":
        assert algo._update is None  # autograd
    else:
        assert isinstance(algo._update, NativeSACUpdate) == compiled
        assert not compiled or algo._update.compiled, unavailable_reason()
    model = _sb3_sac(hidden, act)
    _copy_weights(algo, model)
    assert _max_diff(algo, model) == 0.0
    rng = np.random.default_rng(0)
    noise: list[torch.Tensor] = []
    monkeypatch.setattr(normal, "_standard_normal", lambda shape, dtype, device: noise.pop(0).reshape(shape))
    for step in range(6):
        obs = rng.uniform([-1, -1, -8], [1, 1, 8], (n, 3)).astype(np.float32)
        nxt = rng.uniform([-1, -1, -8], [1, 1, 8], (n, 3)).astype(np.float32)
        act_env = rng.uniform(-2, 2, (n, 1)).astype(np.float32)
        rew = rng.uniform(-16, 0, n).astype(np.float32)
        term = rng.random(n) < 0.1  # some terminal transitions: no bootstrap there
        # tinker draws the noise of the batch's actions, then of the next actions, from its generator
        g = torch.Generator().manual_seed(0)
        g.set_state(algo.gen.get_state())
        noise[:] = [torch.randn((n, 1), generator=g), torch.randn((n, 1), generator=g)]
        model.replay_buffer.sample = lambda *a, **k: ReplayBufferSamples(  # type: ignore[method-assign]
            torch.as_tensor(obs), torch.as_tensor(act_env / 2.0), torch.as_tensor(nxt),
            torch.as_tensor(term, dtype=torch.float32)[:, None], torch.as_tensor(rew)[:, None])
        algo.train_on_batch(TransitionBatch(obs=obs, action=act_env, reward=rew, terminated=term,
                                            truncated=np.zeros(n, bool), next_obs=nxt))
        model.train(1, n)
        assert not noise, "SB3 drew the same two noise tensors"
        assert _max_diff(algo, model) < 1e-5, f"step {step}: weights differ from SB3's by {_max_diff(algo, model):.2e}"


def test_replay_bootstraps_across_the_time_limit():
    """Pendulum only truncates: every row is non-terminal and a truncated episode's last row holds
    its real final observation (consistent with the dynamics), not the next episode's first."""
    algo = SAC("Pendulum-v1", SACConfig(net_arch=[16, 16], batch_size=16, seed=0))
    algo.learn(450, progress=False)
    r = algo.replay
    n = len(r)
    assert n == 450 and algo.num_updates == 450 - algo.config.learning_starts
    obs, nxt = r.obs[:n].numpy(), r.next_obs[:n].numpy()
    u = 2.0 * r.actions[:n, 0].numpy()  # env units
    assert float(r.dones[:n].sum()) == 0.0
    th, thdot = np.arctan2(obs[:, 1], obs[:, 0]), obs[:, 2]
    new_thdot = np.clip(thdot + (15.0 * np.sin(th) + 3.0 * u) * 0.05, -8, 8)
    new_th = th + new_thdot * 0.05
    expected = np.stack([np.cos(new_th), np.sin(new_th), new_thdot], axis=1)
    np.testing.assert_allclose(nxt, expected, atol=1e-4)
    boundaries = [i for i in range(n - 1) if not np.allclose(nxt[i], obs[i + 1])]
    assert boundaries == [199, 399]
    cost = th ** 2 + 0.1 * thdot ** 2 + 0.001 * u ** 2
    np.testing.assert_allclose(r.rewards[:n].numpy(), -cost, atol=1e-4)


def test_acting_in_numpy_matches_the_torch_actor():
    """``predict`` (numpy on views of the weights, for one env step at a time) gives the actor's
    actions: tanh of the mean when deterministic, else the sample from the same generator draw."""
    algo = SAC("Pendulum-v1", SACConfig(net_arch=[32, 32], batch_size=16, seed=0))
    algo.learn(150, progress=False)  # weights changed by updates after the views were taken
    obs = np.random.default_rng(1).uniform([-1, -1, -8], [1, 1, 8], (5, 3)).astype(np.float32)
    x = torch.as_tensor(obs)
    with torch.no_grad():
        det = 2.0 * algo.actor.deterministic(x).numpy()
        g = torch.Generator().manual_seed(0)
        g.set_state(algo.gen.get_state())
        sto = 2.0 * algo.actor.sample_action(x, g).numpy()
    np.testing.assert_allclose(algo.predict(obs, deterministic=True), det, atol=1e-5)
    np.testing.assert_allclose(algo.predict(obs, deterministic=False), sto, atol=1e-5)
    assert algo.predict(obs[0], deterministic=True).shape == (1,)


def test_adam_step_is_optimizer_step():
    """The fused kernel called directly updates weights and state exactly as ``Adam.step``."""
    from tinker_core.algos.optim import adam_step, make_adam

    torch.manual_seed(0)
    nets = [nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)) for _ in range(2)]
    nets[1].load_state_dict(nets[0].state_dict())
    opts = [make_adam(n.parameters(), 1e-2) for n in nets]
    for step in range(4):
        x = torch.randn(16, 3)
        for net, opt, fn in zip(nets, opts, (lambda o: o.step(), adam_step)):
            opt.zero_grad()
            net(x).square().sum().backward()
            fn(opt)
    for p, q in zip(nets[0].parameters(), nets[1].parameters()):
        assert torch.equal(p, q)
        for k in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opts[0].state[p][k], opts[1].state[q][k])


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_numpy_acting_is_the_torch_paths_action(activation):
    """SAC acts on numpy observations through numpy views of its actor: the same actions as the torch
    path (deterministic, and stochastic with the same draws from the same generator), in env units."""
    algo = SAC("Pendulum-v1", SACConfig(net_arch=[64, 48], activation=activation, seed=0))
    with torch.no_grad():
        for p in algo.actor.parameters():  # away from the initialisation, log-std heads included
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    x = np.random.default_rng(0).uniform([-1, -1, -8], [1, 1, 8], (7, 3))  # float64, as the env gives
    for deterministic in (True, False):
        algo.gen.manual_seed(5)
        a = algo.predict(x, deterministic=deterministic)
        algo.gen.manual_seed(5)
        with torch.no_grad():
            feat = algo.actor_perception(torch.from_numpy(x).float())
            u = algo.actor.deterministic(feat) if deterministic else algo.actor.sample_action(feat, algo.gen)
            ref = algo._scale_action(u).numpy()
        assert a.dtype == np.float32 and a.shape == (7, 1) and np.all(np.abs(a) <= 2.0)
        np.testing.assert_allclose(a, ref, rtol=1e-5, atol=1e-5)
