"""Each algorithm learns: small fixed-seed budgets, thresholds a random policy clearly fails.

Random-policy reference (deterministic evaluation of the same seeds): Pendulum-v1 about -1200 to
-1500 per episode, CartPole-v1 about 20.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from tinker_core.algos import DQN, PPO, SAC, DQNConfig, PPOConfig, SACConfig


def evaluate(algo, env_id: str, episodes: int = 5) -> float:
    env = gym.make(env_id)
    rets = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=1000 + ep)
        done, ret = False, 0.0
        while not done:
            obs, r, te, tr, _ = env.step(algo.predict(obs, deterministic=True))
            ret += float(r)
            done = te or tr
        rets.append(ret)
    return float(np.mean(rets))


def random_return(env_id: str, episodes: int = 5) -> float:
    env = gym.make(env_id)
    env.action_space.seed(0)
    rets = []
    for ep in range(episodes):
        env.reset(seed=1000 + ep)
        done, ret = False, 0.0
        while not done:
            _, r, te, tr, _ = env.step(env.action_space.sample())
            ret += float(r)
            done = te or tr
        rets.append(ret)
    return float(np.mean(rets))


def test_sac_learns_pendulum():
    algo = SAC("Pendulum-v1", SACConfig(learning_rate=1e-3, net_arch=[64, 64], batch_size=64, seed=0))
    algo.learn(4000, progress=False)
    score = evaluate(algo, "Pendulum-v1")
    assert random_return("Pendulum-v1") < -900
    assert score > -600, f"SAC after 4000 steps: mean return {score:.0f}"


def test_ppo_learns_pendulum():
    """Median over three seeds: seed 1 alone, the bound's seed until then, passed on the AMD EPYC and gave -747 on an
    Intel Xeon (its products go through MKL there, another trajectory). Measured on that Intel Xeon, seeds 0-11, 30k
    steps: -230.6, -746.6, -331.7, -181.0, -201.7, -194.0, -153.0, -238.8, -365.9, -250.8, -390.4, -185.2 (median
    -234); a random policy scores about -1200 to -1500."""
    scores = []
    for seed in (0, 1, 2):
        algo = PPO("Pendulum-v1", PPOConfig(n_envs=4, n_steps=256, gamma=0.9, gae_lambda=0.95, n_epochs=10,
                                            learning_rate=1e-3, normalize_obs=True, normalize_reward=True, seed=seed))
        algo.learn(30_000, progress=False)
        scores.append(round(evaluate(algo, "Pendulum-v1"), 1))
    assert float(np.median(scores)) > -700, f"PPO after 30000 steps, seeds 0-2: mean returns {scores}"


def test_dqn_learns_cartpole():
    """Median over three seeds: one seed's return after 8000 steps swings too much to bound alone.

    Measured on an AMD EPYC (Zen 5), seeds 0-11, 8000 steps: 159.8, 143.0, 168.6, 435.2, 85.4, 113.0, 130.0,
    117.0, 151.0, 102.6, 102.8, 220.0 (median 137, min 85); seed 0 alone gave 146 on an Intel Xeon, which
    failed the single-seed bound of 150 this test had. A random policy scores about 20.
    """
    scores = []
    for seed in (0, 1, 2):
        algo = DQN("CartPole-v1", DQNConfig(learning_rate=2.3e-3, batch_size=64, buffer_size=20_000,
                                            learning_starts=1000, target_update_interval=10, train_freq=256,
                                            gradient_steps=128, exploration_fraction=0.16,
                                            exploration_final_eps=0.04, net_arch=[64, 64], seed=seed))
        algo.learn(8000, progress=False)
        scores.append(evaluate(algo, "CartPole-v1"))
    assert random_return("CartPole-v1") < 40
    assert float(np.median(scores)) > 80, f"DQN after 8000 steps, seeds 0-2: mean returns {scores}"
