"""Parallel sampling: picklable env factories, gymnasium vector envs in subprocesses, and a Ray-ready runner.

``make_vec("tinker/ArmReach-v0", 4)`` runs 4 envs in 4 worker processes (``AsyncVectorEnv``);
``asynchronous=False`` steps them in this process. Env kwargs (including a ``command_filter``) must be
picklable for subprocesses. For Ray, wrap `EnvRunner` yourself (``ray.remote(EnvRunner).remote(factory)``):
the sim layer does not import ray.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from tinker_core.errors import ConfigError


@dataclass(frozen=True)
class EnvFactory:
    """A picklable ``() -> env`` for one tinker id (usable by AsyncVectorEnv workers and Ray actors)."""

    env_id: str
    """a registered id, e.g. ``tinker/ArmReach-v0``"""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """keyword arguments for the env (``dynamics``, ``randomize``, ``camera``, ...)"""

    def __call__(self) -> gym.Env:
        import tinker_sim as sim  # registers the ids in a fresh worker process

        return sim.make(self.env_id, **self.kwargs)


def make_vec(env_id: str, num_envs: int, asynchronous: bool = True, context: str | None = None,
             **kwargs: Any) -> gym.vector.VectorEnv:
    """``num_envs`` copies of ``env_id``; ``reset(seed=s)`` seeds copy i with ``s + i``."""
    if int(num_envs) < 1:
        raise ConfigError(f"make_vec.num_envs: expected >= 1, got {num_envs}")
    fns = [EnvFactory(env_id, dict(kwargs)) for _ in range(int(num_envs))]
    if asynchronous:
        return gym.vector.AsyncVectorEnv(fns, context=context)
    return gym.vector.SyncVectorEnv(fns)


class EnvRunner:
    """One env that collects transitions on request; meant to live in a Ray actor or any worker process."""

    def __init__(self, factory: EnvFactory, seed: int = 0):
        self.env = factory()
        self.obs, _ = self.env.reset(seed=seed)
        self.episodes = 0

    def spaces(self) -> tuple[gym.Space, gym.Space]:
        return self.env.observation_space, self.env.action_space

    def rollout(self, steps: int, actions: np.ndarray | None = None) -> dict[str, Any]:
        """Step ``steps`` times (random actions unless given, shape (steps, act_dim)); returns stacked arrays."""
        obs, act, rew, term, trunc, succ = [], [], [], [], [], []
        for k in range(int(steps)):
            a = self.env.action_space.sample() if actions is None else np.asarray(actions[k], dtype=np.float32)
            nxt, r, te, tr, info = self.env.step(a)
            obs.append(self.obs)
            act.append(a)
            rew.append(r)
            term.append(te)
            trunc.append(tr)
            succ.append(info.get("is_success", False))
            self.obs = nxt
            if te or tr:
                self.episodes += 1
                self.obs, _ = self.env.reset()
        return {"obs": np.stack(obs), "action": np.stack(act), "reward": np.asarray(rew, np.float32),
                "terminated": np.asarray(term), "truncated": np.asarray(trunc), "is_success": np.asarray(succ),
                "episodes": self.episodes}

    def close(self) -> None:
        self.env.close()
