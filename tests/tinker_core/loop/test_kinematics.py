"""Forward kinematics from the URDF equals the physics engine's end effector (the simulated arm's)."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_sim.arm_env import ArmEnv
from tinker_core.errors import ConfigError
from tinker_core.loop.kinematics import ForwardKinematics


def test_matches_the_simulated_arm_across_poses():
    env = ArmEnv(task="reach")
    try:
        fk = ForwardKinematics.from_urdf(None, env.joint_names)
        rng = np.random.default_rng(2)
        for _ in range(20):
            q = rng.uniform(env.robot.lower, env.robot.upper)
            env.robot.reset_joints(q)
            np.testing.assert_allclose(fk.ee_position(q), env.robot.ee_position(), atol=1e-6)
    finally:
        env.close()


def test_joints_are_taken_by_name(tmp_path):
    fk = ForwardKinematics.from_urdf()
    q = np.linspace(-0.5, 0.5, 7)
    shuffled = ForwardKinematics.from_urdf(None, list(reversed(fk.chain_names)))
    np.testing.assert_allclose(shuffled.ee_position(q[::-1]), fk.ee_position(q))
    with pytest.raises(ConfigError, match="are not in"):
        ForwardKinematics.from_urdf(None, fk.chain_names[:3])
    with pytest.raises(ConfigError, match="file not found"):
        ForwardKinematics(tmp_path / "none.urdf")


def test_the_joint_limits_are_the_urdfs_as_the_simulated_arm_reads_them():
    env = ArmEnv()
    try:
        fk = ForwardKinematics.from_urdf(None, env.joint_names)
        assert np.allclose(fk.limits[0], env.robot.lower) and np.allclose(fk.limits[1], env.robot.upper)
    finally:
        env.close()
