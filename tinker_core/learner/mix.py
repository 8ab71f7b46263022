"""`MixedReplay`: separate replay for simulation and real-robot data, sampled in a set proportion."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from tinker_core.replay import PrioritizedReplay, ReplayBuffer, StorageConfig, load_replay
from tinker_core.transition import Transition, TransitionBatch

SOURCES = ("sim", "real")


def source_of(t: Transition) -> str:
    """``info["source"]``: "real" for robot data, anything else counts as simulation."""
    return "real" if (t.info or {}).get("source") == "real" else "sim"


def concat(batches: list[TransitionBatch]) -> TransitionBatch:
    """One batch from several with the same layout."""
    if len(batches) == 1:
        return batches[0]

    def cat(xs: list[Any]) -> Any:
        if isinstance(xs[0], dict):
            return {k: cat([x[k] for x in xs]) for k in xs[0]}
        return np.concatenate(xs)

    return TransitionBatch(obs=cat([b.obs for b in batches]), action=cat([b.action for b in batches]),
                           reward=cat([b.reward for b in batches]), terminated=cat([b.terminated for b in batches]),
                           truncated=cat([b.truncated for b in batches]),
                           next_obs=cat([b.next_obs for b in batches]),
                           info=[i for b in batches for i in b.info])


class MixedReplay:
    """Two buffers; `sample` takes ``round(real_fraction * n)`` from real data when there is some."""

    def __init__(self, sim_capacity: int, real_capacity: int, real_fraction: float, prioritized: bool,
                 storage: StorageConfig, seed: int = 0):
        self.real_fraction = float(real_fraction)
        self.prioritized = prioritized

        def make(cap: int, s: int) -> ReplayBuffer:
            return PrioritizedReplay(cap, storage=storage, seed=s) if prioritized else ReplayBuffer(cap, storage, seed=s)

        self.buffers: dict[str, ReplayBuffer] = {"sim": make(sim_capacity, seed), "real": make(real_capacity, seed + 1)}

    def add(self, t: Transition) -> str:
        src = source_of(t)
        self.buffers[src].add(t)
        return src

    def __len__(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    @property
    def acked(self) -> int:
        return sum(b.acked for b in self.buffers.values())

    @property
    def total_added(self) -> int:
        return sum(b.total_added for b in self.buffers.values())

    def split(self, n: int) -> dict[str, int]:
        sim, real = len(self.buffers["sim"]), len(self.buffers["real"])
        n_real = int(round(self.real_fraction * n)) if real else 0
        if not sim:
            n_real = n
        return {"sim": n - n_real, "real": n_real}

    def sample(self, n: int) -> tuple[TransitionBatch, np.ndarray | None, dict[str, np.ndarray]]:
        """``(batch, weights or None, {source: slots})``; weights only for prioritized replay."""
        parts, weights, slots = [], [], {}
        for src, k in self.split(n).items():
            if k == 0:
                continue
            buf = self.buffers[src]
            if isinstance(buf, PrioritizedReplay):
                b, s, w = buf.sample(k, with_info=False)
                slots[src] = s
                weights.append(w)
            else:
                b = buf.sample(k, with_info=False)
            parts.append(b)
        return concat(parts), (np.concatenate(weights) if weights else None), slots

    def update_priorities(self, slots: dict[str, np.ndarray], td_errors: np.ndarray) -> None:
        off = 0
        for src in SOURCES:  # same order as sample() concatenated them
            if src in slots:
                k = len(slots[src])
                self.buffers[src].update_priorities(slots[src], np.asarray(td_errors)[off:off + k])  # type: ignore[attr-defined]
                off += k

    def save(self, directory: str | os.PathLike) -> int:
        return sum(b.save(Path(directory) / f"replay_{src}") for src, b in self.buffers.items())

    def restore(self, directory: str | os.PathLike, seed: int = 0) -> None:
        for i, src in enumerate(SOURCES):
            d = Path(directory) / f"replay_{src}"
            if (d / "index.json").is_file():
                self.buffers[src] = load_replay(d, seed=seed + i)
