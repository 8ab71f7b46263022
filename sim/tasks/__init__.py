"""Tasks: what the arm must do (targets, objects, reward, success), separate from the robot and the world."""

from sim.tasks.base import Task, term
from sim.tasks.reach import ReachTask

TASKS: dict[str, type[Task]] = {"reach": ReachTask}

__all__ = ["Task", "term", "ReachTask", "TASKS"]
