"""Preallocated experience storage (torch tensors, no per-step allocation) and the typed batches."""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

import numpy as np
import torch

from tinker_core.spec import AnySpec, DictSpec, Spec

Obs = Any  # torch.Tensor or dict[str, torch.Tensor]


class ReplaySamples(NamedTuple):
    """A minibatch for off-policy updates; actions are in the network's units ([-1, 1] or index)."""

    obs: Obs
    actions: torch.Tensor
    next_obs: Obs
    rewards: torch.Tensor
    dones: torch.Tensor  # terminated only: truncated episodes still bootstrap
    demo: torch.Tensor | None = None
    """the rows that are demonstrations (bool; an external learner's ``demo_mask``); None: none are"""


class RolloutSamples(NamedTuple):
    """A PPO minibatch."""

    obs: Obs
    actions: torch.Tensor
    old_values: torch.Tensor
    old_log_prob: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor


def _storage_dtype(spec: Spec) -> torch.dtype:
    return torch.uint8 if spec.dtype == "uint8" else torch.float32


def _alloc(spec: AnySpec, lead: tuple[int, ...], device: torch.device) -> Obs:
    if isinstance(spec, DictSpec):
        return {k: _alloc(s, lead, device) for k, s in spec.items()}
    return torch.zeros((*lead, *spec.shape), dtype=_storage_dtype(spec), device=device)


def _put(dst: Obs, idx: Any, src: Any) -> None:
    if isinstance(dst, dict):
        for k in dst:
            _put(dst[k], idx, src[k])
    else:
        dst[idx] = torch.as_tensor(np.asarray(src), device=dst.device).to(dst.dtype)


def _take(src: Obs, idx: Any) -> Obs:
    if isinstance(src, dict):
        return {k: v[idx] for k, v in src.items()}
    return src[idx]


def _np_views(x: Obs) -> Any:
    """numpy arrays sharing storage with CPU tensors (a dict for dict observations)."""
    if isinstance(x, dict):
        return {k: _np_views(v) for k, v in x.items()}
    return x.numpy()


def _np_put(dst: Any, idx: Any, src: Any) -> None:
    if isinstance(dst, dict):
        for k in dst:
            _np_put(dst[k], idx, src[k])
    else:
        dst[idx] = src


def _np_take(src: Any, idx: np.ndarray) -> Obs:
    if isinstance(src, dict):
        return {k: _np_take(v, idx) for k, v in src.items()}
    return torch.from_numpy(src.take(idx, axis=0))


def _to_np(x: Obs, n: int, prefix: str) -> dict[str, np.ndarray]:
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            out.update(_to_np(v, n, f"{prefix}.{k}"))
        return out
    return {prefix: x[:n].cpu().numpy()}


