"""Tasks: what the arm must do (targets, objects, reward, success), separate from the robot and the world."""

from sim.tasks.base import Task, term
from sim.tasks.reach import ReachTask
from sim.tasks.sort import SortTask

TASKS: dict[str, type[Task]] = {"reach": ReachTask, "sort": SortTask}

__all__ = ["Task", "term", "ReachTask", "SortTask", "TASKS"]
