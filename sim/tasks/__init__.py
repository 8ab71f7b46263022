"""Tasks: what the arm must do (targets, objects, reward, success), separate from the robot and the world."""

from tinker_sim.tasks.base import Task, term
from tinker_sim.tasks.reach import ReachTask
from tinker_sim.tasks.sort import SortTask

TASKS: dict[str, type[Task]] = {"reach": ReachTask, "sort": SortTask}

__all__ = ["Task", "term", "ReachTask", "SortTask", "TASKS"]
