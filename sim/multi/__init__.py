"""tinker's multi-agent environments (PettingZoo Parallel API) and their ids.

``import tinker_sim.multi`` registers them with tinker_core.multiagent's env registry, so an agents file
can name them (``env: tinker/SwarmFormation-v0``); ``tinker_sim.multi.make(id, **kwargs)`` builds one.
"""

from __future__ import annotations

from typing import Any

from tinker_sim.multi.arm_fleet import ArmFleet
from tinker_sim.multi.beacon import BeaconRelay
from tinker_sim.multi.discs import DiscFleet, DiscRandomization
from tinker_sim.multi.formation import SwarmFormation
from tinker_core.multiagent.registry import make_parallel_env, register_parallel_env

PARALLEL_ENV_IDS = {"tinker/SwarmFormation-v0": SwarmFormation, "tinker/BeaconRelay-v0": BeaconRelay,
                    "tinker/ArmFleet-v0": ArmFleet}

for _id, _cls in PARALLEL_ENV_IDS.items():
    register_parallel_env(_id, _cls)


def make(env_id: str, **kwargs: Any) -> Any:
    """Build a registered multi-agent env."""
    return make_parallel_env(env_id, **kwargs)


__all__ = ["ArmFleet", "BeaconRelay", "DiscFleet", "DiscRandomization", "PARALLEL_ENV_IDS", "SwarmFormation", "make"]
