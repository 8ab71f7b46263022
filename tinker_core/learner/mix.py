"""`MixedReplay`: separate replay for simulation data, real-robot data and a person's interventions, sampled in
set proportions.

A transition flagged ``info["intervention"]`` (a cycle a person took over: its action is the person's, see
`tinker_core.loop.cycle_join`) goes to the intervention buffer, the learner's own demonstration buffer as in
HIL-SERL and RLPD: once it holds ``intervention_warmup`` transitions, ``round(intervention_fraction * n)`` of
each batch come from it (RLPD's 50/50 by default), the rest from the sim/real mix.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from tinker_core.replay import PrioritizedReplay, ReplayBuffer, StorageConfig, load_replay
from tinker_core.transition import Transition, TransitionBatch

SOURCES = ("sim", "real", "intervention")
"""the buffers, in the order `MixedReplay.sample` concatenates them"""


def source_of(t: Transition) -> str:
    """"intervention" for a cycle a person took over (``info["intervention"]``), else ``info["source"]``: "real"
    for robot data, anything else counts as simulation."""
    info = t.info or {}
    if info.get("intervention"):
        return "intervention"
    return "real" if info.get("source") == "real" else "sim"


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
    """Three buffers; `sample` takes ``round(intervention_fraction * n)`` from interventions once there are
    ``intervention_warmup`` of them, and ``round(real_fraction * rest)`` of the rest from real data when there is
    some."""

    def __init__(self, sim_capacity: int, real_capacity: int, real_fraction: float, prioritized: bool,
                 storage: StorageConfig, seed: int = 0, intervention_capacity: int = 100_000,
                 intervention_fraction: float = 0.5, intervention_warmup: int = 25):
        self.real_fraction = float(real_fraction)
        self.intervention_fraction = float(intervention_fraction)
        self.intervention_warmup = int(intervention_warmup)
        self.prioritized = prioritized
        self.last_split = {src: 0 for src in SOURCES}
        """how the last `sample` split its batch over the buffers"""
        self.sampled = {src: 0 for src in SOURCES}
        """transitions drawn from each buffer so far (the learner's status shows them)"""

        def make(cap: int, s: int) -> ReplayBuffer:
            return PrioritizedReplay(cap, storage=storage, seed=s) if prioritized else ReplayBuffer(cap, storage, seed=s)

        caps = {"sim": sim_capacity, "real": real_capacity, "intervention": intervention_capacity}
        self.buffers: dict[str, ReplayBuffer] = {src: make(caps[src], seed + i) for i, src in enumerate(SOURCES)}

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
        """How many of ``n`` come from each buffer (keys in `SOURCES` order)."""
        sim, real, inter = (len(self.buffers[s]) for s in SOURCES)
        n_int = int(round(self.intervention_fraction * n)) if inter and inter >= self.intervention_warmup else 0
        if not sim and not real:
            n_int = n if inter else 0
        rest = n - n_int
        n_real = int(round(self.real_fraction * rest)) if real else 0
        if not sim:
            n_real = rest
        return {"sim": rest - n_real, "real": n_real, "intervention": n_int}

    def load(self, source: str, directory: str | os.PathLike, seed: int = 0) -> int:
        """Add the transitions of a saved replay (`tinker_core.replay.save_replay`) to ``source``'s buffer; returns
        how many."""
        saved = load_replay(directory, seed=seed)
        n = len(saved)
        if n == 0:
            return 0
        for t in saved.storage.get(np.arange(n), with_info=False).to_transitions():
            self.buffers[source].add(dataclasses.replace(t, info={"source": source}))
        return n

    def demo_mask(self, split: dict[str, int], demo_sources: tuple[str, ...]) -> np.ndarray:
        """Which rows of a batch `sample` drew with ``split`` come from ``demo_sources`` (in `SOURCES` order)."""
        return np.concatenate([np.full(split[src], src in demo_sources) for src in SOURCES])

    def sample(self, n: int) -> tuple[TransitionBatch, np.ndarray | None, dict[str, np.ndarray]]:
        """``(batch, weights or None, {source: slots})``; weights only for prioritized replay. The split it drew
        is ``last_split``."""
        parts, weights, slots = [], [], {}
        self.last_split = self.split(n)
        for src, k in self.last_split.items():
            if k == 0:
                continue
            buf = self.buffers[src]
            self.sampled[src] += k
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
