"""`VecEnv`: N gymnasium envs stepped in lockstep, auto-reset, with episode bookkeeping.

Deliberately thin (a loop over envs): on 2 cores the policy network, not the env loop, dominates,
and a subprocess pool would cost more than it saves. Keeps the raw episode returns for logging and
the success flag (``info["is_success"]``) for curricula.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from tinker_core.errors import ConfigError
from tinker_core.spec import AnySpec, spec_from_space


@dataclass
class EpisodeInfo:
    """One finished episode: raw (unnormalized) return, length, success flag if the env reports one."""

    ret: float
    length: int
    success: bool | None = None


def _stack(obs: Sequence[Any]) -> Any:
    if isinstance(obs[0], dict):
        return {k: np.stack([o[k] for o in obs]) for k in obs[0]}
    return np.stack(obs)


class VecEnv:
    """Lockstep vector of envs. ``step`` returns (obs, reward, terminated, truncated, final_obs)."""

    def __init__(self, envs: Sequence[Any]):
        if not envs:
            raise ConfigError("VecEnv: expected at least one env, got none")
        self.envs = list(envs)
        self.n = len(self.envs)
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self.obs_spec: AnySpec = spec_from_space(self.observation_space)
        self.action_spec = spec_from_space(self.action_space)
        self.discrete = self.action_spec.shape == () and np.dtype(self.action_spec.dtype).kind in "iu"
        self.ep_returns = np.zeros(self.n)
        self.ep_lengths = np.zeros(self.n, dtype=np.int64)
        self.finished: list[EpisodeInfo] = []
        self.obs: Any = None

    @classmethod
    def make(cls, factory: Callable[[], Any], n: int) -> "VecEnv":
        return cls([factory() for _ in range(n)])

    @property
    def unwrapped(self) -> Any:
        return self.envs[0].unwrapped

    @property
    def env_id(self) -> str | None:
        spec = getattr(self.envs[0], "spec", None)
        return None if spec is None else spec.id

    def reset(self, seed: int | None = None) -> Any:
        obs = [e.reset(seed=None if seed is None else seed + i)[0] for i, e in enumerate(self.envs)]
        self.ep_returns[:] = 0.0
        self.ep_lengths[:] = 0
        self.obs = _stack(obs)
        return self.obs

    def step(self, actions: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, list]:
        obs_l, rew = [], np.empty(self.n, dtype=np.float64)
        term = np.zeros(self.n, dtype=bool)
        trunc = np.zeros(self.n, dtype=bool)
        final_obs: list = [None] * self.n
        for i, env in enumerate(self.envs):
            a = actions[i]
            if self.discrete:
                a = int(a)
            o, r, te, tr, info = env.step(a)
            rew[i], term[i], trunc[i] = r, te, tr
            self.ep_returns[i] += r
            self.ep_lengths[i] += 1
            if te or tr:
                succ = info.get("is_success")
                self.finished.append(EpisodeInfo(float(self.ep_returns[i]), int(self.ep_lengths[i]),
                                                 None if succ is None else bool(succ)))
                self.ep_returns[i] = 0.0
                self.ep_lengths[i] = 0
                final_obs[i] = o
                o, _ = env.reset()
            obs_l.append(o)
        self.obs = _stack(obs_l)
        return self.obs, rew, term, trunc, final_obs

    def pop_finished(self) -> list[EpisodeInfo]:
        out, self.finished = self.finished, []
        return out

    def close(self) -> None:
        for e in self.envs:
            e.close()

