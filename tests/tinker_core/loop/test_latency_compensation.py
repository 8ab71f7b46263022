"""`LatencyCompensation`, `DelayedActions`, `predicted_pose`: the actor's input at the pose in flight (no ROS).

The terms and the kinematics are the simulated ArmSort robot's own (its env's observation terms, the URDF it runs).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import tinker_sim  # noqa: F401  (registers the tinker/ ids)
from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.kinematics import ForwardKinematics
from tinker_core.loop.latency_compensation import (MAX_STEPS, DelayedActions, LatencyCompensation, check_steps,
                                                   predicted_pose)
from tinker_core.loop.observation import ObservationAssembly


@pytest.fixture(scope="module")
def sort_env():
    env = gym.make("tinker/ArmSort-v0")
    env.reset(seed=3)
    yield env.unwrapped
    env.close()


def compensation(env, steps=4):
    fk = ForwardKinematics.from_urdf(None, env.joint_names)
    return LatencyCompensation(env.obs_terms, steps, env.action_chain_config.max_step, ee_fn=fk.ee_position)


def test_the_predicted_pose_is_the_newest_command_within_what_the_commands_in_flight_can_move():
    q = np.zeros(3)
    assert np.array_equal(predicted_pose(None, q, 4, 0.15), q)  # nothing sent yet: where the arm is
    assert np.array_equal(predicted_pose(np.ones(3), q, 0, 0.15), q)  # no compensation
    far = np.array([0.1, -2.0, 0.7])
    assert np.allclose(predicted_pose(far, q, 4, 0.15), [0.1, -0.6, 0.6])  # 4 periods of 0.15 rad at most


def test_extra_actions_land_the_given_number_of_periods_later_and_a_new_episode_drops_those_in_flight():
    d = DelayedActions(2, 1)
    out = [float(d(np.array([v]))[0]) for v in (1.0, 0.5, -0.3, 0.9)]
    assert out == [-1.0, -1.0, 1.0, 0.5]  # off (idle) until the first one lands
    d.reset()
    assert float(d(np.array([0.7]))[0]) == -1.0
    assert float(DelayedActions(0, 1)(np.array([0.7]))[0]) == 0.7  # 0: passes as it is
    with pytest.raises(ValidationError, match="extra_action"):
        d(np.zeros(2))


def test_the_extra_actions_delay_follows_a_latency_taken_mid_episode():
    """latency_auto: longer, the last action sent goes out again for the added periods and each in flight lands that
    much later; shorter, the oldest in flight are dropped."""
    d = DelayedActions(1, 1)
    assert [float(d(np.array([v]))[0]) for v in (1.0, 0.5)] == [-1.0, 1.0]
    d.resize(3)  # 0.5 is in flight; 1.0 was sent last
    assert [float(d(np.array([v]))[0]) for v in (0.2, 0.3, 0.4, 0.6)] == [1.0, 1.0, 0.5, 0.2]
    d.resize(1)  # in flight: 0.3, 0.4, 0.6 -> the newest stays
    assert [float(d(np.array([v]))[0]) for v in (0.7, 0.8)] == [0.6, 0.7]
    d.resize(0)
    assert float(d(np.array([0.9]))[0]) == 0.9


def test_a_following_compensation_takes_a_measured_latency_and_a_fixed_one_refuses_it(sort_env):
    features = sort_env._observe()
    asm = ObservationAssembly(sort_env.obs_terms)
    q = asm.raw_term(features, "joint_pos")
    commanded = q + 0.05
    fk = ForwardKinematics.from_urdf(None, sort_env.joint_names)
    comp = LatencyCompensation(sort_env.obs_terms, 0, sort_env.action_chain_config.max_step, ee_fn=fk.ee_position,
                               follows=True)
    assert comp(features, commanded) is features  # 0 until a latency is taken
    comp.follow(4)
    assert np.allclose(asm.raw_term(comp(features, commanded), "joint_pos"), commanded, atol=1e-5)
    with pytest.raises(ConfigError, match="command_latency.periods"):
        comp.follow(MAX_STEPS + 1)
    with pytest.raises(ConfigError, match="fixed"):
        compensation(sort_env).follow(2)
    # what a latency will need is checked when it is built, not when the first one is taken
    with pytest.raises(ConfigError, match="forward kinematics"):
        LatencyCompensation(sort_env.obs_terms, 0, 0.15, follows=True)


def test_the_arm_terms_move_to_the_pose_in_flight_and_nothing_else_changes(sort_env):
    comp = compensation(sort_env)
    features = sort_env._observe()
    asm = ObservationAssembly(sort_env.obs_terms)
    q = asm.raw_term(features, "joint_pos")
    commanded = q + np.linspace(-0.3, 0.3, q.shape[0])
    out = comp(features, commanded)
    pose = asm.raw_term(out, "joint_pos")
    assert np.allclose(pose, commanded, atol=1e-5)
    ee = asm.raw_term(out, "ee_pos")
    assert np.allclose(ee, ForwardKinematics.from_urdf().ee_position(commanded), atol=1e-5)
    for k in (0, 1):  # each object's place relative to the hand follows the hand to the pose in flight
        obj = asm.raw_term(features, f"obj{k}_pos")
        assert np.allclose(asm.raw_term(out, f"obj{k}_minus_ee"), obj - ee, atol=1e-5)
    moved = {"joint_pos", "ee_pos", "obj0_minus_ee", "obj1_minus_ee"}
    for name in asm.names:
        if name not in moved:
            assert np.array_equal(out[asm.slots[name]], features[asm.slots[name]]), name
    assert not np.array_equal(out, features)


def test_an_arm_at_its_commanded_pose_reads_as_measured(sort_env):
    """At an episode's start nothing is in flight: the command is the pose, and the features stay what they were."""
    comp = compensation(sort_env)
    features = sort_env._observe()
    out = comp(features, sort_env.commanded_target)
    assert np.allclose(out, features, atol=2e-4)
    assert np.allclose(comp(features, None), features, atol=1e-6)


