"""`ArmRobot`: the 7-DoF KUKA iiwa from ``pybullet_data``, with its limits read from the URDF.

The URDF is the one source of the joint names, position limits, velocity limits and effort limits
(``getJointInfo``); nothing here repeats those numbers. Commands are joint position targets applied
by PyBullet's position motor with gain ``POSITION_GAIN * actuator_gain`` and the URDF effort limit.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pybullet as p
import pybullet_data

from tinker_sim.pybullet_world import PyBulletWorld
from tinker_core.errors import ConfigError

POSITION_GAIN = 0.1
"""PyBullet position-motor gain at actuator_gain = 1 (tracks a 0.5 rad step within ~0.2 s)."""
VELOCITY_GAIN = 1.0
"""PyBullet velocity-motor gain (damping of the position motor)."""
HOME = (0.0, 0.5, 0.0, -1.5, 0.0, 1.0, 0.0)
"""Joint configuration at episode start (rad): the flange in front of the base, pointing down."""


def default_urdf_path() -> Path:
    """The default robot: ``kuka_iiwa/model.urdf`` from pybullet_data (shipped with pybullet)."""
    return Path(pybullet_data.getDataPath()) / "kuka_iiwa" / "model.urdf"


class ArmRobot:
    """A fixed-base serial arm; all revolute joints are actuated, the last link is the end effector."""

    def __init__(self, world: PyBulletWorld, urdf_path: str | os.PathLike | None = None,
                 base_position: Sequence[float] = (0.0, 0.0, 0.0)):
        self.world = world
        self.urdf_path = Path(urdf_path) if urdf_path is not None else default_urdf_path()
        if not self.urdf_path.is_file():
            raise ConfigError(f"ArmRobot.urdf_path: file not found: {self.urdf_path}")
        c = self.client = world.client
        self.body = p.loadURDF(str(self.urdf_path), basePosition=base_position, useFixedBase=True,
                               flags=p.URDF_USE_INERTIA_FROM_FILE, physicsClientId=c)
        self.base_position = np.asarray(base_position, dtype=np.float64)
        joints = [p.getJointInfo(self.body, j, physicsClientId=c) for j in range(p.getNumJoints(self.body, physicsClientId=c))]
        moving = [info for info in joints if info[2] in (p.JOINT_REVOLUTE, p.JOINT_PRISMATIC)]
        if not moving:
            raise ConfigError(f"ArmRobot: {self.urdf_path} has no revolute or prismatic joint")
        self.joint_indices = [info[0] for info in moving]
        self.joint_names = [info[1].decode() for info in moving]
        self.lower = np.array([info[8] for info in moving], dtype=np.float64)
        self.upper = np.array([info[9] for info in moving], dtype=np.float64)
        self.effort_limits = np.array([info[10] for info in moving], dtype=np.float64)
        self.velocity_limits = np.array([info[11] for info in moving], dtype=np.float64)
        self.joint_damping = np.array([info[6] for info in moving], dtype=np.float64)
        if np.any(self.lower >= self.upper):
            raise ConfigError(f"ArmRobot: {self.urdf_path} has a joint without limits (lower >= upper)")
        self.dof = len(self.joint_indices)
        self.ee_link = joints[-1][0]
        info = [p.getDynamicsInfo(self.body, j, physicsClientId=c) for j in self.joint_indices]
        self._mass = np.array([d[0] for d in info])
        self._inertia = np.array([d[2] for d in info])
        self.home = np.clip(np.asarray(HOME[: self.dof] + (0.0,) * max(0, self.dof - len(HOME))), self.lower, self.upper)
        self._forces = list(self.effort_limits)
        self._kp = [POSITION_GAIN] * self.dof
        self._kd = [VELOCITY_GAIN] * self.dof

    def apply_dynamics(self, mass_scale: float, joint_damping_scale: float, actuator_gain: float, friction: float) -> None:
        """Scale link masses and inertias, joint damping and the motor gain (physical parameters)."""
        c = self.client
        for k, j in enumerate(self.joint_indices):
            p.changeDynamics(self.body, j, mass=float(self._mass[k] * mass_scale),
                             localInertiaDiagonal=list(self._inertia[k] * mass_scale),
                             jointDamping=float(self.joint_damping[k] * joint_damping_scale),
                             lateralFriction=float(friction), physicsClientId=c)
        self._kp = [POSITION_GAIN * float(actuator_gain)] * self.dof

    def reset_joints(self, q: np.ndarray) -> None:
        c = self.client
        for k, j in enumerate(self.joint_indices):
            p.resetJointState(self.body, j, float(q[k]), 0.0, physicsClientId=c)

    def joint_state(self) -> tuple[np.ndarray, np.ndarray]:
        """Measured joint positions (rad) and velocities (rad/s), one batched call."""
        states = p.getJointStates(self.body, self.joint_indices, physicsClientId=self.client)
        q = np.fromiter((s[0] for s in states), np.float64, self.dof)
        qd = np.fromiter((s[1] for s in states), np.float64, self.dof)
        return q, qd

    def command(self, q_target: np.ndarray) -> None:
        """Send joint position targets to every motor at once (held until the next command)."""
        p.setJointMotorControlArray(self.body, self.joint_indices, p.POSITION_CONTROL,
                                    targetPositions=q_target.tolist(), forces=self._forces,
                                    positionGains=self._kp, velocityGains=self._kd, physicsClientId=self.client)

    def ee_position(self) -> np.ndarray:
        """End-effector (last link frame) position in the base frame, m."""
        s = p.getLinkState(self.body, self.ee_link, computeForwardKinematics=True, physicsClientId=self.client)
        return np.asarray(s[4], dtype=np.float64) - self.base_position

    def inverse_kinematics(self, ee_target: np.ndarray, rest: np.ndarray, iterations: int = 40) -> np.ndarray:
        """Joint positions that put the end effector at ``ee_target`` (base frame), pointing down.

        Uses PyBullet's damped-least-squares IK with null-space pull to ``rest`` and writes the result
        into this robot's joint state (so call it on a private kinematic copy, not the simulated arm).
        """
        c = self.client
        world_target = (np.asarray(ee_target) + self.base_position).tolist()
        down = p.getQuaternionFromEuler((0.0, np.pi, 0.0))
        self.reset_joints(rest)
        q = p.calculateInverseKinematics(
            self.body, self.ee_link, world_target, down, lowerLimits=self.lower.tolist(),
            upperLimits=self.upper.tolist(), jointRanges=(self.upper - self.lower).tolist(), restPoses=list(rest),
            maxNumIterations=iterations, residualThreshold=1e-4, physicsClientId=c)
        return np.clip(np.asarray(q[: self.dof], dtype=np.float64), self.lower, self.upper)
