"""`SumTree`: a binary tree of priorities for O(log n) updates and prefix-sum sampling.

Leaves hold one priority per replay slot; every inner node holds the sum of its children, so
the root is the total and a value ``u`` in ``[0, total)`` finds the leaf whose cumulative range
contains it by one walk from the root. Both operations are vectorized over a batch with numpy:
one array operation per tree level, ``log2(capacity)`` levels in all.
"""

from __future__ import annotations

import numpy as np

from tinker_core.errors import ValidationError


class SumTree:
    """Priorities of ``capacity`` slots, stored as a complete binary tree in one float64 array."""

    def __init__(self, capacity: int):
        if int(capacity) < 1:
            raise ValidationError("SumTree.capacity", "an integer >= 1", repr(capacity))
        self.capacity = int(capacity)
        self._leaves = 1 << max(0, (self.capacity - 1).bit_length())  # next power of two
        self.depth = self._leaves.bit_length() - 1
        # node 1 is the root; node n has children 2n and 2n+1; leaves start at index _leaves
        self._tree = np.zeros(2 * self._leaves, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self._tree[1])

    def __getitem__(self, idx) -> np.ndarray:
        return self._tree[self._leaves + np.asarray(idx, dtype=np.int64)]

    def max_leaf(self) -> float:
        return float(self._tree[self._leaves:self._leaves + self.capacity].max())

    def update(self, idx, priority) -> None:
        """Set the priority of slot(s) ``idx``; negative or non-finite priorities are refused."""
        idx = np.atleast_1d(np.asarray(idx, dtype=np.int64))
        p = np.broadcast_to(np.asarray(priority, dtype=np.float64), idx.shape)
        if idx.size == 0:
            return
        if idx.min() < 0 or idx.max() >= self.capacity:
            raise ValidationError("SumTree.update.idx", f"slots in [0, {self.capacity})",
                                  f"range [{idx.min()}, {idx.max()}]")
        if not np.all(np.isfinite(p)) or np.any(p < 0):
            raise ValidationError("SumTree.update.priority", "finite priorities >= 0",
                                  f"min {np.nanmin(p) if p.size else None}, non-finite {int((~np.isfinite(p)).sum())}")
        node = idx + self._leaves
        self._tree[node] = p  # with duplicate indices the last write wins, as in a loop
        node = np.unique(node >> 1)
        while node[0] >= 1:
            self._tree[node] = self._tree[2 * node] + self._tree[2 * node + 1]
            if node[0] == 1:
                break
            node = np.unique(node >> 1)

    def find(self, values) -> np.ndarray:
        """Slots whose cumulative priority range contains each value in ``values`` (in ``[0, total)``)."""
        v = np.array(values, dtype=np.float64, copy=True).reshape(-1)
        node = np.ones(v.shape, dtype=np.int64)
        tree = self._tree
        for _ in range(self.depth):
            left = 2 * node
            lv = tree[left]
            go_right = v >= lv
            v = np.where(go_right, v - lv, v)
            node = np.where(go_right, left + 1, left)
        slot = node - self._leaves
        # float round-off can land on an empty (zero-priority) leaf at the right edge: step back
        bad = (slot >= self.capacity) | (tree[node] <= 0)
        if bad.any():
            slot[bad] = self._nonzero_left_of(slot[bad])
        return slot

    def _nonzero_left_of(self, slots: np.ndarray) -> np.ndarray:
        leaves = self._tree[self._leaves:self._leaves + self.capacity]
        nz = np.flatnonzero(leaves > 0)
        if nz.size == 0:
            raise ValidationError("SumTree.find", "a tree with positive total priority", "total 0")
        pos = np.searchsorted(nz, np.minimum(slots, self.capacity - 1), side="right") - 1
        return nz[np.maximum(pos, 0)]

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` slots drawn with probability proportional to priority (stratified over ``n`` segments)."""
        total = self.total
        if total <= 0:
            raise ValidationError("SumTree.sample", "a tree with positive total priority", f"total {total}")
        seg = total / n
        u = (np.arange(n) + rng.random(n)) * seg
        return self.find(np.minimum(u, np.nextafter(total, 0)))

    def leaves(self) -> np.ndarray:
        """A copy of the slot priorities (for persistence)."""
        return self._tree[self._leaves:self._leaves + self.capacity].copy()

    def set_leaves(self, priorities: np.ndarray) -> None:
        """Replace every slot priority at once and rebuild the inner nodes (for restore)."""
        p = np.asarray(priorities, dtype=np.float64)
        if p.shape != (self.capacity,):
            raise ValidationError("SumTree.set_leaves", f"shape ({self.capacity},)", str(p.shape))
        self._tree[:] = 0.0
        self._tree[self._leaves:self._leaves + self.capacity] = p
        lo = self._leaves
        while lo > 1:
            hi, lo = lo, lo // 2
            self._tree[lo:hi] = self._tree[2 * lo:2 * hi:2] + self._tree[2 * lo + 1:2 * hi:2]
