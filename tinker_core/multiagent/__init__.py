"""Multi-agent training: the agents file, PettingZoo Parallel envs by id, and the multi-agent trainer.

``MultiAgentTrainer(env, "configs/agents_beacon.yaml").learn()`` (or ``tinker train --config`` with an
agents file). tinker's own envs live in ``tinker_sim.multi`` (import it to register their ids).
The trainer (torch) loads on first use, so a robot's nodes read channels and agents files without torch.
"""

from typing import Any

from tinker_core.multiagent.agents_file import (
    AgentsConfig, AgentSpec, SpaceSpec, dump_agents_file, is_agents_file, load_agents_file,
)
from tinker_core.multiagent.channels import ChannelSpec, Channels
from tinker_core.multiagent.registry import make_parallel_env, register_parallel_env, registered_ids


def __getattr__(name: str) -> Any:
    if name in ("MultiAgentTrainer", "train_agents"):
        from tinker_core.multiagent import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module 'tinker_core.multiagent' has no attribute {name!r}")


__all__ = ["AgentSpec", "AgentsConfig", "ChannelSpec", "Channels", "MultiAgentTrainer", "SpaceSpec", "dump_agents_file", "is_agents_file",
           "load_agents_file", "make_parallel_env", "register_parallel_env", "registered_ids", "train_agents"]
