"""Hindsight Experience Replay (Andrychowicz et al. 2017) for goal-conditioned envs.

A goal-conditioned env (gymnasium-robotics' convention) observes a Dict ``{"observation",
"achieved_goal", "desired_goal"}`` and has a vectorized ``compute_reward(achieved_goal,
desired_goal, info)``. With a sparse reward, almost every stored transition says "missed"; HER
replays each one also as if the goal had been a state the agent did reach, recomputing its reward
with ``compute_reward``, so the failures teach how to reach the goals that were reached.

`HerReplayBuffer` keeps transitions by env and in episode order (SB3's ``HerReplayBuffer`` layout,
``[rows, n_envs]``): every row knows its episode's first row and length, so a goal can be drawn from
the same episode. Only finished episodes (ended by termination or truncation) are sampled, as the
later goals of an unfinished one are not yet known. Of a minibatch, ``n_sampled_goal / (n_sampled_goal
+ 1)`` is relabelled (SB3's ratio), the rest keeps the env's goal and reward. The terminated flag of a
relabelled transition stays the env's (gymnasium-robotics tasks never terminate; truncation never
stops bootstrapping). An episode longer than ``buffer_size // n_envs`` steps is never sampled.
Observations are stored raw, so relabelled rewards are computed on the env's values; normalization
(per key) and flattening happen when a minibatch is drawn.

Config (train YAML, under the algorithm's section)::

    sac:
      her: {n_sampled_goal: 4, goal_selection_strategy: future}

RL Zoo / SB3's ``replay_buffer_class: HerReplayBuffer`` with ``replay_buffer_kwargs`` maps onto this
with `her_config_from_sb3`.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import torch

from tinker_core.algos.buffers import ReplaySamples
from tinker_core.errors import ConfigError, SpecError
from tinker_core.spec import AnySpec, DictSpec, Spec

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
STRATEGIES = ("future", "final", "episode")

ComputeReward = Callable[[np.ndarray, np.ndarray, Any], Any]


@dataclass
class HerConfig:
    """Goal relabelling settings (SB3's ``HerReplayBuffer`` keyword arguments, same names and defaults)."""

    n_sampled_goal: int = 4
    """Relabelled goals per real transition: a minibatch is ``k / (k + 1)`` relabelled."""
    goal_selection_strategy: str = "future"
    """Where a new goal comes from: 'future' (an achieved goal at or after the transition, same
    episode), 'final' (the episode's last achieved goal) or 'episode' (any of the episode's)."""

    def __post_init__(self) -> None:
        if isinstance(self.n_sampled_goal, bool) or not isinstance(self.n_sampled_goal, int) or self.n_sampled_goal < 0:
            raise ConfigError(f"her.n_sampled_goal: expected an integer >= 0, got {self.n_sampled_goal!r}")
        s = str(getattr(self.goal_selection_strategy, "name", self.goal_selection_strategy)).lower()
        if s not in STRATEGIES:
            raise ConfigError(f"her.goal_selection_strategy: expected one of {list(STRATEGIES)}, "
                              f"got {self.goal_selection_strategy!r}")
        self.goal_selection_strategy = s

    @property
    def her_ratio(self) -> float:
        return 1.0 - 1.0 / (self.n_sampled_goal + 1)


def her_config_from_sb3(replay_buffer_class: Any, replay_buffer_kwargs: Any = None) -> HerConfig | None:
    """SB3 / RL Zoo's ``replay_buffer_class`` + ``replay_buffer_kwargs`` -> `HerConfig` (None for the
    plain buffer). The kwargs may be a mapping or RL Zoo's string form ``"dict(n_sampled_goal=4, ...)"``."""
    name = getattr(replay_buffer_class, "__name__", replay_buffer_class)
    if name in (None, "ReplayBuffer", "DictReplayBuffer"):
        return None
    if str(name).rsplit(".", 1)[-1] != "HerReplayBuffer":
        raise ConfigError(f"replay_buffer_class: tinker has HerReplayBuffer (written as her: {{...}}) and the plain "
                          f"buffer, got {replay_buffer_class!r}")
    kw = _parse_kwargs(replay_buffer_kwargs)
    unknown = sorted(set(kw) - {"n_sampled_goal", "goal_selection_strategy", "copy_info_dict"})
    if unknown:
        raise ConfigError(f"replay_buffer_kwargs: unknown key(s) {unknown}; tinker's HER takes n_sampled_goal and "
                          "goal_selection_strategy")
    if kw.pop("copy_info_dict", False):
        raise ConfigError("replay_buffer_kwargs.copy_info_dict: tinker's HER passes compute_reward empty info dicts "
                          "(SB3's default); remove copy_info_dict")
    return HerConfig(**kw)


def _parse_kwargs(kw: Any) -> dict:
    if kw is None:
        return {}
    if isinstance(kw, Mapping):
        return dict(kw)
    if isinstance(kw, str):
        try:
            node = ast.parse(kw.strip(), mode="eval").body
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
                return {k.arg: ast.literal_eval(k.value) for k in node.keywords}  # type: ignore[misc]
            value = ast.literal_eval(node)
            if isinstance(value, dict):
                return value
        except (SyntaxError, ValueError):
            pass
    raise ConfigError(f"replay_buffer_kwargs: expected a mapping or \"dict(key=value, ...)\", got {kw!r}")


def check_goal_spec(spec: AnySpec) -> None:
    """Raise unless ``spec`` is a goal-conditioned Dict with matching vector goals."""
    if not isinstance(spec, DictSpec) or any(k not in spec.fields for k in GOAL_KEYS):
        keys = list(spec.fields) if isinstance(spec, DictSpec) else type(spec).__name__
        raise SpecError(f"her: needs a goal-conditioned env (Dict observation with keys {list(GOAL_KEYS)}), got {keys}")
    a, d = spec["achieved_goal"], spec["desired_goal"]
    if not isinstance(a, Spec) or not isinstance(d, Spec) or a.shape != d.shape:
        raise SpecError(f"her: achieved_goal and desired_goal must be vectors of one shape, got {a!r} and {d!r}")


def _alloc(spec: AnySpec, lead: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {k: np.zeros((*lead, *s.shape), dtype=np.uint8 if s.dtype == "uint8" else np.float32)  # type: ignore[union-attr]
            for k, s in spec.items()}  # type: ignore[union-attr]


class HerReplayBuffer:
    """Episode-aware ring buffer with goal relabelling at sampling time (see the module docstring).

    ``capacity`` counts transitions over all envs (``capacity // n_envs`` rows of ``n_envs``).
    ``prepare(obs)`` turns a drawn (raw, relabelled) dict of observation arrays into what the
    networks take: normalized and flattened as the algorithm does for acting.
    """

    def __init__(self, capacity: int, n_envs: int, obs_spec: DictSpec, action_shape: tuple[int, ...],
                 discrete: bool, device: torch.device, config: HerConfig, compute_reward: ComputeReward,
                 prepare: Callable[[dict[str, np.ndarray]], Any]):
        check_goal_spec(obs_spec)
        self.rows, self.n_envs = int(capacity) // int(n_envs), int(n_envs)
        if self.rows < 2:
            raise ConfigError(f"buffer_size: expected >= 2 * n_envs for HER, got {capacity} with n_envs={n_envs}")
        self.capacity = self.rows * self.n_envs
        self.device, self.config = device, config
        self.compute_reward, self.prepare = compute_reward, prepare
        lead = (self.rows, self.n_envs)
        self.obs, self.next_obs = _alloc(obs_spec, lead), _alloc(obs_spec, lead)
        self.actions = np.zeros((*lead, *action_shape), dtype=np.int64 if discrete else np.float32)
        self.rewards = np.zeros(lead, dtype=np.float32)
        self.dones = np.zeros(lead, dtype=np.float32)  # terminated only
        self.ep_start = np.zeros(lead, dtype=np.int64)
        self.ep_length = np.zeros(lead, dtype=np.int64)  # 0: episode not finished (or overwritten)
        self.cur_ep_start = np.zeros(self.n_envs, dtype=np.int64)
        self.cur_ep_steps = np.zeros(self.n_envs, dtype=np.int64)
        self.pos = 0
        self.full = False
        self._finished = False  # an episode has ended (kept, so that ready() costs nothing per step)

    def __len__(self) -> int:
        return (self.rows if self.full else self.pos) * self.n_envs

    def ready(self) -> bool:
        """Whether a minibatch can be drawn: at least one episode has finished."""
        return self._finished

    def add(self, obs: Mapping[str, np.ndarray], actions: np.ndarray, rewards: np.ndarray,
            next_obs: Mapping[str, np.ndarray], terminated: np.ndarray, done: np.ndarray) -> None:
        """One env step of every env (leading axis ``n_envs``); ``done`` (terminated or truncated)
        closes each env's episode."""
        p, e = self.pos, self.n_envs
        if self.full:  # overwriting the oldest episode: none of it may be sampled any more
            for i in np.flatnonzero(self.ep_length[p]):
                end = self.ep_start[p, i] + self.ep_length[p, i]
                self.ep_length[np.arange(p, end) % self.rows, i] = 0
        for k, dst in self.obs.items():
            dst[p] = obs[k]
            self.next_obs[k][p] = next_obs[k]
        self.actions[p] = np.asarray(actions).reshape(e, *self.actions.shape[2:])
        self.rewards[p] = rewards
        self.dones[p] = terminated
        self.ep_start[p] = self.cur_ep_start
        self.ep_length[p] = 0
        self.pos = (p + 1) % self.rows
        if self.pos == 0:
            self.full = True
        self.cur_ep_steps += 1
        for i in np.flatnonzero(np.asarray(done)):
            start, length = self.cur_ep_start[i], self.cur_ep_steps[i]
            if length <= self.rows:  # a longer episode overwrote its own start: it is not kept
                self.ep_length[np.arange(start, start + length) % self.rows, i] = length
                self._finished = True
            self.cur_ep_start[i] = self.pos
            self.cur_ep_steps[i] = 0

    def _indices(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` (row, env) pairs uniform over the rows of finished episodes (redrawing the few that
        fall in unfinished ones; one pass over the valid rows when they are scarce)."""
        size = (self.rows if self.full else self.pos) * self.n_envs
        flat_valid = self.ep_length.reshape(-1)
        idx = rng.integers(0, size, n)
        for _ in range(8):
            bad = np.flatnonzero(flat_valid[idx] == 0)
            if not len(bad):
                return np.divmod(idx, self.n_envs)
            idx[bad] = rng.integers(0, size, len(bad))
        valid = np.flatnonzero(flat_valid[:size])
        if not len(valid):
            raise ConfigError(f"her: every finished episode was overwritten; buffer_size ({self.capacity}) must hold "
                              "more than one episode per env")
        idx = valid[rng.integers(0, len(valid), n)]
        return np.divmod(idx, self.n_envs)

    def goal_rows(self, rows: np.ndarray, envs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The rows whose next achieved goal becomes the new goal of the transitions at (rows, envs)."""
        start, length = self.ep_start[rows, envs], self.ep_length[rows, envs]
        s = self.config.goal_selection_strategy
        if s == "final":
            j = length - 1
        elif s == "future":
            j = rng.integers((rows - start) % self.rows, length)
        else:
            j = rng.integers(0, length)
        return (start + j) % self.rows

    def sample(self, batch_size: int, rng: np.random.Generator) -> ReplaySamples:
        if not self.ready():
            raise ConfigError("her: no finished episode to sample from yet; learning_starts should exceed the "
                              "env's episode length")
        rows, envs = self._indices(batch_size, rng)
        obs = {k: v[rows, envs] for k, v in self.obs.items()}
        nxt = {k: v[rows, envs] for k, v in self.next_obs.items()}
        rewards = self.rewards[rows, envs]
        n_real = batch_size - int(self.config.her_ratio * batch_size)
        if n_real < batch_size:
            r, e = rows[n_real:], envs[n_real:]
            goals = self.next_obs["achieved_goal"][self.goal_rows(r, e, rng), e]
            obs["desired_goal"][n_real:] = goals
            nxt["desired_goal"][n_real:] = goals
            rewards[n_real:] = np.asarray(self.compute_reward(nxt["achieved_goal"][n_real:], goals,
                                                              [{} for _ in range(len(r))]), dtype=np.float32)
        dev = self.device
        return ReplaySamples(self._tensor(self.prepare(obs)), torch.from_numpy(self.actions[rows, envs]).to(dev),
                             self._tensor(self.prepare(nxt)), torch.from_numpy(rewards).to(dev),
                             torch.from_numpy(self.dones[rows, envs]).to(dev))

    def _tensor(self, x: Any) -> Any:
        if isinstance(x, dict):
            return {k: torch.from_numpy(np.ascontiguousarray(v)).to(self.device) for k, v in x.items()}
        return torch.from_numpy(np.ascontiguousarray(x)).to(self.device)

    # -- checkpoint ---------------------------------------------------------------------------------
    def tensors(self) -> dict[str, np.ndarray]:
        n = self.rows if self.full else self.pos
        out = {"her.pos": np.array([self.pos, int(self.full), self.rows, self.n_envs], dtype=np.int64),
               "her.cur_ep_start": self.cur_ep_start.copy(), "her.cur_ep_steps": self.cur_ep_steps.copy(),
               "actions": self.actions[:n], "rewards": self.rewards[:n],
               "dones": self.dones[:n], "her.ep_start": self.ep_start[:n], "her.ep_length": self.ep_length[:n]}
        out.update({f"obs.{k}": v[:n] for k, v in self.obs.items()})
        out.update({f"next_obs.{k}": v[:n] for k, v in self.next_obs.items()})
        return out

    def load(self, t: Mapping[str, np.ndarray]) -> None:
        if "her.pos" not in t:
            raise ConfigError("her: the checkpoint's replay was saved without HER; load it with her: null")
        pos, full, rows, n_envs = (int(x) for x in t["her.pos"])
        if (rows, n_envs) != (self.rows, self.n_envs):
            raise ConfigError(f"her: the checkpoint's replay has {rows} rows x {n_envs} envs, this buffer "
                              f"{self.rows} x {self.n_envs} (buffer_size and n_envs must match)")
        n = t["rewards"].shape[0]
        self.pos, self.full = pos, bool(full)
        self.cur_ep_start[:] = t["her.cur_ep_start"]
        self.cur_ep_steps[:] = t["her.cur_ep_steps"]
        for name in ("actions", "rewards", "dones"):
            getattr(self, name)[:n] = t[name]
        self.ep_start[:n], self.ep_length[:n] = t["her.ep_start"], t["her.ep_length"]
        for k in self.obs:
            self.obs[k][:n] = t[f"obs.{k}"]
            self.next_obs[k][:n] = t[f"next_obs.{k}"]
        self._finished = bool(self.ep_length[:n].any())
