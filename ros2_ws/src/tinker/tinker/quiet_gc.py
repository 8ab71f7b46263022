"""Python's cyclic garbage collector out of the cycle's way: it runs in the loop's quiet window.

CPython collects when allocations cross a threshold, that is inside whichever callback allocated
last: in a control node, a cycle. A collection of the older generations walks every tracked object of
a process that has torch, onnxruntime and rclpy loaded, which takes milliseconds. A tinker node
instead freezes its start-up heap (``gc.freeze``: modules, models and message classes are never
scanned again), turns automatic collection off and collects itself right after a cycle's output has
gone out, on CPython's own thresholds (700 allocations for generation 0, then every 10th collection
one generation up), so memory behaves as before and only the moment differs. The diagnostics timer
collects too, so a node that runs no cycles (inactive, waiting for its inputs) still frees memory.
"""

from __future__ import annotations

import gc
import time


class QuietGC:
    """The process's collector schedule (one per process: `install` once, `collect_if_due` after output)."""

    def __init__(self, threshold0: int = 700, threshold1: int = 10, threshold2: int = 10):
        self.thresholds = (threshold0, threshold1, threshold2)
        self.active = False
        self.collections = [0, 0, 0]
        """collections run, per generation"""
        self.max_pause_ns = 0
        self.last_pause_ns = 0

    def install(self) -> None:
        """Freeze the heap built so far and take collection over from the interpreter."""
        gc.collect()
        gc.freeze()
        gc.disable()
        self.active = True

    def uninstall(self) -> None:
        if self.active:
            gc.enable()
            self.active = False

    def due(self) -> int:
        """The generation a collection now would cover, -1 when none is due."""
        c0, c1, c2 = gc.get_count()
        t0, t1, t2 = self.thresholds
        if c0 < t0:
            return -1
        return 2 if (c1 >= t1 and c2 >= t2) else 1 if c1 >= t1 else 0

    def collect_if_due(self) -> int:
        """Collect when due (call it when the cycle's output is out); the generation collected or -1."""
        gen = self.due() if self.active else -1
        if gen >= 0:
            t = time.perf_counter_ns()
            gc.collect(gen)
            self.last_pause_ns = time.perf_counter_ns() - t
            self.max_pause_ns = max(self.max_pause_ns, self.last_pause_ns)
            self.collections[gen] += 1
        return gen


QUIET_GC = QuietGC()
"""This process's schedule: `tinker.runtime.run_nodes` installs it."""
