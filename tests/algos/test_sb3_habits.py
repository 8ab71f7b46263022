"""Stable-Baselines3 habits: the cheap ones work (keyword hyperparameters, policy_kwargs, SAC.load,
tensorboard_log, progress_bar, callbacks as classes); the rest raise ConfigError saying the tinker way."""

from __future__ import annotations

import gymnasium as gym
import pytest

from tinker_core.algos import PPO, SAC, SACConfig, load_algorithm
from tinker_core.errors import CheckpointError, ConfigError
from tinker_core.training.callbacks import CheckpointCallback, EvalCallback


def test_sb3_style_construction_save_and_load(tmp_path):
    env = gym.wrappers.TimeLimit(gym.make("Pendulum-v1"), 30)
    algo = SAC(env, learning_rate=2e-3, batch_size=16, learning_starts=30, seed=1,
               policy_kwargs="dict(net_arch=[16, 16], activation_fn=nn.Tanh)", tensorboard_log=tmp_path / "tb_run",
               verbose=0)
    assert (algo.config.learning_rate, algo.config.net_arch, algo.config.activation) == (2e-3, [16, 16], "tanh")
    algo.learn(90, progress_bar=False)
    assert list((tmp_path / "tb_run" / "tb").iterdir()), "tensorboard_log is where learn writes TensorBoard"
    loaded = SAC.load(tmp_path / "tb_run" / "final")
    assert isinstance(loaded, SAC) and loaded.num_timesteps == 90
    assert loaded.env_config.kwargs == {"max_episode_steps": 30}, "the wrapped env's time limit came back"
    again = SAC(env, SACConfig(net_arch=[16, 16], activation="tanh")).load(tmp_path / "tb_run" / "final")
    assert again.num_timesteps == 90
    with pytest.raises(CheckpointError, match=r"holds a SAC checkpoint, not PPO; load it with SAC.load\(path\) or "
                                              r"load_algorithm\(path\)"):
        PPO.load(tmp_path / "tb_run" / "final")


def test_sb3_habits_that_tinker_does_not_take_say_what_to_write(tmp_path):
    with pytest.raises(ConfigError) as e:
        SAC("MlpPolicy", "Pendulum-v1")
    assert str(e.value) == (
        "SAC('MlpPolicy', env): tinker takes the env first and picks the networks from the observation space "
        "(perception='auto'; MlpPolicy is perception='flatten'); write SAC(env) or SAC(env, SACConfig(...)), "
        "hyperparameters as keywords or config fields")
    with pytest.raises(ConfigError, match=r"SAC: SB3 keyword\(s\) tinker does not take: action_noise: tinker's SAC "
                                          r"explores with its own stochastic policy"):
        SAC("Pendulum-v1", action_noise=object())
    with pytest.raises(ConfigError, match=r"SAC: unknown keyword\(s\) \['lerning_rate'\]; known: "):
        SAC("Pendulum-v1", lerning_rate=1e-3)
    algo = SAC("Pendulum-v1", SACConfig(net_arch=[8], learning_starts=10, batch_size=8))
    with pytest.raises(ConfigError, match=r"SAC.learn: SB3 keyword\(s\) tinker does not take: log_interval: tinker "
                                          r"logs every config.log_interval env steps"):
        algo.learn(20, log_interval=4)
    with pytest.raises(ConfigError, match=r"SAC.load: SB3 keyword\(s\) tinker does not take: custom_objects"):
        SAC.load(tmp_path, custom_objects={})


def test_eval_and_checkpoint_callbacks(tmp_path):
    env = gym.wrappers.TimeLimit(gym.make("Pendulum-v1"), 25)
    algo = SAC(env, SACConfig(net_arch=[8], learning_starts=25, batch_size=8, seed=0))
    ev = EvalCallback("Pendulum-v1", eval_freq=50, n_eval_episodes=1, best_model_save_path=tmp_path / "best",
                      log_path=tmp_path / "evals.jsonl")
    ck = CheckpointCallback(save_freq=75, save_path=tmp_path / "ckpt")
    algo.learn(150, progress=False, callback=[ev, ck])
    assert [e.step for e in ev.evaluations] == [50, 100, 150]
    assert all(e.mean_return < 0 for e in ev.evaluations)
    assert (tmp_path / "evals.jsonl").read_text().count("\n") == 3
    assert load_algorithm(tmp_path / "best" / "best_model").num_timesteps in (50, 100, 150)
    assert [p.name for p in ck.saved] == ["step_75", "step_150"]
    with pytest.raises(ConfigError, match=r"EvalCallback.eval_freq: expected env steps >= 1, got 0"):
        EvalCallback("Pendulum-v1", eval_freq=0)


def test_a_wrapped_env_instance_is_copied_with_its_wrappers_and_recorded(tmp_path):
    env = gym.wrappers.TransformReward(gym.wrappers.TimeLimit(gym.make("Pendulum-v1"), 10), lambda r: r)
    with pytest.raises(ConfigError, match=r"n_envs=2 needs an env id to make copies"):
        SAC(env, SACConfig(n_envs=2))
    env = gym.wrappers.ClipReward(gym.wrappers.TimeLimit(gym.make("Pendulum-v1"), 10), -1.0, 1.0)
    algo = PPO(env, n_envs=2, n_steps=16, batch_size=32, net_arch=[8])
    assert [type(e).__name__ for e in algo.vec_env.envs] == ["ClipReward", "ClipReward"]
    algo.save(tmp_path / "c")
    back = load_algorithm(tmp_path / "c")
    assert type(back.vec_env.envs[1]).__name__ == "ClipReward" and back.env_config.kwargs == {"max_episode_steps": 10}
