"""Flow monitor: per-edge message rate, byte rate and latency percentiles, live and as a snapshot.

`Pipeline.run` feeds it in blocks of ``MONITOR_EVERY`` (64) steps and at the end of a run, so a
snapshot taken from another thread mid-run lags by at most that many steps. The same figures can be
recomputed offline from a trace file (``python -m tinker_core.tracer --latency_breakdown T --flow``).
"""

from __future__ import annotations

import threading
import time
from array import array
from typing import Any, Mapping

import numpy as np


def payload_bytes(x: Any) -> int:
    """Bytes of the arrays in ``x`` (arrays, dicts of arrays, transitions, scalars)."""
    if isinstance(x, np.ndarray):
        return x.nbytes
    if isinstance(x, Mapping):
        return sum(payload_bytes(v) for v in x.values())
    nb = getattr(x, "nbytes", None)
    if callable(nb):
        return int(nb())
    if isinstance(nb, int):
        return nb
    if isinstance(x, (list, tuple)):
        return sum(payload_bytes(v) for v in x)
    return 8 if x is not None else 0


class EdgeStats:
    """Counters of one edge and a ring of its last ``window`` latencies (an ``array('d')``: as cheap to write as a
    list, and read by numpy without converting each float, so a snapshot costs microseconds, not a millisecond)."""

    __slots__ = ("window", "count", "bytes", "first_t", "last_t", "_lat")

    def __init__(self, window: int = 4096):
        self.window = window
        self.count = 0
        self.bytes = 0
        self.first_t = 0.0
        self.last_t = 0.0
        self._lat = array("d", bytes(8 * window))

    def add(self, nbytes: int, latency_s: float, now: float) -> None:
        c = self.count
        if c == 0:
            self.first_t = now
        self._lat[c % self.window] = latency_s
        self.count = c + 1
        self.bytes += nbytes
        self.last_t = now

    def add_many(self, nbytes: int, latencies_s: list[float], first: float, last: float) -> None:
        """Count ``len(latencies_s)`` messages at once (``nbytes`` in total, seen from ``first`` to ``last``)."""
        k = len(latencies_s)
        if not k:
            return
        if self.count == 0:
            self.first_t = first
        w, lat = self.window, self._lat
        if k >= w:
            latencies_s = latencies_s[-w:]
            i = (self.count + k - w) % w
        else:
            i = self.count % w
        head = latencies_s[: w - i]
        lat[i:i + len(head)] = array("d", head)
        rest = latencies_s[len(head):]
        lat[:len(rest)] = array("d", rest)
        self.count += k
        self.bytes += nbytes
        self.last_t = last

    def snapshot(self) -> dict[str, float]:
        lat = np.frombuffer(self._lat, dtype=np.float64, count=min(self.count, self.window))
        lat = lat[np.isfinite(lat)]  # NaN: a message whose latency is unknown (it carries no stamp)
        n = lat.size
        span = max(self.last_t - self.first_t, 1e-9)
        rate = (self.count - 1) / span if self.count > 1 else 0.0
        p50, p99 = (float(x) * 1e6 for x in np.percentile(lat, (50, 99))) if n else (0.0, 0.0)  # one sort for both
        return {
            "messages": self.count,
            "bytes": self.bytes,
            "messages_per_s": rate,
            "bytes_per_s": rate * (self.bytes / self.count) if self.count else 0.0,
            "latency_p50_us": p50,
            "latency_p99_us": p99,
            "latency_samples": int(n),
        }


class FlowMonitor:
    """Counts what crosses each edge. Thread-safe; cheap enough to leave on."""

    def __init__(self, window: int = 4096):
        self.window = window
        self._edges: dict[str, EdgeStats] = {}
        self._lock = threading.Lock()

    def edge(self, name: str) -> EdgeStats:
        """The counters of edge ``name`` (created on first use); hot loops keep it and call ``add``."""
        st = self._edges.get(name)
        if st is None:
            with self._lock:
                st = self._edges.setdefault(name, EdgeStats(self.window))
        return st

    def record(self, edge: str, nbytes: int, latency_s: float, now: float | None = None) -> None:
        """Count one message of ``nbytes`` on ``edge`` that took ``latency_s`` (NaN: unknown); ``now`` in seconds
        (perf_counter by default; any clock that only moves forward)."""
        self.edge(edge).add(nbytes, latency_s, time.perf_counter() if now is None else now)

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {k: v.snapshot() for k, v in self._edges.items()}

    def names(self) -> list[str]:
        """The edges counted so far (no figures computed)."""
        with self._lock:
            return list(self._edges)

    def format(self) -> str:
        return format_flow(self.snapshot())


def format_flow(snapshot: Mapping[str, Mapping[str, float]]) -> str:
    """A table of `FlowMonitor.snapshot` figures, one edge per row (a snapshot from another process too). A latency
    no message carried a stamp for shows as ``-``."""
    rows = [f"{'edge':<40}{'msg/s':>10}{'KB/s':>10}{'p50 us':>12}{'p99 us':>12}{'count':>10}"]
    for k, s in snapshot.items():
        rate = s["messages_per_s"]
        known = s.get("latency_samples", 1) > 0
        rows.append(f"{k:<40}{rate:>10.{0 if rate >= 10 else 1}f}{s['bytes_per_s'] / 1e3:>10.1f}"
                    f"{_us(s['latency_p50_us'], known)}{_us(s['latency_p99_us'], known)}{int(s['messages']):>10d}")
    return "\n".join(rows)


def _us(v: float, known: bool) -> str:
    """One latency cell, 12 wide: tenths below 1 s, whole microseconds above, ``-`` when unknown."""
    return f"{'-':>12}" if not known else f"{v:>12.1f}" if v < 1e6 else f"{v:>12.0f}"