def test_no_compensation_passes_the_features_through_and_bad_settings_are_refused(sort_env):
    features = sort_env._observe()
    assert compensation(sort_env, steps=0)(features, np.full(7, 9.0)) is features
    for bad in (-1, MAX_STEPS + 1, 1.5, True, "4"):
        with pytest.raises(ConfigError, match="latency_compensation"):
            check_steps(bad)
    with pytest.raises(ConfigError, match="no joint_pos"):
        LatencyCompensation([{"name": "x", "size": 1, "offset": 0.0, "scale": 1.0}], 2, 0.15)
    with pytest.raises(ConfigError, match="forward kinematics"):
        LatencyCompensation(sort_env.obs_terms, 2, 0.15)
    comp = compensation(sort_env)
    with pytest.raises(ValidationError, match="commanded"):
        comp(features, np.full(7, np.nan))
    with pytest.raises(ValidationError, match="commanded"):
        comp(features, np.zeros(6))
    with pytest.raises(ValidationError, match="features"):
        comp(features[:-1], None)


def test_an_object_the_suction_holds_goes_with_the_hand_to_the_pose_in_flight(sort_env):
    comp = compensation(sort_env)
    asm = ObservationAssembly(sort_env.obs_terms)
    features = sort_env._observe().copy()
    hand = asm.raw_term(features, "ee_pos")
    asm.write_term(features, "obj0_pos", hand + np.array([0.0, 0.0, -0.03]))  # on the cup
    goal0 = asm.raw_term(features, "obj0_bin_minus_obj") + asm.raw_term(features, "obj0_pos")
    commanded = asm.raw_term(features, "joint_pos") + 0.1
    asm.write_term(features, "suction_active", np.array([1.0]))
    out = comp(features, commanded)
    moved = asm.raw_term(out, "ee_pos") - hand
    assert np.linalg.norm(moved) > 0.02
    np.testing.assert_allclose(asm.raw_term(out, "obj0_pos"), asm.raw_term(features, "obj0_pos") + moved, atol=1e-5)
    np.testing.assert_allclose(asm.raw_term(out, "obj0_minus_ee"), [0.0, 0.0, -0.03], atol=1e-5)
    np.testing.assert_allclose(asm.raw_term(out, "obj0_bin_minus_obj"), goal0 - asm.raw_term(out, "obj0_pos"),
                               atol=1e-5)
    np.testing.assert_array_equal(out[asm.slots["obj1_pos"]], features[asm.slots["obj1_pos"]])  # the other rests
    asm.write_term(features, "suction_active", np.array([0.0]))  # the cup holds nothing: nothing is carried
    out = comp(features, commanded)
    np.testing.assert_array_equal(out[asm.slots["obj0_pos"]], features[asm.slots["obj0_pos"]])
