"""Multi-agent training: the agents file, PettingZoo Parallel envs by id, and the multi-agent trainer.

``MultiAgentTrainer(env, "configs/agents_beacon.yaml").learn()`` (or ``tinker train --config`` with an
agents file). tinker's own envs live in ``tinker_sim.multi`` (import it to register their ids).
"""

from tinker_core.multiagent.agents_file import (
    AgentsConfig, AgentSpec, SpaceSpec, dump_agents_file, is_agents_file, load_agents_file,
)
from tinker_core.multiagent.channels import ChannelSpec, Channels
from tinker_core.multiagent.registry import make_parallel_env, register_parallel_env, registered_ids
from tinker_core.multiagent.trainer import MultiAgentTrainer, train_agents

__all__ = ["AgentSpec", "AgentsConfig", "ChannelSpec", "Channels", "MultiAgentTrainer", "SpaceSpec", "dump_agents_file", "is_agents_file",
           "load_agents_file", "make_parallel_env", "register_parallel_env", "registered_ids", "train_agents"]
