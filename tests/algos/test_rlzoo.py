"""RL Zoo entries load as written (configs/rlzoo/*.yml, copied from rl-baselines3-zoo's hyperparams);
where tinker differs, the refusal says what to write instead (each message is pinned here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinker_core.algos import ALGOS, DQN, PPO, SAC, DQNConfig, PPOConfig, SACConfig
from tinker_core.config import load_config, read_yaml
from tinker_core.errors import ConfigError
from tinker_core.rlzoo import Ref, from_rlzoo, parse_literal, policy_kwargs_to_fields

ZOO = Path(__file__).resolve().parents[2] / "configs" / "rlzoo"
REFUSED: set[tuple[str, str]] = set()
"""entries that ask for what tinker's algorithm lacks; refused with a message (none since SAC has gSDE)"""


def _entries():
    for algo in ("ppo", "sac", "dqn"):
        for env_id, entry in read_yaml(ZOO / f"{algo}.yml").items():
            yield pytest.param(algo, env_id, entry, id=f"{algo}-{env_id}")


@pytest.mark.parametrize("algo,env_id,entry", list(_entries()))
def test_every_rlzoo_entry_loads_into_a_config(algo, env_id, entry):
    cls = ALGOS[algo]
    if (algo, env_id) in REFUSED:
        with pytest.raises(ConfigError):
            from_rlzoo(entry, algo, cls.config_class, env_id)
        return
    z = from_rlzoo(entry, algo, cls.config_class, env_id)
    config = load_config(cls.config_class, z.section)
    assert z.total_timesteps == int(float(entry["n_timesteps"]))
    for key in set(entry) & {"gamma", "n_steps", "batch_size", "buffer_size", "tau", "n_envs"}:
        if not (key == "batch_size" and algo == "ppo"):
            assert getattr(config, key) == pytest.approx(float(entry[key])), key


def test_the_mountaincar_ppo_entry_means_what_sb3_does():
    entry = read_yaml(ZOO / "ppo.yml")["MountainCarContinuous-v0"]
    z = from_rlzoo(entry, "ppo", PPOConfig, "ppo.yml")
    c = load_config(PPOConfig, z.section)
    assert (c.normalize_obs, c.normalize_reward, c.use_sde) == (True, True, True)
    assert (c.log_std_init, c.ortho_init) == (-3.29, False)
    assert c.batch_size == 8, "SB3 trains on the whole 8-step rollout when batch_size (256) is larger"
    assert "larger than one rollout" in z.notes[0]
    algo = PPO("MountainCarContinuous-v0", c)
    assert float(algo.pi.log_std.detach().mean()) == pytest.approx(-3.29)


def test_schedules_and_units():
    cart = load_config(PPOConfig, from_rlzoo(read_yaml(ZOO / "ppo.yml")["CartPole-v1"], "ppo", PPOConfig, "x").section)
    assert cart.learning_rate == pytest.approx(1e-3) and cart.clip_range == pytest.approx(0.2)
    assert cart.schedules == {"learning_rate": "lin_0.001", "clip_range": "lin_0.2"}
    acro = from_rlzoo(read_yaml(ZOO / "dqn.yml")["Acrobot-v1"], "dqn", DQNConfig, "x")
    assert acro.section["gradient_steps"] == 4, "gradient_steps -1 with train_freq 4 steps: 4 per training"
    neck = load_config(SACConfig, from_rlzoo(read_yaml(ZOO / "sac.yml")["NeckEnvRelative-v2"], "sac", SACConfig,
                                             "x").section)
    assert (neck.train_freq, neck.train_freq_unit, neck.gradient_steps) == (1, "episode", -1)


def test_a_linear_schedule_decays_during_the_run():
    algo = PPO("Pendulum-v1", PPOConfig(n_steps=32, batch_size=32, n_epochs=1, net_arch=[8], learning_rate="lin_1e-3",
                                        clip_range="lin_0.2", seed=0))
    algo.learn(128, progress=False)
    # the last update ran with 1/4 of the run remaining
    assert algo.opt.param_groups[0]["lr"] == pytest.approx(2.5e-4)
    assert algo.config.clip_range == pytest.approx(0.05)


