"""tinker/Skirmish-v0 (the micro-combat stand-in, not StarCraft II), its scripted squad skills, `OptionEnv` (skills as
a Discrete action), and the num_opponents curriculum reaching the env through HPPO's envs and IMPALA's actors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from tinker_core.algos import HPPO, IMPALA, HPPOConfig, IMPALAConfig
from tinker_core.curriculum import Curriculum, CurriculumConfig
from tinker_core.envs import EnvConfig
from tinker_core.errors import ConfigError
from tinker_core.hierarchy.option_env import OptionEnv
from tinker_core.hierarchy.skills import SkillLibrary, expand_skills
from tinker_sim import SKIRMISH_ENV_IDS
from tinker_sim.skirmish import (
    ACTION_FIELDS, MAX_OPPONENTS, SQUAD_SIZE, SkirmishEnv, obs_dim, opponent_offset, unit_offset,
)

FAR = [0.9, 0.9]


def _env(**kw) -> SkirmishEnv:
    env = SkirmishEnv(**kw)
    env.reset(seed=0)
    return env


def _place(env: SkirmishEnv, units: list, opps: list, unit_hp=None, opp_hp=None) -> np.ndarray:
    """Put the squad and the opponents where a test wants them (missing units dead, far away), gains 1."""
    up = np.array(units + [FAR] * (SQUAD_SIZE - len(units)), float)
    uh = np.array(unit_hp if unit_hp is not None else [1.0] * len(units), float)
    op = np.zeros((MAX_OPPONENTS, 2))
    op[:len(opps)] = opps
    oh = np.zeros(MAX_OPPONENTS)
    oh[:len(opps)] = opp_hp if opp_hp is not None else [env.opponent_hp] * len(opps)
    env.set_state({"unit_pos": up, "unit_hp": np.concatenate([uh, np.zeros(SQUAD_SIZE - len(units))]),
                   "opp_pos": op, "opp_hp": oh, "num_opponents": max(1, len(opps)), "dr": [1.0, 1.0]})
    return env.observe()


def _act(per_unit: dict[int, list]) -> np.ndarray:
    a = np.zeros((SQUAD_SIZE, ACTION_FIELDS), np.float32)
    a[:, 4] = -1.0
    for i, row in per_unit.items():
        a[i] = row
    return a.reshape(-1)


@pytest.mark.parametrize("env_id", sorted(SKIRMISH_ENV_IDS))
def test_every_skirmish_id_passes_the_env_checker(env_id):
    env = gym.make(env_id, num_opponents=7)
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=1)
    assert obs.shape == (obs_dim(),) and env.action_space.shape == (SQUAD_SIZE * ACTION_FIELDS,)
    assert info["num_opponents"] == 7
    assert np.sum(obs[[opponent_offset(j) + 3 for j in range(MAX_OPPONENTS)]]) == 7  # 7 live opponent slots
    assert np.sum(obs[[unit_offset(i) + 3 for i in range(SQUAD_SIZE)]]) == SQUAD_SIZE


def test_a_standing_unit_kills_and_the_last_kill_wins():
    env = _env(num_opponents=1)
    _place(env, [[0.0, 0.0]], [[0.2, 0.0]], opp_hp=[0.05])
    obs, r, term, trunc, info = env.step(_act({0: [0, 0, 0.2, 0.0, 1.0]}))
    assert info["kills"] == 1 and info["is_success"] and term and not trunc
    assert r == pytest.approx(env.kill_reward + env.win_reward - env.shot_cost - env.step_cost)
    assert obs[opponent_offset(0) + 3] == 0.0  # no live opponent left in the observation


def test_a_moving_unit_does_not_fire_and_out_of_range_is_no_shot():
    env = _env(num_opponents=1)
    _place(env, [[0.0, 0.0]], [[0.2, 0.0]], opp_hp=[0.05])
    *_, info = env.step(_act({0: [1.0, 0.0, 0.2, 0.0, 1.0]}))  # moving at full speed: no shot
    assert info["kills"] == 0 and info["shots"] == 0
    env2 = _env(num_opponents=1)
    _place(env2, [[-0.5, 0.0]], [[0.5, 0.0]])
    _, r, *_, info = env2.step(_act({0: [0, 0, 0.5, 0.0, 1.0]}))  # 1.0 away, range 0.35
    assert info["shots"] == 0 and r == pytest.approx(-env2.step_cost)


def test_the_aim_point_picks_the_target_among_those_in_range():
    env = _env(num_opponents=2)
    _place(env, [[0.0, 0.0]], [[0.1, 0.0], [0.0, 0.3]], opp_hp=[0.5, 0.05])
    *_, info = env.step(_act({0: [0, 0, 0.0, 0.3, 1.0]}))  # aims at the farther, weaker one
    assert info["kills"] == 1 and env.opp_hp[0] == pytest.approx(0.5) and env.opp_hp[1] == 0.0


def test_opponents_close_in_and_their_hits_cost_survival_reward():
    env = _env(num_opponents=1)
    _place(env, [[0.0, 0.0]], [[0.05, 0.0]])
    _, r, term, _, info = env.step(_act({}))
    assert env.unit_hp[0] == pytest.approx(1.0 - env.opponent_damage)
    assert info["damage_taken"] == pytest.approx(env.opponent_damage) and not term
    assert r == pytest.approx(-env.damage_weight * env.opponent_damage - env.step_cost)
    env2 = _env(num_opponents=1)
    _place(env2, [[0.0, 0.0]], [[0.5, 0.0]])
    env2.step(_act({}))
    assert env2.opp_pos[0, 0] == pytest.approx(0.5 - env2.opponent_speed)  # walked straight at the unit


def test_the_squad_dying_is_a_loss_and_the_time_limit_truncates():
    env = _env(num_opponents=1)
    _place(env, [[0.0, 0.0]], [[0.05, 0.0]], unit_hp=[0.01])
    _, _, term, trunc, info = env.step(_act({}))
    assert term and not trunc and not info["is_success"] and info["squad_alive"] == 0
    env2 = _env(num_opponents=1, max_steps=3)
    _place(env2, [[-0.9, -0.9]], [[0.9, 0.9]])
    ends = [env2.step(_act({}))[2:4] for _ in range(3)]
    assert ends == [(False, False), (False, False), (False, True)]


def test_the_curriculum_sets_the_number_of_opponents_from_the_next_reset():
    env = SkirmishEnv(num_opponents=5)
    env.reset(seed=0)
    env.set_curriculum("num_opponents", 20.0)
    assert env.num_opponents == 5
    obs, info = env.reset(seed=0)
    assert info["num_opponents"] == 20 and env.num_opponents == 20 and (env.opp_hp > 0).sum() == 20
    with pytest.raises(ConfigError, match=r"unknown parameter 'num_objects'; expected 'num_opponents'"):
        env.set_curriculum("num_objects", 3)
    with pytest.raises(ConfigError, match=r"expected an integer 1\.\.20, got 21"):
        env.set_curriculum("num_opponents", 21)
    with pytest.raises(ConfigError, match=r"SkirmishEnv.num_opponents: expected an integer 1\.\.20, got 0"):
        SkirmishEnv(num_opponents=0)
    with pytest.raises(ConfigError, match=r"SkirmishEnv.step: expected 25 action values \(5 per unit"):
        env.step(np.zeros(3, np.float32))


def test_skills_do_what_their_names_say():
    lib = SkillLibrary(expand_skills(["skirmish"]))
    assert [n.split("/")[1] for n in lib.names] == ["attack_nearest", "focus_weakest", "retreat", "regroup"]
    env = _env(num_opponents=2)
    obs = _place(env, [[0.0, 0.0], [-0.6, 0.0]], [[0.2, 0.0], [0.0, 0.3]], opp_hp=[0.8, 0.1])

    def act(k):
        return lib(torch.as_tensor(obs)[None], torch.tensor([k]))[0].numpy().reshape(SQUAD_SIZE, ACTION_FIELDS)

    att, foc, ret, reg = act(0), act(1), act(2), act(3)
    assert np.allclose(att[0, :2], 0) and att[0, 4] > 0 and np.allclose(att[0, 2:4], [0.2, 0.0], atol=1e-5)
    # unit 1 is out of range: walks at its nearest, (0, 0.3), and does not fire
    assert np.allclose(att[1, :2], np.array([0.6, 0.3]) / np.hypot(0.6, 0.3), atol=1e-5) and att[1, 4] < 0
    assert np.allclose(foc[0, 2:4], [0.0, 0.3], atol=1e-5) and foc[0, 4] > 0  # the weaker one in range
    assert ret[0, 0] < -0.9 and ret[0, 4] < 0  # runs from the nearest (at +x)
    assert reg[0, 0] < -0.9 and reg[1, 0] > 0.9  # both walk to the centroid at x = -0.3
    # the env agrees: focus_weakest kills the weak one, retreat opens the distance
    _, _, _, _, info = env.step(foc.reshape(-1))
    assert env.opp_hp[1] == 0.0 and info["kills"] == 1
    env2 = _env(num_opponents=1)
    obs = _place(env2, [[0.0, 0.0]], [[0.15, 0.0]])
    for _ in range(5):
        obs, *_ = env2.step(lib(torch.as_tensor(obs)[None], torch.tensor([2]))[0].numpy())
    assert env2.opp_pos[0, 0] - env2.unit_pos[0, 0] > 0.15 and env2.unit_hp[0] == 1.0  # faster than them


def test_option_env_runs_a_skill_and_sums_its_discounted_reward():
    gamma, d = 0.9, 4
    env = OptionEnv(SkirmishEnv(num_opponents=5), ["skirmish"], max_duration=d, gamma=gamma)
    twin = SkirmishEnv(num_opponents=5)
    lib = SkillLibrary(expand_skills(["skirmish"]))
    assert env.action_space == gym.spaces.Discrete(4)
    obs, _ = env.reset(seed=3)
    o2, _ = twin.reset(seed=3)
    for option in (0, 2, 1):
        obs, r, term, trunc, info = env.step(option)
        want = 0.0
        for k in range(d):
            o2, r2, *_ = twin.step(lib(torch.as_tensor(o2)[None], torch.tensor([option]))[0].numpy())
            want += gamma ** k * r2
        assert r == pytest.approx(want) and info["duration"] == d and np.array_equal(obs, o2)
    assert env.env_steps == 3 * d
    with pytest.raises(ConfigError, match=r"expected a skill index 0\.\.3, got 4"):
        env.step(4)
    short = OptionEnv(SkirmishEnv(num_opponents=5, max_steps=6), ["skirmish"], max_duration=4)
    short.reset(seed=0)
    assert short.step(0)[3] is False
    _, _, term, trunc, info = short.step(0)
    assert trunc and info["duration"] == 2  # the episode ended inside the option


def test_hppo_curriculum_promotes_on_the_skirmish_envs():
    algo = HPPO("tinker/Skirmish-v0", HPPOConfig(seed=0, skills=["skirmish"], max_duration=5, n_envs=2, n_steps=100,
                                                  batch_size=50, n_epochs=1, log_interval=10**9))
    cur = Curriculum(CurriculumConfig(param="num_opponents", levels=[2, 4], promote_at=0.5, window=3))
    cur.bind(algo)
    assert all(e.unwrapped._next_n == 2 for e in algo.vec_env.envs)
    algo.learn(2000, progress=False, callback=cur)
    assert cur.history and cur.history[0]["to"] == 4  # 2 opponents are won by almost any skill sequence
    assert all(e.unwrapped._next_n == 4 for e in algo.vec_env.envs)
    algo.close()


@pytest.mark.parametrize("policy_loss", ["vtrace", "clip"])
def test_impala_trains_the_high_level_on_option_envs_and_the_curriculum_reaches_its_actors(policy_loss):
    env = EnvConfig("tinker/Skirmish-v0", {}, ["tinker_sim"], [{"tinker_core.hierarchy.option_env.OptionEnv":
                                                                 {"skills": ["skirmish"], "max_duration": 5}}])
    algo = IMPALA(env, IMPALAConfig(seed=0, gamma=0.99 ** 5, num_actors=2, envs_per_actor=2, unroll_length=10,
                                    batch_trajectories=2, queue_size=2, torch_threads=1, log_interval=10**9,
                                    policy_loss=policy_loss))
    assert algo.discrete and algo.n_actions == 4
    cur = Curriculum(CurriculumConfig(param="num_opponents", levels=[2, 4], promote_at=0.5, window=3))
    cur.bind(algo)
    algo.learn(600, progress=False, callback=cur)  # option steps (x5 env steps)
    assert cur.history and cur.history[0]["to"] == 4
    assert algo.num_updates >= 1 and algo.lag.summary()["count"] >= 2
    assert all(s["env_params"].get("num_opponents") in (2.0, 4.0) for s in algo.actor_stats)
    assert algo.env_params == {"num_opponents": 4.0}
    assert np.isfinite(algo._metrics["policy_loss"]) and algo._metrics["lag_max"] >= 0
    # the budget in skirmish env steps: 1..5 per decision learned from (an option ends early only with its episode)
    assert algo.num_timesteps < algo.inner_env_steps <= 5 * algo.num_timesteps
    assert sum(s["inner_env_steps"] for s in algo.actor_stats) >= algo.inner_env_steps
    algo.close()


def test_impala_actor_counts_the_skirmish_steps_behind_its_decisions():
    """A trajectory of T decisions in N OptionEnvs carries the primitive env steps behind them: 5 T N when no
    episode ends (20 opponents start far from the squad: nothing ends within 20 steps), as each env's own clock."""
    from tinker_core.impala.actor import ImpalaActor
    from tinker_core.impala.params import ParamStore
    from tinker_core.impala.queue import LocalQueue

    env = EnvConfig("tinker/Skirmish-v0", {"num_opponents": 20}, ["tinker_sim"],
                    [{"tinker_core.hierarchy.option_env.OptionEnv": {"skills": ["skirmish"], "max_duration": 5}}])
    cfg = IMPALAConfig(seed=0, gamma=0.99 ** 5, envs_per_actor=3, unroll_length=4, torch_threads=1)
    learner = IMPALA(env, cfg)
    params = ParamStore()
    params.publish(0, learner.actor_payload())
    actor = ImpalaActor(learner.env_factory, (learner.obs_spec, learner.action_spec), cfg, 0, LocalQueue(2), params,
                        sync=False)
    actor.run(max_unrolls=1)
    traj = LocalQueue.get_batch(actor.queue, 1)[0]
    assert not traj.terminated.any() and not traj.truncated.any()
    assert traj.env_steps == 5 * 4 * 3 == traj.inner_steps
    assert [e.unwrapped.t for e in actor.vec.envs] == [20, 20, 20]
    assert actor.stats()["inner_env_steps"] == 60 and actor.stats()["steps"] == 12
    learner.update_from_trajectories([traj])
    assert learner.inner_env_steps == 60 and learner.num_timesteps == 12
    actor.close()
    learner.close()


