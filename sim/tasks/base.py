"""The `Task` interface an `ArmEnv` composes with the world and the robot, and the observation-term record."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tinker_core.errors import ValidationError
from tinker_sim.dynamics import DynamicsParams
from tinker_sim.pybullet_world import PyBulletWorld
from tinker_sim.robot import ArmRobot


def term(name: str, size: int, unit: str, scale: float | Sequence[float] = 1.0, offset: float | Sequence[float] = 0.0,
         frame: str = "none", history: int = 1) -> dict[str, Any]:
    """One named slice of an observation or action vector: ``value = (raw - offset) * scale``, per element."""
    return {
        "name": name, "size": int(size), "unit": unit,
        "scale": [float(x) for x in np.broadcast_to(np.asarray(scale, dtype=np.float64), (size,))],
        "offset": [float(x) for x in np.broadcast_to(np.asarray(offset, dtype=np.float64), (size,))],
        "frame": frame, "history": int(history),
    }


class Task:
    """Base class: a task adds bodies to the world, observation terms, optional action dims and a reward."""

    name = "task"
    terminate_on_success = True
    """end the episode (terminated=True) as soon as the task is solved"""
    action_terms: list[dict[str, Any]] = []
    """extra action dimensions after the joint dimensions"""
    workspace_center = np.array([0.55, 0.0, 0.35])
    """centre of the reachable box in front of the base (base frame, m); scales ee_pos"""
    workspace_half = np.array([0.3, 0.4, 0.3])
    """half-extent of that box, m"""
    dynamics_keys: tuple[str, ...] = ()
    """the `DynamicsParams` keys this task's bodies or observation read, beyond the arm's and the camera's
    (`tinker_sim.dynamics_check` refuses a key nothing reads)"""
    told_terms: tuple[str, ...] = ()
    """observation terms that carry what the robot is told rather than measures (the reach target): a policy
    that computes all of them from the camera image never reads the told values"""

    def __init__(self, world: PyBulletWorld, robot: ArmRobot):
        self.world = world
        self.robot = robot
        self._fixtures: list[tuple[int, dict[str, Any]]] = []

    @property
    def extra_action_dims(self) -> int:
        return sum(t["size"] for t in self.action_terms)

    def obs_terms(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def reset(self, rng: np.random.Generator, params: DynamicsParams) -> None:
        raise NotImplementedError

    def set_goal(self, goal: np.ndarray) -> None:
        """A goal the robot is told (base frame, m), as a person or a real system publishes one; a task whose
        places are fixed takes none (ValidationError)."""
        raise ValidationError(f"{self.name}.goal", "a task that takes a goal (reach)",
                              f"a goal for the {self.name} task, whose places are fixed")

    def apply_action(self, extra: np.ndarray, ee: np.ndarray) -> None:
        """Act on the extra action dims (e.g. suction) before the physics step."""

    def obstacles(self) -> list[int]:
        """Static bodies the arm must never touch (besides the ground), for the violation count."""
        return [body for body, _ in self._fixtures]

    @staticmethod
    def static_fixtures() -> list[tuple[str, Any, Any, Any]]:
        """The task's static boxes as (name, half extents, centre in the base frame, rgba), known without a world
        (`tinker_sim.tasks.fixture_scene`); a task that has some adds them with `add_fixture` when it is built."""
        return []

    def fixtures(self) -> list[dict[str, Any]]:
        """The same static bodies as the SafetyWrapper's known scene takes them (``SafetyConfig.scene`` items:
        name, shape, full size, position and rpy in the robot's base frame), so the guard keeps the arm off
        what the task put in its way; `add_fixture` makes both from one description."""
        return [dict(d) for _, d in self._fixtures]

    def add_fixture(self, name: str, half_extents: Any, center_in_base: Any, rgba: Any) -> int:
        """A static box of the task, at ``center_in_base`` (m, base frame): a simulator body, an obstacle for the
        violation count and a primitive of the guard's known scene."""
        half, center = np.asarray(half_extents, dtype=float), np.asarray(center_in_base, dtype=float)
        body = self.world.add_box(half, center + self.robot.base_position, rgba)
        self._fixtures.append((body, scene_item(name, half, center)))
        return body

    def observe(self, ee: np.ndarray) -> np.ndarray:
        """Raw (unscaled) task terms, concatenated in `obs_terms` order."""
        raise NotImplementedError

    def evaluate(self, ee: np.ndarray) -> tuple[float, bool, dict[str, Any]]:
        """(reward, success, task info) after a step."""
        raise NotImplementedError

    def state(self, ee: np.ndarray) -> dict[str, Any]:
        """A JSON-friendly summary of the task (for the real-time robot's task topic)."""
        _, success, info = self.evaluate(ee)
        return {"success": bool(success), **{k: v for k, v in info.items() if k != "is_success"}}


def scene_item(name: str, half_extents: Any, center_in_base: Any) -> dict[str, Any]:
    """A task's static box as a SafetyWrapper scene item (``SafetyConfig.scene``: full size, base frame)."""
    half, center = np.asarray(half_extents, dtype=float), np.asarray(center_in_base, dtype=float)
    return {"name": name, "shape": "box", "size": (2 * half).tolist(), "position": center.tolist(),
            "rpy": [0.0, 0.0, 0.0]}
