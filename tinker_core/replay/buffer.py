"""`ReplayBuffer`: uniform experience replay over a `RingStorage`, safe to share between threads."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Iterable

import numpy as np

from tinker_core.errors import ValidationError
from tinker_core.replay.storage import RingStorage, StorageConfig
from tinker_core.transition import Transition, TransitionBatch


class ReplayBuffer:
    """Stores the last ``capacity`` transitions and samples them uniformly.

    ``acked`` is the number of transitions (counted from the first ever added) that a completed
    `save` has made durable: after a crash, `load` gives back at least those that still fit in the
    ring. Transitions added after the last save are not acknowledged and may be lost.
    """

    kind = "uniform"

    def __init__(self, capacity: int, storage: StorageConfig | None = None, seed: int | None = None):
        self.storage = RingStorage(capacity, storage)
        self.rng = np.random.default_rng(seed)
        self.lock = threading.RLock()
        self.acked = 0
        self._save_generation = 0

    # -- filling --------------------------------------------------------------------------------
    def add(self, t: Transition) -> int:
        with self.lock:
            return self.storage.add(t)

    def extend(self, ts: Iterable[Transition]) -> int:
        n = 0
        with self.lock:
            for t in ts:
                self.add(t)
                n += 1
        return n

    # -- reading --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.storage.size

    @property
    def capacity(self) -> int:
        return self.storage.capacity

    @property
    def total_added(self) -> int:
        return self.storage.total_added

    def _check_batch(self, batch_size: int) -> None:
        if int(batch_size) < 1:
            raise ValidationError("replay.sample.batch_size", "an integer >= 1", repr(batch_size))
        if self.storage.size == 0:
            raise ValidationError("replay.sample", "a non-empty buffer", "an empty one")

    def sample(self, batch_size: int, with_info: bool = True) -> TransitionBatch:
        """``batch_size`` transitions drawn uniformly with replacement."""
        with self.lock:
            self._check_batch(batch_size)
            slots = self.rng.integers(0, self.storage.size, size=int(batch_size))
            return self.storage.get(slots, with_info=with_info)

    def nbytes(self) -> int:
        return self.storage.nbytes()

    # -- persistence ----------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike) -> int:
        """Persist to ``directory`` (only what changed since the last save); returns ``acked``."""
        from tinker_core.replay.persist import save_replay

        return save_replay(self, directory)

    @classmethod
    def load(cls, directory: str | os.PathLike, seed: int | None = None) -> "ReplayBuffer":
        """Restore a buffer saved by `save` (of this class or a subclass; the file says which)."""
        from tinker_core.replay.persist import load_replay

        buf = load_replay(directory, seed=seed)
        if not isinstance(buf, cls):
            raise ValidationError(f"{Path(directory)}", f"a saved {cls.__name__}", f"a saved {type(buf).__name__}")
        return buf

    # hooks the persistence layer calls; a subclass adds its own state
    def extra_state(self) -> dict:
        return {}

    def extra_arrays(self) -> dict[str, np.ndarray]:
        return {}

    def restore_extra(self, state: dict, arrays: dict[str, np.ndarray]) -> None:
        pass
