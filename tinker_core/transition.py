"""The one data contract between modules: the transition ``(obs, action, reward, done, info)``.

``done`` is split as gymnasium does into ``terminated`` (the task ended: no bootstrapping) and
``truncated`` (time limit or external stop: bootstrap from ``next_obs``). Iterating a `Transition`
yields the classic 5-tuple, so ``obs, action, reward, done, info = t`` works.

Room for later work: ``info`` is free-form (agent namespace, option/level of a hierarchical policy,
policy version), and observations may be nested dicts (see `DictSpec`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from tinker_core.errors import ValidationError
from tinker_core.spec import AnySpec, DictSpec, Spec

Obs = Any  # np.ndarray or a (nested) dict of np.ndarray


@dataclass
class Transition:
    """One environment step as seen by every module."""

    obs: Obs
    action: np.ndarray
    reward: float
    terminated: bool
    truncated: bool = False
    info: dict = field(default_factory=dict)
    next_obs: Obs | None = None

    @property
    def done(self) -> bool:
        return bool(self.terminated or self.truncated)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.obs, self.action, self.reward, self.done, self.info))

    def nbytes(self) -> int:
        return _nbytes(self.obs) + _nbytes(self.action) + _nbytes(self.next_obs) + 10


def _nbytes(x: Any) -> int:
    if x is None:
        return 0
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, Mapping):
        return sum(_nbytes(v) for v in x.values())
    return 8


def _stack(items: Sequence[Any]) -> Any:
    first = items[0]
    if isinstance(first, Mapping):
        return {k: _stack([it[k] for it in items]) for k in first}
    return np.stack([np.asarray(it) for it in items])


def _index(x: Any, i: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _index(v, i) for k, v in x.items()}
    return x[i]


@dataclass
class TransitionBatch:
    """A batch of transitions, field by field, with a leading batch axis on every array."""

    obs: Obs
    action: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    next_obs: Obs | None = None
    info: list[dict] = field(default_factory=list)

    @property
    def done(self) -> np.ndarray:
        return np.logical_or(self.terminated, self.truncated)

    def __len__(self) -> int:
        return int(self.reward.shape[0])

    def __iter__(self) -> Iterator[Any]:
        return iter((self.obs, self.action, self.reward, self.done, self.info))

    @classmethod
    def from_transitions(cls, ts: Sequence[Transition]) -> "TransitionBatch":
        if not ts:
            raise ValidationError("TransitionBatch.from_transitions", "at least one transition", "none")
        has_next = all(t.next_obs is not None for t in ts)
        return cls(
            obs=_stack([t.obs for t in ts]),
            action=_stack([t.action for t in ts]),
            reward=np.asarray([t.reward for t in ts], dtype=np.float32),
            terminated=np.asarray([t.terminated for t in ts], dtype=bool),
            truncated=np.asarray([t.truncated for t in ts], dtype=bool),
            next_obs=_stack([t.next_obs for t in ts]) if has_next else None,
            info=[t.info for t in ts],
        )

    def __getitem__(self, i: int) -> Transition:
        return Transition(
            obs=_index(self.obs, i), action=self.action[i], reward=float(self.reward[i]),
            terminated=bool(self.terminated[i]), truncated=bool(self.truncated[i]),
            info=self.info[i] if self.info else {},
            next_obs=None if self.next_obs is None else _index(self.next_obs, i),
        )

    def to_transitions(self) -> list[Transition]:
        return [self[i] for i in range(len(self))]


@dataclass(frozen=True)
class TransitionSpec:
    """The specs of a transition's fields: what a learner or replay buffer accepts."""

    obs: AnySpec
    action: Spec

    def check(self, t: Any, where: str = "transition", batched: bool | None = None, bounds: bool = True) -> None:
        """Check every field of a `Transition` (or, batched, a `TransitionBatch`) against the specs."""
        if not isinstance(t, (Transition, TransitionBatch)):
            raise ValidationError(where, self.describe(), type(t).__name__, "not a Transition")
        batched = isinstance(t, TransitionBatch)
        self.obs.check(t.obs, f"{where}.obs", batched=batched, bounds=bounds)
        self.action.check(t.action, f"{where}.action", batched=batched, bounds=bounds)
        if t.next_obs is not None:
            self.obs.check(t.next_obs, f"{where}.next_obs", batched=batched, bounds=bounds)
        r = t.reward
        if not (math.isfinite(r) if isinstance(r, float) else np.isfinite(np.asarray(r, dtype=np.float64)).all()):
            raise ValidationError(f"{where}.reward", "finite reward", str(r))

    def describe(self) -> str:
        return f"Transition(obs={self.obs.describe()}, action={self.action.describe()})"

    def incompatibility(self, consumer: Any) -> str | None:
        """Why transitions of this spec cannot feed ``consumer``; ``None`` if they can."""
        if not isinstance(consumer, TransitionSpec):
            return f"expected {getattr(consumer, 'describe', lambda: consumer)()}, got {self.describe()}"
        why = self.obs.incompatibility(consumer.obs)
        if why:
            return f"obs: {why}"
        why = self.action.incompatibility(consumer.action)
        return f"action: {why}" if why else None

    def to_dict(self) -> dict:
        return {"obs": self.obs.to_dict(), "action": self.action.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping) -> "TransitionSpec":
        from tinker_core.spec import spec_from_dict

        return cls(spec_from_dict(d["obs"]), spec_from_dict(d["action"]))  # type: ignore[arg-type]


__all__ = ["Transition", "TransitionBatch", "TransitionSpec", "Spec", "DictSpec"]
