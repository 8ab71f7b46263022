"""Learning algorithms as pipeline modules: PPO, SAC, DQN, IMPALA, hierarchical PPO (HPPO), and BC (behaviour cloning + DAgger).

``algo = SAC("Pendulum-v1", SACConfig(...)); algo.learn(20_000); algo.save("runs/x")``;
``load_algorithm("runs/x")`` restores it (weights, optimizers, replay, RNG, env state) so training
continues exactly where it stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tinker_core.algos.base import AlgoConfig, Algorithm, PolicyModule
from tinker_core.algos.checkpointing import algorithm_from_meta
from tinker_core.algos.bc import BC, BCConfig
from tinker_core.algos.dqn import DQN, DQNConfig
from tinker_core.algos.hppo import HPPO, HPPOConfig
from tinker_core.algos.impala import IMPALA, IMPALAConfig
from tinker_core.algos.ppo import PPO, PPOConfig
from tinker_core.algos.sac import SAC, SACConfig
from tinker_core.diagnostics import DivergenceError
from tinker_core.training.checkpoint import read_checkpoint

ALGOS: dict[str, type[Algorithm]] = {"ppo": PPO, "sac": SAC, "dqn": DQN, "bc": BC, "impala": IMPALA, "hppo": HPPO}


def load_algorithm(path: str | Path, env: Any = None, device: str | None = None) -> Algorithm:
    """Rebuild an algorithm from a checkpoint directory written by ``algo.save(path)``.

    ``env`` defaults to a fresh ``gym.make`` of the recorded env id (import ``sim`` first for
    tinker/ ids); without an env id the algorithm is rebuilt from its specs only.
    """
    meta, files = read_checkpoint(path)
    algo = algorithm_from_meta(meta, env, device, ALGOS)
    algo._restore(meta, files, Path(path))
    return algo


__all__ = ["ALGOS", "AlgoConfig", "Algorithm", "PolicyModule", "PPO", "PPOConfig", "SAC", "SACConfig", "DQN",
           "DQNConfig", "BC", "BCConfig", "IMPALA", "IMPALAConfig", "HPPO", "HPPOConfig", "DivergenceError", "load_algorithm"]
