"""`PrioritizedReplay`: proportional prioritized experience replay (Schaul et al., 2016).

Slot ``i`` is drawn with probability ``P(i) = p_i^alpha / sum_k p_k^alpha`` where ``p_i = |td_i| + eps``;
new transitions get the largest priority seen so far, so each is replayed at least about once.
The bias this introduces is corrected by importance weights ``w_i = (N * P(i))^-beta``, divided by
the largest weight in the batch so they only scale updates down. A `SumTree` makes sampling and
updates O(log n).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.replay.buffer import ReplayBuffer
from tinker_core.replay.storage import StorageConfig
from tinker_core.replay.sumtree import SumTree
from tinker_core.transition import Transition, TransitionBatch


class PrioritizedReplay(ReplayBuffer):
    """Replay sampled in proportion to priority, with importance-sampling weights."""

    kind = "prioritized"

    def __init__(self, capacity: int, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6,
                 storage: StorageConfig | None = None, seed: int | None = None):
        if not 0.0 <= float(alpha) <= 1.0:
            raise ConfigError(f"PrioritizedReplay.alpha: expected 0..1, got {alpha!r}")
        if not 0.0 <= float(beta) <= 1.0:
            raise ConfigError(f"PrioritizedReplay.beta: expected 0..1, got {beta!r}")
        if not float(eps) > 0.0:
            raise ConfigError(f"PrioritizedReplay.eps: expected > 0, got {eps!r}")
        super().__init__(capacity, storage, seed)
        self.alpha, self.beta, self.eps = float(alpha), float(beta), float(eps)
        self.tree = SumTree(self.storage.capacity)
        self.max_priority = 1.0  # in p^alpha units

    def add(self, t: Transition) -> int:
        with self.lock:
            slot = self.storage.add(t)
            self.tree.update(slot, self.max_priority)
            return slot

    def extend(self, ts: Iterable[Transition]) -> int:
        """Add many transitions with one vectorized priority update."""
        with self.lock:
            slots = [self.storage.add(t) for t in ts]
            if slots:
                self.tree.update(np.asarray(slots), self.max_priority)
            return len(slots)

    def sample(self, batch_size: int, with_info: bool = True) -> tuple[TransitionBatch, np.ndarray, np.ndarray]:  # type: ignore[override]
        """Returns ``(batch, slots, weights)``; pass ``slots`` back to `update_priorities`."""
        with self.lock:
            self._check_batch(batch_size)
            slots = self.tree.sample(int(batch_size), self.rng)
            probs = self.tree[slots] / self.tree.total
            weights = (self.storage.size * probs) ** (-self.beta)
            weights = (weights / weights.max()).astype(np.float32)
            return self.storage.get(slots, with_info=with_info), slots, weights

    def update_priorities(self, slots: np.ndarray, td_errors: np.ndarray) -> None:
        """Set the priority of sampled ``slots`` from their new TD errors."""
        slots = np.asarray(slots, dtype=np.int64).reshape(-1)
        td = np.asarray(td_errors, dtype=np.float64).reshape(-1)
        if td.shape != slots.shape:
            raise ValidationError("PrioritizedReplay.update_priorities.td_errors",
                                  f"one value per slot ({slots.size})", f"{td.size} values")
        if not np.all(np.isfinite(td)):
            raise ValidationError("PrioritizedReplay.update_priorities.td_errors", "finite values",
                                  f"{int((~np.isfinite(td)).sum())} non-finite")
        with self.lock:
            p = (np.abs(td) + self.eps) ** self.alpha
            self.tree.update(slots, p)
            self.max_priority = max(self.max_priority, float(p.max()))

    # -- persistence hooks ----------------------------------------------------------------------
    def extra_state(self) -> dict:
        return {"alpha": self.alpha, "beta": self.beta, "eps": self.eps, "max_priority": self.max_priority}

    def extra_arrays(self) -> dict[str, np.ndarray]:
        return {"priorities": self.tree.leaves()}

    def restore_extra(self, state: dict, arrays: dict[str, np.ndarray]) -> None:
        self.alpha, self.beta, self.eps = state["alpha"], state["beta"], state["eps"]
        self.max_priority = float(state["max_priority"])
        self.tree.set_leaves(arrays["priorities"])