class ReplayBuffer:
    """Ring buffer of transitions, stored flat (one row per env step per env)."""

    def __init__(self, capacity: int, obs_spec: AnySpec, action_shape: tuple[int, ...], discrete: bool,
                 device: torch.device):
        self.capacity, self.device = int(capacity), device
        self.obs = _alloc(obs_spec, (self.capacity,), device)
        self.next_obs = _alloc(obs_spec, (self.capacity,), device)
        self.actions = torch.zeros((self.capacity, *action_shape), dtype=torch.long if discrete else torch.float32,
                                   device=device)
        self.rewards = torch.zeros(self.capacity, device=device)
        self.dones = torch.zeros(self.capacity, device=device)
        self.pos = 0
        self.full = False
        # on the CPU, rows are written through numpy views of the same storage: one env step's add
        # costs a few numpy assignments instead of a torch conversion and dispatch per field
        self._views = None if self.device.type != "cpu" else (
            _np_views(self.obs), _np_views(self.next_obs), self.actions.numpy(), self.rewards.numpy(),
            self.dones.numpy())

    def __len__(self) -> int:
        return self.capacity if self.full else self.pos

    def add(self, obs: Any, actions: Any, rewards: np.ndarray, next_obs: Any, terminated: np.ndarray) -> None:
        n = len(rewards)
        if self.pos + n <= self.capacity:
            idx: Any = slice(self.pos, self.pos + n)
        else:
            idx = (np.arange(n) + self.pos) % self.capacity
        if self._views is not None:
            v_obs, v_next, v_act, v_rew, v_done = self._views
            _np_put(v_obs, idx, obs)
            _np_put(v_next, idx, next_obs)
            v_act[idx] = np.asarray(actions).reshape(n, *v_act.shape[1:])
            v_rew[idx] = rewards
            v_done[idx] = terminated
        else:
            self._put_torch(idx, obs, actions, rewards, next_obs, terminated)
        self.pos += n
        if self.pos >= self.capacity:
            self.full = True
            self.pos %= self.capacity

    def _put_torch(self, idx: Any, obs: Any, actions: Any, rewards: np.ndarray, next_obs: Any,
                   terminated: np.ndarray) -> None:
        n = len(rewards)
        if not isinstance(idx, slice):
            idx = torch.as_tensor(idx)
        _put(self.obs, idx, obs)
        _put(self.next_obs, idx, next_obs)
        self.actions[idx] = torch.as_tensor(actions, device=self.device).to(self.actions.dtype).reshape(
            n, *self.actions.shape[1:])
        self.rewards[idx] = torch.as_tensor(np.asarray(rewards, dtype=np.float32), device=self.device)
        self.dones[idx] = torch.as_tensor(np.asarray(terminated, dtype=np.float32), device=self.device)

    def indices(self, batch_size: int, gen: torch.Generator) -> torch.Tensor:
        return torch.randint(0, len(self), (batch_size,), generator=gen)

    def get(self, idx: torch.Tensor | np.ndarray) -> ReplaySamples:
        if self._views is not None:
            i = idx.numpy() if isinstance(idx, torch.Tensor) else np.asarray(idx)
            v_obs, v_next, v_act, v_rew, v_done = self._views
            return ReplaySamples(_np_take(v_obs, i), _np_take(v_act, i), _np_take(v_next, i), _np_take(v_rew, i),
                                 _np_take(v_done, i))
        idx = torch.as_tensor(idx).to(self.device)
        return ReplaySamples(_take(self.obs, idx), self.actions[idx], _take(self.next_obs, idx),
                             self.rewards[idx], self.dones[idx])

    def sample(self, batch_size: int, gen: torch.Generator) -> ReplaySamples:
        return self.get(self.indices(batch_size, gen))

    # -- checkpoint ---------------------------------------------------------------------------------
    def tensors(self) -> dict[str, np.ndarray]:
        n = len(self)
        out = {"pos": np.array([self.pos, int(self.full)], dtype=np.int64),
               "actions": self.actions[:n].cpu().numpy(), "rewards": self.rewards[:n].cpu().numpy(),
               "dones": self.dones[:n].cpu().numpy()}
        out.update(_to_np(self.obs, n, "obs"))
        out.update(_to_np(self.next_obs, n, "next_obs"))
        return out

    def load(self, t: Mapping[str, np.ndarray]) -> None:
        pos, full = (int(x) for x in t["pos"])
        n = t["rewards"].shape[0]
        self.pos, self.full = pos, bool(full)
        self.actions[:n] = torch.from_numpy(np.array(t["actions"]))
        self.rewards[:n] = torch.from_numpy(np.array(t["rewards"]))
        self.dones[:n] = torch.from_numpy(np.array(t["dones"]))
        for name in ("obs", "next_obs"):
            dst = getattr(self, name)
            if isinstance(dst, dict):
                for k in dst:
                    dst[k][:n] = torch.from_numpy(np.array(t[f"{name}.{k}"]))
            else:
                dst[:n] = torch.from_numpy(np.array(t[name]))


class PrioritizedIndex:
    """Proportional prioritized replay (Schaul et al. 2016) over a `ReplayBuffer`'s rows.

    Priorities live in a numpy array; sampling is one cumulative sum per call, which at the buffer
    sizes used here costs less than the network update it feeds.
    """

    def __init__(self, capacity: int, alpha: float = 0.6, eps: float = 1e-6):
        self.p = np.zeros(capacity, dtype=np.float64)
        self.alpha, self.eps, self.max_p = alpha, eps, 1.0

    def added(self, start: int, n: int, capacity: int) -> None:
        self.p[(np.arange(n) + start) % capacity] = self.max_p

    def sample(self, size: int, batch_size: int, beta: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        pr = self.p[:size] ** self.alpha
        cdf = np.cumsum(pr)
        idx = np.searchsorted(cdf, rng.random(batch_size) * cdf[-1], side="right").clip(0, size - 1)
        probs = pr[idx] / cdf[-1]
        w = (size * probs) ** (-beta)
        return idx, (w / w.max()).astype(np.float32)

    def update(self, idx: np.ndarray, td_abs: np.ndarray) -> None:
        p = np.abs(td_abs) + self.eps
        self.p[idx] = p
        self.max_p = max(self.max_p, float(p.max()))
