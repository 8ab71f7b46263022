"""ArmReach: bring the end effector within `success_distance` of a random target in front of the robot.

Reward per step: ``-distance`` (m) plus ``success_bonus`` when within the success distance. The
episode terminates on success and is truncated by the time limit (50 steps = 2.5 s at 50 ms). The
success test uses the true end-effector position of the simulated arm, never the noisy observation.
The dynamics' ``target_bias_{x,y,z}_m`` model a hand-eye calibration error: the observation carries the
target where the robot is told it is, while reward and success use where it really is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinker_core.errors import ValidationError
from tinker_sim.dynamics import DynamicsParams
from tinker_sim.pybullet_world import PyBulletWorld
from tinker_sim.robot import ArmRobot
from tinker_sim.tasks.base import Task, term

TARGET_LOW = np.array([0.35, -0.3, 0.2])
"""lower corner of the box targets are drawn from (base frame, m); every point in it is reachable pointing down"""
TARGET_HIGH = np.array([0.7, 0.3, 0.55])
"""upper corner of that box"""
SUCCESS_DISTANCE = 0.05
"""m; the default success distance (the success sensor of the live loop takes the task's, `success_rule`)"""
SUCCESS_BONUS = 1.0
"""the default reward added on success"""


class ReachTask(Task):
    name = "reach"
    dynamics_keys = ("target_bias_x_m", "target_bias_y_m", "target_bias_z_m")
    told_terms = ("target_pos", "target_minus_ee")

    def __init__(self, world: PyBulletWorld, robot: ArmRobot, success_distance: float = SUCCESS_DISTANCE,
                 success_bonus: float = SUCCESS_BONUS):
        super().__init__(world, robot)
        self.success_distance = float(success_distance)
        self.success_bonus = float(success_bonus)
        self.target = (TARGET_LOW + TARGET_HIGH) / 2
        self.bias = np.zeros(3)
        self.marker = world.add_sphere(0.025, self.target + robot.base_position, (0.1, 0.8, 0.1, 1.0), collision=False)

    def obs_terms(self) -> list[dict[str, Any]]:
        return [
            term("target_pos", 3, "m", 1.0 / self.workspace_half, self.workspace_center, "base"),
            term("target_minus_ee", 3, "m", 1.0 / 0.2, 0.0, "base"),
        ]

    def reset(self, rng: np.random.Generator, params: DynamicsParams) -> None:
        self.target = rng.uniform(TARGET_LOW, TARGET_HIGH)
        self.bias = np.array([params.target_bias_x_m, params.target_bias_y_m, params.target_bias_z_m])
        self.world.set_pose(self.marker, self.target + self.robot.base_position)

    def set_target(self, target: np.ndarray) -> None:
        self.target = np.asarray(target, dtype=np.float64).copy()
        self.world.set_pose(self.marker, self.target + self.robot.base_position)

    def set_goal(self, goal: np.ndarray) -> None:
        """The robot is told ``goal`` (base frame, m; a person's or a real system's target): the target moves to
        where that tells it, beside it by the episode's calibration error (``bias``). A goal outside the box
        targets are drawn from (where every point is reachable pointing down) is refused."""
        p = np.asarray(goal, dtype=np.float64).reshape(-1)
        if p.shape != (3,) or not np.isfinite(p).all() or (p < TARGET_LOW).any() or (p > TARGET_HIGH).any():
            raise ValidationError("reach.goal", f"a point within {TARGET_LOW.tolist()} .. {TARGET_HIGH.tolist()} m (base "
                                  f"frame: the box reach targets are drawn from)", f"{p.tolist()}")
        self.set_target(p - self.bias)

    def observe(self, ee: np.ndarray) -> np.ndarray:
        told = self.target + self.bias
        return np.concatenate([told, told - ee])

    def evaluate(self, ee: np.ndarray) -> tuple[float, bool, dict[str, Any]]:
        d = float(np.linalg.norm(self.target - ee))
        success = d < self.success_distance
        return -d + (self.success_bonus if success else 0.0), success, {"distance": d}

    def state(self, ee: np.ndarray) -> dict[str, Any]:
        _, success, info = self.evaluate(ee)
        return {"target": self.target.tolist(), "distance": info["distance"], "success": bool(success)}


def success_rule(task_kwargs: dict[str, Any] | None = None) -> dict[str, float]:
    """The success distance and bonus a `ReachTask` made with ``task_kwargs`` uses (the live loop's success sensor,
    `tinker_core.loop.sensor_reward`, takes them from here: one rule for the env and the robot)."""
    kw = task_kwargs or {}
    return {"success_distance": float(kw.get("success_distance", SUCCESS_DISTANCE)),
            "success_bonus": float(kw.get("success_bonus", SUCCESS_BONUS))}