@pytest.mark.parametrize("config", ["configs/hppo_skirmish.yaml", "configs/impala_skirmish.yaml"])
def test_tinker_train_runs_the_shipped_skirmish_configs(tmp_path, config):
    import json
    from pathlib import Path

    from tinker_cli import main

    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "run"
    assert main(["train", "--config", str(root / config), "--out", str(out), "--no-progress",
                 "--total-timesteps", "1000" if "hppo" in config else "200"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["curriculum"]["param"] == "num_opponents" and summary["timesteps"] >= 200
    assert summary["algo"] == ("hppo" if "hppo" in config else "impala")


def test_the_skills_export_to_onnx_and_act_like_torch(tmp_path):
    """The low level (the 4 skills) on onnxruntime gives torch's action for every skill, in states of an episode."""
    from tinker_deploy.hierarchy import export_hierarchy
    from tinker_deploy.hierarchy_runtime import HierarchicalOnnxPolicy

    algo = HPPO("tinker/Skirmish-v0", HPPOConfig(seed=0, skills=["skirmish"], max_duration=5, n_envs=1, n_steps=64,
                                                  batch_size=32, log_interval=10**9))
    root = export_hierarchy(algo.deployable_levels(), algo.hierarchy_metadata(), algo.export_metadata(),
                            tmp_path / "squad.onnx", log=lambda s: None)
    onnx_low = HierarchicalOnnxPolicy(root).low
    env = SkirmishEnv(num_opponents=12)
    obs, _ = env.reset(seed=5)
    checked = 0
    for t in range(60):
        for k in range(4):
            want = algo.skills(torch.as_tensor(obs)[None], torch.tensor([k]))[0].numpy()
            got = onnx_low(np.concatenate([obs, np.eye(4, dtype=np.float32)[k]]))
            assert np.allclose(want, got, atol=1e-5), (t, k)
            checked += 1
        obs, _, te, tr, _ = env.step(algo.skills(torch.as_tensor(obs)[None], torch.tensor([t // 5 % 4]))[0].numpy())
        if te or tr:
            break
    assert checked >= 40
    algo.close()