def test_train_freq_in_episodes_trains_as_many_steps_as_were_collected():
    import gymnasium as gym

    env = gym.wrappers.TimeLimit(gym.make("Pendulum-v1"), 20)
    algo = SAC(env, SACConfig(net_arch=[8], batch_size=8, learning_starts=0, train_freq=[1, "episode"],
                              gradient_steps=-1, seed=0))
    algo.learn(70, progress=False)
    assert algo.num_updates == 60, "three 20-step episodes ended: 3 trainings of 20 gradient steps"
    assert algo.env_config.to_dict()["kwargs"] == {"max_episode_steps": 20}


def test_policy_kwargs_strings_are_read_without_evaluating_code():
    fields = policy_kwargs_to_fields(
        "dict(log_std_init=-2, ortho_init=False, activation_fn=nn.ReLU, net_arch=dict(pi=[256], vf=[256]))", "ppo")
    assert fields == {"log_std_init": -2.0, "ortho_init": False, "activation": "relu", "net_arch": [256]}
    assert parse_literal("dict(a=th.nn.Tanh, b=(1, -2.5), c={'x': None})", "k") == {
        "a": Ref("th.nn.Tanh"), "b": [1, -2.5], "c": {"x": None}}
    with pytest.raises(ConfigError, match=r"k: only literals, dict\(...\) and names are read, not "
                                          r"\"__import__\('os'\).system\('true'\)\""):
        parse_literal("dict(net_arch=__import__('os').system('true'))", "k")


REFUSALS = [
    ("ppo", {"policy_kwargs": "dict(net_arch=dict(pi=[64], vf=[128]))"},
     "x.policy_kwargs.net_arch: net_arch {'pi': [64], 'vf': [128]}: tinker's actor and critic have the same hidden "
     "widths; write one list, e.g. net_arch=[64]"),
    ("ppo", {"policy_kwargs": "dict(activation_fn=nn.GELU)"},
     "x.policy_kwargs.activation_fn: GELU is not one of tinker's activations ['ELU', 'ReLU', 'SiLU', 'Tanh']; "
     "write activation_fn=nn.ReLU (or Tanh, ELU, SiLU)"),
    ("ppo", {"policy_kwargs": "dict(features_extractor_class=MyExtractor)"},
     "x.policy_kwargs.features_extractor_class=MyExtractor: not a setting tinker's PPO has; policy_kwargs may hold "
     "net_arch, activation_fn, log_std_init, ortho_init"),
    ("ppo", {"target_kl": 0.02},
     "x.target_kl=0.02: tinker's PPO has no early stop on KL; remove target_kl (watch train/approx_kl)"),
    ("sac", {"normalize": True},
     "x.normalize=True: tinker normalizes rewards in PPO only; for SAC write normalize: "
     "\"{'norm_obs': True, 'norm_reward': False}\""),
    ("ppo", {"normalize": "{'norm_obs': True, 'clip_obs': 5.0}"},
     "x.normalize: clip_obs=5.0: tinker's normalization uses clip_obs=10.0; remove clip_obs"),
    ("dqn", {"callback": "rl_zoo3.callbacks.ParallelTrainCallback"},
     "x.callback='rl_zoo3.callbacks.ParallelTrainCallback': RL Zoo callbacks are SB3 classes; in tinker use "
     "tinker_core.training.callbacks from Python or --checkpoint-every on the command line"),
    ("ppo", {"replay_buffer_class": "HerReplayBuffer"},
     "x.replay_buffer_class='HerReplayBuffer': PPO has no replay; remove replay_buffer_class"),
    ("sac", {"replay_buffer_class": "PrioritizedReplayBuffer"},
     "replay_buffer_class: tinker has HerReplayBuffer (written as her: {...}) and the plain buffer, got "
     "'PrioritizedReplayBuffer'"),
    ("sac", {"replay_buffer_kwargs": "dict(n_sampled_goal=4)"},
     "x.replay_buffer_kwargs: only read with replay_buffer_class: HerReplayBuffer; add it or remove "
     "replay_buffer_kwargs"),
    ("sac", {"train_freq": [1, "epoch"]}, "x.train_freq: expected N or [N, step] or [N, episode], got [1, 'epoch']"),
    ("ppo", {"policy": "MyPolicy"},
     "x.policy='MyPolicy': expected one of ['CnnPolicy', 'MlpPolicy', 'MultiInputPolicy'] (tinker picks the networks "
     "from the observation space; a custom policy class is not read)"),
]


