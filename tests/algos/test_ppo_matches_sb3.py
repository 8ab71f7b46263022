"""tinker's PPO against Stable-Baselines3's on RL Zoo's MountainCarContinuous-v0 entry (gSDE, VecNormalize with
gamma 0.9999, a rollout of 8 under a batch of 256), piece by piece with the same weights and the same gSDE noise.

Issue 27 asked why tinker's PPO collapsed there where SB3 did not. With these two pieces equal, the collapse is
not tinker's: SB3 collapses on the same entry (docs/benchmarks_third_party.md, "PPO on MountainCarContinuous").

- the rollout: normalized observations, actions, values, log-probabilities, normalized rewards with the
  time-limit bootstrap (the episode truncates at step 999), advantages and returns. This pins the one
  difference found: tinker added an observation to the normalizer's statistics on its next step, SB3's
  VecNormalize when it arrives, so the truncation bootstrap and the rollout's last value normalized their
  observation with other statistics (a normalized reward off by 3e-3 at the truncation step here).
- the update (compiled and autograd): the same parameters as SB3's ``train()`` after three updates of ten
  epochs of one 8-sample minibatch.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from tinker_core.algos import PPO, PPOConfig

pytest.importorskip("stable_baselines3")

ENTRY = dict(gamma=0.9999, learning_rate=7.77e-05, ent_coef=0.00429, clip_range=0.1, n_epochs=10, gae_lambda=0.9,
             max_grad_norm=5, vf_coef=0.19, use_sde=True)
KWARGS = dict(log_std_init=-3.29, ortho_init=False)


def _sb3(n_steps: int, batch_size: int):
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env("MountainCarContinuous-v0", n_envs=1, seed=0), gamma=ENTRY["gamma"])
    model = SB3PPO("MlpPolicy", env, n_steps=n_steps, batch_size=batch_size, seed=0, device="cpu",
                   policy_kwargs=KWARGS, **ENTRY)
    model.set_logger(configure(folder=None, format_strings=[]))
    return model, env


def _tinker_like(model, n_steps: int, compiled: bool = True) -> PPO:
    """tinker's PPO on the same entry, with the SB3 policy's weights."""
    algo = PPO("MountainCarContinuous-v0", PPOConfig(n_steps=n_steps, batch_size=n_steps, normalize_obs=True,
                                                     normalize_reward=True, seed=0, compiled_update=compiled,
                                                     **ENTRY, **KWARGS))
    pol = model.policy
    pairs = [(pol.mlp_extractor.policy_net[0], algo.pi.mean[0]), (pol.mlp_extractor.policy_net[2], algo.pi.mean[2]),
             (pol.action_net, algo.pi.mean[4]), (pol.mlp_extractor.value_net[0], algo.vf[0]),
             (pol.mlp_extractor.value_net[2], algo.vf[2]), (pol.value_net, algo.vf[4])]
    with torch.no_grad():
        for s, t in pairs:
            t.weight.copy_(s.weight)
            t.bias.copy_(s.bias)
        algo.pi.log_std.copy_(pol.log_std)
    return algo


def test_rollout_is_sb3_collect_rollouts_across_the_time_limit():
    from stable_baselines3.common.buffers import RolloutBuffer

    n = 1000  # the episode truncates after step 999: the bootstrap, then one step of the next episode
    model, env = _sb3(8, 8)
    _, callback = model._setup_learn(n, None)
    buf = RolloutBuffer(n, env.observation_space, env.action_space, "cpu", gamma=model.gamma,
                        gae_lambda=model.gae_lambda, n_envs=1)
    torch.manual_seed(5)
    model.collect_rollouts(env, callback, buf, n)
    matrix = model.policy.action_dist.exploration_mat.detach().clone()  # held for the whole rollout (freq -1)

    algo = _tinker_like(model, n)

    def same_noise(k: int) -> None:
        algo._sde_matrices = matrix.unsqueeze(0).repeat(k, 1, 1)
        algo._sde_var = model.policy.log_std.detach().exp().square()
        algo._sde_calls = 0

    got: dict[str, np.ndarray] = {}
    algo._reset_noise = same_noise  # type: ignore[method-assign]
    algo._update = lambda obs, act, val, logp, adv, ret: got.update(  # type: ignore[method-assign]
        obs=obs.numpy().copy(), act=act.numpy().copy(), val=val.numpy().copy(), logp=logp.numpy().copy(),
        adv=adv.numpy().copy(), ret=ret.numpy().copy())
    algo._last_obs = algo.vec_env.reset(seed=0)
    algo._iteration()

    assert np.flatnonzero(algo.buf_starts.numpy().reshape(-1)).tolist() == [0, 999]
    assert np.flatnonzero(buf.episode_starts.reshape(-1)).tolist() == [0, 999]
    ours = {**got, "rew": algo.buf_rewards.numpy()}
    theirs = dict(obs=buf.observations, act=buf.actions, val=buf.values, logp=buf.log_probs, adv=buf.advantages,
                  ret=buf.returns, rew=buf.rewards)
    for k, ref in theirs.items():
        np.testing.assert_allclose(ours[k].reshape(n, -1), ref.reshape(n, -1), rtol=1e-4, atol=1e-4, err_msg=k)
    # the normalized reward at the truncation step carries gamma * V(final observation)
    np.testing.assert_allclose(ours["rew"].reshape(-1)[998], buf.rewards.reshape(-1)[998], rtol=0, atol=2e-5)


@pytest.mark.parametrize("compiled", [
    pytest.param(True, marks=pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                                reason="no C++ compiler: the compiled update cannot be built")),
    False])
def test_update_is_sb3_train_on_one_rollout(compiled):
    n = 8
    model, _ = _sb3(n, 256)  # SB3: a batch larger than the rollout trains on the whole rollout
    model._current_progress_remaining = 1.0
    algo = _tinker_like(model, n, compiled)
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 1, 2)).astype(np.float32)
    with torch.no_grad():
        model.policy.reset_noise(1)
        act, val, logp = model.policy(torch.as_tensor(obs[:, 0]))
    adv = (0.3 * rng.normal(size=(n, 1))).astype(np.float32)
    ret = adv + val.numpy().reshape(n, 1)
    rb = model.rollout_buffer
    rb.observations[:], rb.actions[:], rb.values[:] = obs, act.numpy().reshape(n, 1, 1), val.numpy().reshape(n, 1)
    rb.log_probs[:], rb.advantages[:], rb.returns[:] = logp.numpy().reshape(n, 1), adv, ret
    rb.full, rb.pos = True, n
    before = model.policy.log_std.detach().clone()
    for _ in range(3):  # tinker's first update is autograd (it creates Adam's state), then the compiled step
        algo._update(torch.as_tensor(obs), act.reshape(n, 1, 1).float(), val.reshape(n, 1).float(),
                     logp.reshape(n, 1).float(), torch.as_tensor(adv), torch.as_tensor(ret))
        model.train()
    assert algo.update_path == ("compiled" if compiled else "autograd")
    pol = model.policy
    assert not torch.equal(pol.log_std, before)  # the updates moved the weights
    pairs = [(pol.mlp_extractor.policy_net[0], algo.pi.mean[0]), (pol.action_net, algo.pi.mean[4]),
             (pol.mlp_extractor.value_net[2], algo.vf[2]), (pol.value_net, algo.vf[4])]
    for s, t in pairs:
        torch.testing.assert_close(t.weight, s.weight, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(t.bias, s.bias, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(algo.pi.log_std, pol.log_std, rtol=1e-5, atol=1e-6)
