"""The gymnasium ids of the sim layer, registered in one loop (importing `sim` registers them)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

ENV_IDS: dict[str, dict[str, Any]] = {
    "tinker/ArmReach-v0": {"kwargs": {"task": "reach"}, "max_episode_steps": 50},
    "tinker/ArmSort-v0": {"kwargs": {"task": "sort"}, "max_episode_steps": 200},
}
"""id -> registration arguments; every id here is run through gymnasium's env checker in the tests"""

GOAL_ENV_IDS: dict[str, dict[str, Any]] = {
    "tinker/PointGoal-v0": {"max_episode_steps": 20},
    "tinker/PointGoalDiscrete-v0": {"kwargs": {"discrete": True}, "max_episode_steps": 20},
}
"""goal-conditioned ids (`tinker_sim.goal_env.PointGoalEnv`: Dict observation and ``compute_reward``, for HER);
each is run through gymnasium's env checker in tests/algos/test_her.py"""


PLANAR_ENV_IDS: dict[str, dict[str, Any]] = {
    "tinker/PlanarSort-v0": {},
}
"""kinematic planar sorting (`tinker_sim.planar_sort.PlanarSortEnv`; it truncates its own episodes after
``steps_per_object * num_objects`` steps); its scripted skills register as ``planar_sort/...``"""


SKIRMISH_ENV_IDS: dict[str, dict[str, Any]] = {
    "tinker/Skirmish-v0": {},
}
"""micro-combat stand-in for a StarCraft II micro scenario, not StarCraft II (`tinker_sim.skirmish.SkirmishEnv`;
it truncates its own episodes after ``max_steps``); its scripted squad skills register as ``skirmish/...``"""


def register_all() -> None:
    from tinker_sim.arm_sort_skills import register as register_arm_skills
    from tinker_sim.planar_sort_skills import register as register_skills
    from tinker_sim.skirmish_skills import register as register_skirmish_skills

    register_skills()
    register_arm_skills()
    register_skirmish_skills()
    for env_id, spec in SKIRMISH_ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="tinker_sim.skirmish:SkirmishEnv", **spec)
    for env_id, spec in PLANAR_ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="tinker_sim.planar_sort:PlanarSortEnv", **spec)
    for env_id, spec in ENV_IDS.items():
        if env_id in gym.registry:
            continue
        gym.register(id=env_id, entry_point="tinker_sim.arm_env:ArmEnv", **spec)
    for env_id, spec in GOAL_ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="tinker_sim.goal_env:PointGoalEnv", **spec)


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """`gymnasium.make` for tinker ids (kwargs go to `ArmEnv`)."""
    register_all()
    return gym.make(env_id, **kwargs)