@pytest.mark.parametrize("algo,entry,message", REFUSALS, ids=[r[2].split(":")[0] + "-" + r[0] for r in REFUSALS])
def test_refusals_say_what_to_write(algo, entry, message):
    with pytest.raises(ConfigError) as e:
        from_rlzoo(entry, algo, ALGOS[algo].config_class, "x")
    assert str(e.value) == message


def test_her_entries_map_onto_tinkers_her():
    """RL Zoo's goal-conditioned entries (e.g. its her.yml) name SB3's HerReplayBuffer and its kwargs."""
    out = from_rlzoo({"replay_buffer_class": "HerReplayBuffer",
                      "replay_buffer_kwargs": "dict(goal_selection_strategy='future', n_sampled_goal=4)"},
                     "sac", ALGOS["sac"].config_class, "x")
    cfg = SACConfig(**out.section)
    assert cfg.her is not None and cfg.her.n_sampled_goal == 4 and cfg.her.goal_selection_strategy == "future"
    plain = from_rlzoo({"replay_buffer_class": "ReplayBuffer"}, "dqn", ALGOS["dqn"].config_class, "x")
    assert "her" not in plain.section


def test_unknown_keys_and_bad_schedules_name_the_key_and_value():
    with pytest.raises(ConfigError, match=r"x.n_stepz=3: not a setting of tinker's PPO; its settings: "):
        from_rlzoo({"n_stepz": 3}, "ppo", PPOConfig, "x")
    with pytest.raises(ConfigError, match=r"learning_rate: expected a number or 'lin_<start>' \(linear from start to 0 "
                                          r"over the run, as in RL Zoo\), got 'exp_1e-3'"):
        PPOConfig(learning_rate="exp_1e-3")
    with pytest.raises(ConfigError, match=r"batch_size: expected 1..n_steps\*n_envs=8, got 256 \(SB3 then trains on "
                                          r"the whole rollout: write batch_size: 8 for the same\)"):
        PPOConfig(n_steps=8, batch_size=256)
    with pytest.raises(ConfigError, match=r"gradient_steps: expected >= 1 or -1"):
        DQNConfig(gradient_steps=0)


def test_dqn_entry_builds_and_trains_a_few_steps():
    z = from_rlzoo(read_yaml(ZOO / "dqn.yml")["Acrobot-v1"], "dqn", DQNConfig, "x")
    section = {**z.section, "buffer_size": 1000, "batch_size": 16, "net_arch": [16]}
    algo = DQN("Acrobot-v1", load_config(DQNConfig, section))
    algo.learn(40, progress=False)
    assert algo.num_updates == 40, "learning_starts 0, train_freq 4, gradient_steps -1 -> 4: one update per step"


def test_frame_stack_and_env_wrapper_become_gymnasium_wrappers():
    from tinker_core.envs import EnvConfig

    z = from_rlzoo({"frame_stack": 4, "env_wrapper": [{"gymnasium.wrappers.TimeLimit": {"max_episode_steps": 7}}]},
                   "sac", SACConfig, "x")
    env = EnvConfig("Pendulum-v1", wrappers=z.env_wrappers).make()
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 3)
    assert env.spec.max_episode_steps == 7


def test_sac_gsde_entry_is_applied():
    """RL Zoo's SAC MountainCarContinuous entry: gSDE and its log_std_init reach tinker's SAC (no longer dropped)."""
    entry = read_yaml(ZOO / "sac.yml")["MountainCarContinuous-v0"]
    z = from_rlzoo(entry, "sac", ALGOS["sac"].config_class, "MountainCarContinuous-v0")
    c = load_config(ALGOS["sac"].config_class, z.section)
    assert c.use_sde is True and c.log_std_init == pytest.approx(-3.67)
    z = from_rlzoo({"use_sde": True, "sde_sample_freq": 8, "use_sde_at_warmup": True}, "sac",
                   ALGOS["sac"].config_class, "x")
    assert z.section == {"use_sde": True, "sde_sample_freq": 8, "use_sde_at_warmup": True}
