"""ArmEnv through its public interface: gymnasium ids, spaces, named terms, command filter, seeding."""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import numpy as np
import pybullet as p
import pytest
from gymnasium.utils.env_checker import check_env

import tinker_sim as sim
from tinker_sim.robot import ArmRobot, default_urdf_path
from tinker_sim.pybullet_world import PyBulletWorld
from tinker_core.errors import ConfigError, ValidationError


@pytest.mark.parametrize("env_id", sorted(sim.ENV_IDS))
def test_every_id_passes_gymnasium_env_checker(env_id, make_env):
    env = make_env(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checker warning is a failure here
        check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", sorted(sim.ENV_IDS))
def test_every_id_passes_env_checker_with_camera_and_randomization(env_id, make_env):
    env = make_env(env_id, camera=True, image_size=32, randomize=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)


def test_robot_limits_come_from_the_urdf():
    world = PyBulletWorld()
    try:
        robot = ArmRobot(world)
        assert robot.urdf_path == default_urdf_path() and robot.urdf_path.is_file()
        assert robot.joint_names == [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]
        infos = [p.getJointInfo(robot.body, j, physicsClientId=world.client) for j in robot.joint_indices]
        np.testing.assert_array_equal(robot.lower, [i[8] for i in infos])
        np.testing.assert_array_equal(robot.upper, [i[9] for i in infos])
        np.testing.assert_array_equal(robot.effort_limits, [i[10] for i in infos])
        np.testing.assert_array_equal(robot.velocity_limits, [i[11] for i in infos])
        assert world.substeps == 12  # 50 ms control period at 240 Hz physics
    finally:
        world.close()


def test_obs_and_action_terms_describe_the_vectors(make_env):
    env = make_env()
    u = env.unwrapped
    names = [t["name"] for t in u.obs_terms]
    assert names[:3] == ["joint_pos", "joint_vel", "ee_pos"]
    assert {"target_pos", "target_minus_ee"} <= set(names)
    assert sum(t["size"] for t in u.obs_terms) == env.observation_space.shape[0]
    assert sum(t["size"] for t in u.action_terms) == env.action_space.shape[0] == 7
    for t in u.obs_terms + u.action_terms:
        assert set(t) == {"name", "size", "unit", "scale", "offset", "frame", "history"}
        assert len(t["scale"]) == len(t["offset"]) == t["size"]
    assert u.joint_names == u.robot.joint_names
    # The decoded joint_pos term is the true joint position (no noise at nominal dynamics).
    from tinker_sim.scripted import decode_terms

    obs, _ = env.reset(seed=1)
    q, _ = u.joint_state
    np.testing.assert_allclose(decode_terms(u.obs_terms, obs)["joint_pos"], q, atol=1e-5)


def test_info_keys_and_reproducible_episode(make_env):
    env = make_env()

    def rollout(seed):
        obs, info = env.reset(seed=seed)
        rng = np.random.default_rng(0)
        out = [obs]
        for _ in range(5):
            obs, reward, term, trunc, info = env.step(rng.uniform(-1, 1, 7).astype(np.float32))
            out.append(obs)
        return np.stack(out), info

    a, info = rollout(7)
    b, _ = rollout(7)
    c, _ = rollout(8)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert set(info) >= {"is_success", "distance", "dynamics", "safety_interventions"}
    assert info["dynamics"]["mass_scale"] == 1.0


def test_wrong_action_shape_is_a_validation_error(make_env):
    env = make_env()
    env.reset(seed=0)
    with pytest.raises(ValidationError, match=r"ArmEnv.step.action: expected float\[7\], got float\[3\]"):
        env.unwrapped.step(np.zeros(3))


def test_unknown_task_is_a_config_error():
    from tinker_sim.arm_env import ArmEnv

    with pytest.raises(ConfigError, match="ArmEnv.task: expected one of"):
        ArmEnv(task="juggle")


def test_command_filter_decides_the_applied_command_and_interventions_are_counted(make_env):
    calls = []

    def hold_still(q_target, q, qd):
        calls.append((q_target.copy(), q.copy(), qd.copy()))
        return q.copy(), SimpleNamespace(intervened=True)

    env = make_env(command_filter=hold_still)
    env.reset(seed=0)
    q0, _ = env.unwrapped.joint_state
    info = {}
    for _ in range(3):
        _, _, _, _, info = env.step(np.ones(7, dtype=np.float32))
    q1, _ = env.unwrapped.joint_state
    assert len(calls) == 3 and calls[0][0].shape == (7,)
    assert not np.allclose(calls[0][0], q0)  # the chain asked for motion ...
    assert np.abs(q1 - q0).max() < 0.02  # ... but the filter's hold was applied
    assert info["safety_interventions"] == 3
    _, info = env.reset(seed=1)
    assert info["safety_interventions"] == 0


def test_a_filter_that_sends_no_command_leaves_the_motors_on_their_target(make_env):
    """The SafetyWrapper answers None before a first valid state: the env commands nothing new (no made-up pose)."""
    env = make_env(command_filter=lambda q_target, q, qd: (None, SimpleNamespace(intervened=True)))
    env.reset(seed=0)
    q0, _ = env.unwrapped.joint_state
    for _ in range(3):
        _, _, _, _, info = env.step(np.ones(7, dtype=np.float32))
    q1, _ = env.unwrapped.joint_state
    assert np.abs(q1 - q0).max() < 0.02 and info["safety_interventions"] == 3


def test_control_period_sets_the_physics_substeps(make_env):
    env = make_env(control_period=0.02)
    w = env.unwrapped.world
    assert w.substeps == 5 and abs(w.substeps * w.timestep - 0.02) < 1e-12
    with pytest.raises(ConfigError, match="whole multiple of the physics timestep"):
        PyBulletWorld(control_period=0.05, timestep=0.03)
    with pytest.raises(ConfigError, match="control_period: expected > 0 s, got 0"):
        PyBulletWorld(control_period=0)


def test_non_finite_actions_never_reach_the_motors(make_env):
    env = make_env()
    env.reset(seed=0)
    q0, _ = env.unwrapped.joint_state
    obs, *_ = env.step(np.array([np.nan, np.inf, -np.inf, 0, 0, 0, 0], dtype=np.float32))
    q1, _ = env.unwrapped.joint_state
    assert np.all(np.isfinite(obs)) and np.all(np.isfinite(q1))
    assert np.abs(q1 - q0).max() < 0.2


@pytest.mark.parametrize("safety", [False, True])
def test_unsafe_states_are_counted_from_the_physics_and_the_safety_wrapper_prevents_them(safety):
    """A policy that dives into the ground: the bare sim reaches unsafe states (counted per kind and in
    ``info['safety_violations']``); with the SafetyWrapper as command filter it reaches none."""
    from tinker_cli._compose import make_env as make_safe_env

    env = make_safe_env("tinker/ArmReach-v0", safety=safety)
    try:
        total = 0
        for seed in range(2):
            env.reset(seed=seed)
            for _ in range(50):
                _, _, term, trunc, info = env.step(np.array([0, 1, 0, 1, 0, 1, 0], np.float32))
                if term or trunc:
                    break
            total += info["safety_violations"]
        counts = env.unwrapped.violations
        if safety:
            assert total == 0 and sum(counts.values()) == 0, counts
        else:
            assert total > 0 and counts["contact"] > 0, counts
    finally:
        env.close()


@pytest.mark.parametrize("safety", [False, True])
def test_the_sorting_tasks_table_and_bins_are_in_the_guards_scene(safety):
    """ArmSort's own table and bins (`Task.fixtures`) join the SafetyWrapper's known scene: a policy that dives
    onto that table touches it bare and never through the guard (the shipped sorter touched it at nominal,
    seed 1005, while the guard knew only the mounting table)."""
    from tinker_cli._compose import make_env as make_safe_env

    env = make_safe_env("tinker/ArmSort-v0", safety=safety)
    try:
        u = env.unwrapped
        names = [f["name"] for f in u.task.fixtures()]
        assert names[0] == "sort_table" and sum(n.startswith("bin") for n in names) == 8
        assert len(u.task.obstacles()) == len(names)
        for seed in range(2):
            env.reset(seed=seed)
            for _ in range(60):
                _, _, term, trunc, info = env.step(np.array([0, 1, 0, 1, 0, 1, 0, -1], np.float32))
                if term or trunc:
                    break
        counts = u.violations
        if safety:
            assert sum(counts.values()) == 0, counts
            assert {f["name"] for f in u.task.fixtures()} <= {s.name for s in env.guard.config.scene}
        else:
            assert counts["contact"] > 0, counts
    finally:
        env.close()


def test_latency_compensation_steps_from_the_newest_command_and_holds_the_suction_back_as_long(make_env):
    """The env playing a compensating policy side (`tinker_core.loop.latency_compensation`) on a robot with 3
    periods of command latency: each step's target is the last target plus the action's delta, although the
    arm has not moved yet, and the suction chosen with a step reaches the cup 3 steps later."""
    env = make_env("tinker/ArmSort-v0", dynamics={"action_latency_steps": 3}, latency_compensation=3)
    u = env.unwrapped
    env.reset(seed=0)
    q0 = u.commanded_target
    suction = []
    real_apply = u.task.apply_action
    u.task.apply_action = lambda extra, ee: (suction.append(float(extra[0])), real_apply(extra, ee))
    action = np.zeros(8)
    action[0], action[7] = 1.0, 1.0  # joint 1 by one max_delta; suction on
    for _ in range(2):
        env.step(action)
    delta = u.action_chain_config.max_delta
    assert np.isclose(u.commanded_target[0], q0[0] + 2 * delta)  # from the command in flight, not the lagged pose
    assert abs(u.joint_state[0][0] - q0[0]) < delta  # the arm itself has barely moved: the commands are in flight
    action[7] = -1.0
    for _ in range(3):
        env.step(action)
    assert suction == [-1.0, -1.0, -1.0, 1.0, 1.0]  # on twice, each landing 3 steps after it was chosen
    with pytest.raises(ConfigError, match="latency_compensation"):
        make_env("tinker/ArmSort-v0", latency_compensation=-1)
