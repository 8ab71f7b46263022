"""The one observation assembly: perception's observation equals the environment's for the same state.

The environment (`tinker_sim.arm_env.ArmEnv`) builds its observation with `ObservationAssembly`; perception
builds it with `PerceptionCycle` from the shipped bundle's manifest (its ``obs_terms`` and state spec
bounds) and named raw terms as the robot gives them (joint state, the task topic's ``ee_pos`` and task
terms, the last raw action). No ROS: the cycle's model is the identity, so its features are the observation.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinker_deploy.manifest import Manifest
from tinker_sim.arm_env import ArmEnv
from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.observation import OBS_BOUND, ObservationAssembly
from tinker_core.loop.perception import PerceptionCycle

REPO = Path(__file__).resolve().parents[3]
BUNDLES = {"reach": REPO / "pretrained" / "arm_reach" / "bundle", "sort": REPO / "pretrained" / "arm_sort" / "bundle"}


def _perception(task: str) -> PerceptionCycle:
    m = Manifest.from_json((BUNDLES[task] / "manifest.json").read_text())
    n_act = sum(t.size for t in m.action_terms) or int(np.prod(m.action_spec.shape))
    return PerceptionCycle(m.obs_spec, list(m.obs_terms), lambda obs: obs, n_act)


def _robot_inputs(env: ArmEnv, cycle: PerceptionCycle, stamp: int):
    """Hand the env's current state to perception as the robot's topics carry it; returns the features."""
    q, qd = env.joint_state
    ee = env.ee_position
    terms = {"ee_pos": ee}
    raw, off = env.task.observe(ee), 0
    for t in env.task.obs_terms():
        terms[t["name"]] = raw[off: off + t["size"]]
        off += t["size"]
    cycle.on_action(env._last_action.copy())
    assert cycle.on_state(stamp, q, qd) is None  # synced: this state's task terms are still on their way
    out = cycle.on_task(stamp, terms, "0")
    assert out is not None and out.stamp_ns == stamp
    return out.features


@pytest.mark.parametrize("task", ["reach", "sort"])
def test_perception_observation_equals_the_environments(task):
    env = ArmEnv(task=task, control_period=0.05)
    cycle = _perception(task)
    try:
        obs, _ = env.reset(seed=3)
        rng = np.random.default_rng(0)
        for k in range(1, 25):
            np.testing.assert_array_equal(_robot_inputs(env, cycle, k), obs)
            obs, *_ = env.step(rng.uniform(-1, 1, env.action_space.shape))
        # the clip: a target 3 m away (reach) or an object 30 m away (sort) is beyond the observation bound
        if task == "reach":
            env.task.set_target(np.array([3.0, -3.0, 0.5]))
        else:
            env.world.set_pose(env.task.objects[0], np.array([30.0, -30.0, 5.0]) + env.robot.base_position)
        obs = env._observe()
        assert obs.max() == OBS_BOUND and obs.min() == -OBS_BOUND  # the state is beyond the bound both ways
        np.testing.assert_array_equal(_robot_inputs(env, cycle, 100), obs)
    finally:
        env.close()


def test_the_environment_assembles_with_the_shared_assembly():
    env = ArmEnv(task="reach")
    try:
        assert isinstance(env.obs_assembly, ObservationAssembly)
        assert env.obs_assembly.names == [t["name"] for t in env.obs_terms]
        assert env.obs_assembly.size == env.observation_space.shape[0]
    finally:
        env.close()


def test_a_missing_or_wrong_sized_term_is_named():
    asm = ObservationAssembly([{"name": "a", "size": 2, "offset": 0.0, "scale": 1.0},
                               {"name": "b", "size": 1, "offset": [1.0], "scale": [2.0]}])
    np.testing.assert_array_equal(asm.from_sources({"a": [1.0, -20.0], "b": [3.0]}), [1.0, -10.0, 4.0])
    with pytest.raises(ValidationError, match=r"obs\.b: expected 1 values, got no value"):
        asm.from_sources({"a": [0.0, 0.0]})
    with pytest.raises(ValidationError, match=r"obs\.a: expected 2 values, got 3 values"):
        asm.from_sources({"a": [0.0, 0.0, 0.0], "b": [0.0]})
    with pytest.raises(ConfigError, match="duplicate names"):
        ObservationAssembly([{"name": "a", "size": 1, "offset": 0, "scale": 1}] * 2)


def test_unbounded_terms_are_not_clipped():
    asm = ObservationAssembly([{"name": "a", "size": 1, "offset": 0.0, "scale": 1.0}], None, None)
    assert asm.from_sources({"a": [1e6]})[0] == np.float32(1e6)
