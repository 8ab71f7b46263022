"""`tinker_core.algos.rl_prior`: SAC started from a BC policy acts exactly as it, a network of another shape is
refused, the critic warm-up leaves the actor as it was, and an expert's episodes become tagged demonstrations."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from tinker_core.algos import BC, BCConfig, SAC, SACConfig
from tinker_core.algos.rl_prior import collect_demonstrations, sac_from_imitation, warm_critic
from tinker_core.errors import ConfigError


def _bc(net_arch=(16, 16)) -> BC:
    bc = BC("Pendulum-v1", BCConfig(net_arch=list(net_arch), normalize_obs=True, seed=1))
    bc.obs_norm.update(np.random.default_rng(0).normal([0.5, -0.2, 1.0], [0.3, 0.5, 2.0], (500, 3)))
    return bc


def _sac(net_arch=(16, 16), **kw) -> SAC:
    return SAC("Pendulum-v1", SACConfig(net_arch=list(net_arch), normalize_obs=True, seed=2, td3bc_alpha=0.05, **kw))


class Expert:
    """A fixed rule standing in for a scripted expert (the real ones need the arm)."""

    def __init__(self):
        self.resets = 0

    def reset(self):
        self.resets += 1

    def act(self, obs):
        return np.clip([-2.0 * obs[2]], -2.0, 2.0)


def test_the_sac_acts_as_the_bc_policy_it_starts_from():
    bc, sac = _bc(), _sac()
    obs = np.random.default_rng(3).uniform(-1, 1, (64, 3)).astype(np.float32)
    assert np.abs(sac.predict(obs) - bc.predict(obs)).max() > 0.05  # different before
    sac_from_imitation(bc, sac, action_std=0.05)
    np.testing.assert_allclose(sac.predict(obs), bc.predict(obs), atol=1e-6)
    noisy = sac.predict(obs, deterministic=False) - bc.predict(obs)  # the noise starts small (2 = the action bound)
    assert 0 < np.abs(noisy).mean() < 0.2


def test_networks_of_another_shape_are_refused():
    with pytest.raises(ConfigError, match=r"actor.trunk: the SAC's layers .* differ from the BC policy's"):
        sac_from_imitation(_bc((16, 16)), _sac((32, 32)))
    with pytest.raises(ConfigError, match="action_std: expected 0 < action_std < 1"):
        sac_from_imitation(_bc(), _sac(), action_std=0.0)


def test_demonstrations_and_the_critic_warm_up_leave_the_actor_as_it_was():
    env, expert = gym.make("Pendulum-v1"), Expert()
    seen = []
    demos = collect_demonstrations(env, expert, episodes=2, seed=5, progress=lambda ep, row: seen.append(row))
    env.close()
    assert len(demos) == 400 and expert.resets == 2 and [r["transitions"] for r in seen] == [200, 400]
    batch = demos.sample(8)
    assert all(i["source"] == "demonstration" for i in batch.info)
    np.testing.assert_allclose(batch.action[:, 0], np.clip(-2.0 * batch.obs[:, 2], -2, 2), atol=1e-6)
    sac = sac_from_imitation(_bc(), _sac())
    actor = {k: v.clone() for k, v in sac.actor.state_dict().items()}
    critic = {k: v.clone() for k, v in sac.critic.state_dict().items()}
    out = warm_critic(sac, demos, steps=20, batch_size=32)
    assert all(np.array_equal(actor[k].numpy(), v.numpy()) for k, v in sac.actor.state_dict().items())
    assert any(not np.array_equal(critic[k].numpy(), v.numpy()) for k, v in sac.critic.state_dict().items())
    assert np.isfinite(out["critic_loss"])
    assert [g["lr"] for g in sac.actor_opt.param_groups] == [sac.config.learning_rate]  # given back
