"""``tinker train`` / ``tinker eval`` on an environment tinker did not write: a ``module:Class`` id with
``env_import`` and gymnasium wrappers with arguments; the run saves, reloads without ``env=``, resumes,
evaluates and exports with the same wrapped env. Errors name the key and the value."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tinker_deploy.manifest import Manifest
from tinker_core.algos import load_algorithm
from tinker_cli import main
from tinker_core.envs import EnvConfig
from tinker_core.errors import ConfigError

CONFIG = """\
algo: ppo
env: gymnasium.envs.classic_control.continuous_mountain_car:Continuous_MountainCarEnv
env_import: [gymnasium.envs.classic_control]
env_wrappers:
  - gymnasium.wrappers.TimeLimit: {max_episode_steps: 50}
  - RescaleAction: {min_action: -0.5, max_action: 0.5}
total_timesteps: 256
ppo:
  n_steps: 64
  batch_size: 32
  n_epochs: 2
  net_arch: [16]
  learning_rate: lin_1e-3
  log_interval: 64
"""


def test_a_third_party_env_with_wrappers_trains_saves_reloads_resumes_and_evaluates(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CONFIG)
    out = tmp_path / "run"
    assert main(["train", "--config", str(cfg), "--out", str(out), "--checkpoint-every", "128", "--no-progress"]) == 0
    algo = load_algorithm(out / "final")  # no env= : the checkpoint rebuilds the wrapped env
    assert algo.env_config.to_dict() == {
        "id": "gymnasium.envs.classic_control.continuous_mountain_car:Continuous_MountainCarEnv", "kwargs": {},
        "env_import": ["gymnasium.envs.classic_control"],
        "wrappers": [{"gymnasium.wrappers.TimeLimit": {"max_episode_steps": 50}},
                     {"RescaleAction": {"min_action": -0.5, "max_action": 0.5}}]}
    assert list(algo.action_spec.high) == [0.5]
    env = algo.vec_env.envs[0]
    env.reset(seed=0)
    steps = next(t for t in range(1, 100) if any(env.step(np.zeros(1, np.float32))[2:4]))
    assert steps == 50, "the TimeLimit wrapper came back with its argument"
    assert algo.config.schedules == {"learning_rate": "lin_1e-3"}

    assert main(["train", "--resume", str(out / "checkpoints" / "step_128"), "--total-timesteps", "384",
                 "--out", str(tmp_path / "run2"), "--no-progress"]) == 0
    assert load_algorithm(tmp_path / "run2" / "final").num_timesteps == 384
    capsys.readouterr()

    assert main(["eval", str(out / "final"), "--episodes", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert d["episodes"] == 2 and d["safety"] is False and d["env"].endswith(":Continuous_MountainCarEnv")

    assert main(["export", str(out / "final"), "-o", str(tmp_path / "policy.onnx")]) == 0
    manifest = Manifest.from_dict(json.loads((tmp_path / "policy" / "manifest.json").read_text()))
    assert manifest.env == algo.env_config.to_dict()
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "policy"), "--episodes", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert d["episodes"] == 1 and d["mean_return"] <= 0.0


def test_an_rlzoo_entry_pasted_into_a_config_trains(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("algo: sac\nenv: Pendulum-v1\nenv_import: [gymnasium.envs.classic_control]\n"
                   "env_wrappers:\n  - gymnasium.wrappers.TimeLimit:\n      max_episode_steps: 40\n"
                   "rlzoo:\n  Pendulum-v1:\n    n_timesteps: 20000\n    policy: 'MlpPolicy'\n"
                   "    learning_rate: !!float 1e-3\n    policy_kwargs: \"dict(net_arch=[16, 16])\"\n"
                   "sac:\n  batch_size: 16\n  learning_starts: 40\n")
    out = tmp_path / "run"
    assert main(["train", "--config", str(cfg), "--total-timesteps", "120", "--out", str(out), "--no-progress"]) == 0
    algo = load_algorithm(out / "final")
    assert algo.num_timesteps == 120 and algo.config.net_arch == [16, 16] and algo.config.learning_rate == 1e-3
    assert algo.num_episodes == 3, "episodes of 40 steps: the wrapper was applied"
    capsys.readouterr()
    # an RL Zoo file as it is: the entry for --env, the algorithm from the file's name
    zoo = Path(__file__).resolve().parents[2] / "configs" / "rlzoo" / "sac.yml"
    assert main(["train", "--rlzoo", str(zoo), "--env", "Pendulum-v1", "--total-timesteps", "60",
                 "--out", str(tmp_path / "zoo"), "--no-progress"]) == 0
    algo = load_algorithm(tmp_path / "zoo" / "final")
    assert algo.algo_name == "sac" and algo.config.learning_rate == 1e-3 and algo.num_timesteps == 60
    # the gSDE entry is applied as written (SAC with use_sde trains on plain SAC's fast step: compiled where it builds)
    assert main(["train", "--rlzoo", str(zoo), "--env", "MountainCarContinuous-v0", "--total-timesteps", "64",
                 "--out", str(tmp_path / "sde"), "--no-progress"]) == 0
    algo = load_algorithm(tmp_path / "sde" / "final")
    assert algo.config.use_sde and algo.config.log_std_init == -3.67
    assert algo.update_path in ("compiled", "python step")


def test_env_errors_name_the_key_and_the_value(tmp_path, capsys):
    with pytest.raises(ConfigError) as e:
        EnvConfig("NoSuchEnv-v0").make()
    msg = str(e.value)
    assert msg.startswith("env: cannot make 'NoSuchEnv-v0'") and "env_import: [package]" in msg
    assert "tinker/" not in msg and "import sim" not in msg
    assert "env_import: [tinker_sim]" in str(pytest.raises(ConfigError, EnvConfig("tinker/Nope-v0").make).value)
    with pytest.raises(ConfigError, match=r"env_import\[1\]: cannot import module 'no_such_pkg'"):
        EnvConfig("Pendulum-v1", env_import=["gymnasium", "no_such_pkg"]).make()
    with pytest.raises(ConfigError, match=r"env_wrappers\[0\]: module 'gymnasium.wrappers' has no 'TimeLimitt'"):
        EnvConfig("Pendulum-v1", wrappers=["gymnasium.wrappers.TimeLimitt"]).make()
    with pytest.raises(ConfigError, match=r"env_wrappers\[0\]: gymnasium.wrappers.TimeLimit\(max_steps=5\) failed on "
                                          r"'Pendulum-v1': TypeError"):
        EnvConfig("Pendulum-v1", wrappers=[{"gymnasium.wrappers.TimeLimit": {"max_steps": 5}}]).make()
    bad = tmp_path / "bad.yaml"
    bad.write_text("algo: ppo\nenv: panda_gym_missing:PandaReach-v3\n")
    assert main(["train", "--config", str(bad), "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    assert "env: cannot import module 'panda_gym_missing'" in capsys.readouterr().err


def test_resume_names_the_env_that_cannot_be_made_without_tinker_advice(tmp_path, capsys):
    import gymnasium as gym

    from tinker_core.algos import SAC, SACConfig

    gym.register("EnvcfgTmpPendulum-v0", entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv",
                 max_episode_steps=20)
    try:
        algo = SAC("EnvcfgTmpPendulum-v0", SACConfig(net_arch=[8], learning_starts=10, batch_size=8))
        algo.learn(20, progress=False)
        algo.save(tmp_path / "ckpt")
    finally:
        gym.registry.pop("EnvcfgTmpPendulum-v0")
    assert main(["train", "--resume", str(tmp_path / "ckpt"), "--total-timesteps", "40", "--out",
                 str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "env: cannot make 'EnvcfgTmpPendulum-v0'" in err and "env_import: [package]" in err
    assert "tinker/" not in err and "import sim" not in err

