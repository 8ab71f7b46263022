"""Tasks: what the arm must do (targets, objects, reward, success), separate from the robot and the world."""

from typing import Any

from tinker_core.errors import ConfigError
from tinker_sim.tasks.base import Task, scene_item, term
from tinker_sim.tasks.reach import ReachTask
from tinker_sim.tasks.sort import SortTask

TASKS: dict[str, type[Task]] = {"reach": ReachTask, "sort": SortTask}


def fixture_scene(task: str) -> list[dict[str, Any]]:
    """The static boxes task ``task`` puts in the arm's way (the sorter's table and bins) as SafetyWrapper scene
    items, without a simulator (`Task.static_fixtures`): what `Task.fixtures` gives once the task is built, for a
    guard in another process."""
    if task not in TASKS:
        raise ConfigError(f"task: expected one of {sorted(TASKS)}, got {task!r}")
    return [scene_item(name, half, center) for name, half, center, _ in TASKS[task].static_fixtures()]


__all__ = ["Task", "term", "ReachTask", "SortTask", "TASKS", "fixture_scene"]
