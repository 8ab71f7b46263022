"""tinker's simulated robots: domain-randomized PyBullet arm tasks registered as gymnasium ids.

``import tinker_sim`` registers ``tinker/ArmReach-v0`` and ``tinker/ArmSort-v0``, and the goal-conditioned
``tinker/PointGoal-v0`` (and ``-Discrete``, for HER; `tinker_sim.goal_env`), the kinematic planar sorter
``tinker/PlanarSort-v0`` (`tinker_sim.planar_sort`) and its scripted skills (``planar_sort/...``, for hierarchical policies); ``sim.make(id, **kwargs)`` builds one. See ``sim/README.md`` for the observation/action layout and how to add your own env.
"""

from tinker_sim.registration import ENV_IDS, GOAL_ENV_IDS, PLANAR_ENV_IDS, SKIRMISH_ENV_IDS, make, register_all

register_all()

__all__ = ["ENV_IDS", "GOAL_ENV_IDS", "PLANAR_ENV_IDS", "SKIRMISH_ENV_IDS", "make", "register_all"]
