"""`Trajectory`: one actor's unroll of ``T`` steps in its ``N`` envs, as the learner needs it for V-trace;
`TrajectoryBatch`: several of them side by side, time-major ``[T, B]``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from tinker_core.errors import ConfigError


def stack_obs(obs: Sequence[Any], axis: int = 0) -> Any:
    """np.stack over a sequence of observations (arrays, or dicts of arrays key by key)."""
    if isinstance(obs[0], dict):
        return {k: np.stack([o[k] for o in obs], axis) for k in obs[0]}
    return np.stack(obs, axis)


def concat_obs(obs: Sequence[Any], axis: int) -> Any:
    if isinstance(obs[0], dict):
        return {k: np.concatenate([o[k] for o in obs], axis) for k in obs[0]}
    return np.concatenate(obs, axis)


@dataclass
class Trajectory:
    """``T`` steps of ``N`` envs from one actor, all acted with one policy version.

    ``actions`` are what the policy sampled (0-based indices for discrete actions, unclipped for
    continuous ones), so ``behaviour_log_probs`` is their exact log-probability; ``next_obs[t]`` is
    the observation step t led to (before any reset), which the learner bootstraps from at a
    truncation and after the last step."""

    obs: Any
    """[T, N, *obs_shape] (or a dict of such)."""
    actions: np.ndarray
    """[T, N] (discrete) or [T, N, act_dim]."""
    rewards: np.ndarray
    """[T, N] float32."""
    terminated: np.ndarray
    """[T, N] bool."""
    truncated: np.ndarray
    """[T, N] bool."""
    behaviour_log_probs: np.ndarray
    """[T, N] float32: log mu(a_t | x_t) under the policy that acted."""
    next_obs: Any
    """[T, N, *obs_shape] (or a dict of such)."""
    policy_version: int
    """Learner update count of the weights that acted (-1: initial weights before any publish)."""
    actor_id: int = 0
    episodes: list[tuple[float, int, bool | None]] = field(default_factory=list)
    """(return, length, success) of the episodes that ended in this unroll."""
    env_steps: int | None = None
    """Steps of the envs inside the actor's envs during this unroll, where a wrapper counts them (``env_steps``,
    as `tinker_core.hierarchy.option_env.OptionEnv`'s primitive steps); None: no such counter (one per step)."""

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def steps(self) -> int:
        return int(self.rewards.size)

    @property
    def inner_steps(self) -> int:
        """``env_steps`` where counted, else `steps`."""
        return self.steps if self.env_steps is None else int(self.env_steps)


@dataclass
class TrajectoryBatch:
    """Trajectories side by side along the env axis: every array is ``[T, B]`` (``B`` = all their envs)."""

    obs: Any
    actions: np.ndarray
    rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    behaviour_log_probs: np.ndarray
    next_obs: Any
    policy_versions: np.ndarray
    """[B]: the policy version of each column."""

    @classmethod
    def of(cls, trajs: Sequence[Trajectory]) -> "TrajectoryBatch":
        if not trajs:
            raise ConfigError("TrajectoryBatch.of: expected at least one trajectory, got none")
        lengths = {len(t) for t in trajs}
        if len(lengths) != 1:
            raise ConfigError(f"TrajectoryBatch.of: trajectories must have one length, got lengths {sorted(lengths)}")
        cat = lambda name: np.concatenate([getattr(t, name) for t in trajs], 1)
        versions = np.concatenate([np.full(t.rewards.shape[1], t.policy_version, np.int64) for t in trajs])
        return cls(concat_obs([t.obs for t in trajs], 1), cat("actions"), cat("rewards"), cat("terminated"),
                   cat("truncated"), cat("behaviour_log_probs"), concat_obs([t.next_obs for t in trajs], 1), versions)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.rewards.shape)  # type: ignore[return-value]
