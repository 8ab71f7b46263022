"""The data behind a run's figures, kept the same way live and afterwards (ROS-free, matplotlib-free).

Three series, each built here once and drawn by `tinker_core.report_plots` (the demo's report, ``tinker eval``)
and by the live view's page (streamed by the ``view`` node):

- `EpisodeSeries`: success (and return, where known) per episode, with the policy version that ran it;
- `LatencyHistogram`: counts in fixed log-spaced bins (`LATENCY_EDGES_MS`), so a histogram filled one
  cycle at a time on a live stream has the same bins as one made from a finished run's latencies;
- `InterventionSeries`: the SafetyWrapper's cumulative counters sampled at marks, turned into interventions
  per interval by kind (`INTERVENTION_KINDS`); the intervals add up to the counters. Where the counters are
  read directly (``tinker eval``) the marks are episode ends; where they come from the safety node's
  /diagnostics heartbeat (the demo, the live view) the marks are the heartbeats, labelled by time (s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from tinker_core.errors import ConfigError

LATENCY_EDGES_MS: np.ndarray = np.round(10.0 ** np.arange(-2.0, 3.0 + 1e-9, 0.1), 6)
"""Bin edges (ms) of every latency histogram: 10 bins per decade from 10 µs to 1 s. A value outside is
counted in the first or last bin (`LatencyHistogram.clipped` says how many were)."""

INTERVENTION_KINDS: tuple[str, ...] = ("clipped", "rate_limited", "workspace", "held", "estop")
"""What the SafetyWrapper did, as its counters name it (``estop``: e-stops latched, any cause)."""


def safety_counts(counters: Mapping[str, Any]) -> dict[str, int]:
    """`INTERVENTION_KINDS` from a SafetyWrapper's ``counters`` (its ``estops`` per cause summed into ``estop``).

    ``counters`` may also be the safety node's /diagnostics values (keys ``interventions.<name>``), already
    parsed to numbers and a per-cause mapping; a missing key counts 0.
    """
    def get(name: str) -> Any:
        return counters.get(name, counters.get(f"interventions.{name}", 0))

    out: dict[str, int] = {}
    for kind in INTERVENTION_KINDS:
        v = get("estops") if kind == "estop" else get(kind)
        if isinstance(v, Mapping):
            v = sum(int(x) for x in v.values())
        try:
            out[kind] = int(v or 0)
        except (TypeError, ValueError):
            raise ConfigError(f"safety counter {kind!r}: expected a count, got {v!r}") from None
    return out


@dataclass
class LatencyHistogram:
    """Latencies (ms) counted in `LATENCY_EDGES_MS`; ``measures`` says what the latency is (the axis label)."""

    measures: str = "latency (ms)"
    counts: np.ndarray = field(default_factory=lambda: np.zeros(len(LATENCY_EDGES_MS) - 1, dtype=np.int64))
    clipped: int = 0
    """values outside the edges, counted in the first or last bin"""
    keep_values: bool = True
    """keep each value for exact percentiles (a live stream that runs for hours sets False: percentiles then
    come from the bins, to within a bin's width)"""
    _values: list[float] = field(default_factory=list, repr=False)

    @classmethod
    def of(cls, latencies_ms: Iterable[float], measures: str = "latency (ms)") -> "LatencyHistogram":
        h = cls(measures)
        h.extend(latencies_ms)
        return h

    @staticmethod
    def bin_of(ms: float) -> int:
        """The bin index of ``ms`` (edges as `numpy.histogram`: left-closed, the last bin closed)."""
        i = int(np.searchsorted(LATENCY_EDGES_MS, ms, side="right")) - 1
        return min(max(i, 0), len(LATENCY_EDGES_MS) - 2)

    def add(self, ms: float) -> None:
        """Count one latency (ms); NaN and negative values are bad input."""
        ms = float(ms)
        if not ms >= 0.0:
            raise ConfigError(f"LatencyHistogram.add: expected a latency >= 0 ms, got {ms!r}")
        self.clipped += int(ms < LATENCY_EDGES_MS[0] or ms > LATENCY_EDGES_MS[-1])
        self.counts[self.bin_of(ms)] += 1
        if self.keep_values:
            self._values.append(ms)

    def extend(self, latencies_ms: Iterable[float]) -> None:
        for v in latencies_ms:
            self.add(v)

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def percentile(self, q: float) -> float | None:
        """The ``q``-th percentile (0-100): exact from the values kept, else the upper edge of the bin that holds
        it; None when empty."""
        if self._values:
            return float(np.percentile(self._values, q))
        if not self.total:
            return None
        i = int(np.searchsorted(np.cumsum(self.counts), q / 100.0 * self.total, side="left"))
        return float(LATENCY_EDGES_MS[min(i, len(self.counts) - 1) + 1])

    @property
    def max_ms(self) -> float | None:
        if self._values:
            return max(self._values)
        nz = np.nonzero(self.counts)[0]
        return float(LATENCY_EDGES_MS[nz[-1] + 1]) if len(nz) else None

    def to_dict(self) -> dict:
        """JSON-able: edges, counts, what it measures, p50/p99/max (ms)."""
        return {"measures": self.measures, "edges_ms": LATENCY_EDGES_MS.tolist(), "counts": self.counts.tolist(),
                "total": self.total, "clipped": self.clipped, "p50_ms": self.percentile(50),
                "p99_ms": self.percentile(99), "max_ms": self.max_ms}


@dataclass
class EpisodeSeries:
    """One row per finished episode: index (0, 1, ...), success, policy version, and optional return and phase."""

    rows: list[dict] = field(default_factory=list)
    keep: int | None = None
    """the newest rows kept (None: all); `total` and `successes` still count every episode"""
    total: int = 0
    successes: int = 0

    def add(self, success: bool, policy_version: Any, *, ret: float | None = None, phase: str = "",
            episode: int | None = None, t_s: float | None = None, objects: float | None = None) -> dict:
        """One finished episode; ``t_s``: when it ended (s, on the clock of the interventions' time labels);
        ``objects``: a sorting task's share of objects in their right bin at its end."""
        row = {"index": self.total, "episode": self.total if episode is None else int(episode),
               "success": bool(success), "policy_version": str(policy_version), "return": ret, "phase": phase,
               "t_s": t_s, "objects": None if objects is None else float(objects)}
        self.rows.append(row)
        self.total += 1
        self.successes += bool(success)
        if self.keep is not None and len(self.rows) > self.keep:
            del self.rows[: -self.keep]
        return row

    def version_changes(self) -> list[int]:
        """Indices of the episodes whose policy version differs from the one before (a new policy from here)."""
        return [i for i in range(1, len(self.rows)) if self.rows[i]["policy_version"] != self.rows[i - 1]["policy_version"]]

    def rolling_success(self, window: int = 10) -> list[float]:
        """Success rate over the last ``window`` episodes at each episode (fewer at the start)."""
        return self.rolling("success", window)

    def rolling(self, key: str, window: int = 10) -> list[float]:
        """The mean of ``key`` (``success``, ``objects``) over the last ``window`` episodes at each episode."""
        s = np.array([r[key] for r in self.rows], dtype=float)
        return [float(s[max(0, i - window + 1): i + 1].mean()) for i in range(len(s))]

    @property
    def sorting(self) -> bool:
        """Whether every episode has its share of objects sorted (a sorting task's)."""
        return bool(self.rows) and all(r.get("objects") is not None for r in self.rows)

    def to_dict(self) -> dict:
        return {"episodes": list(self.rows), "version_changes": self.version_changes(), "total": self.total,
                "successes": self.successes}


@dataclass
class InterventionSeries:
    """Interventions per interval by kind, from cumulative SafetyWrapper counters sampled at each mark.

    The first interval runs from counters of zero (a wrapper's counters start at 0) to the first mark, so the
    intervals add up to the counters at the last mark (`totals`).
    """

    labels: list[Any] = field(default_factory=list)
    per_interval: dict[str, list[int]] = field(default_factory=lambda: {k: [] for k in INTERVENTION_KINDS})
    keep: int | None = None
    """the newest intervals kept (None: all); `totals` still counts every interval (a live stream sets it)"""
    _last: dict[str, int] = field(default_factory=lambda: dict.fromkeys(INTERVENTION_KINDS, 0))
    _totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(INTERVENTION_KINDS, 0))

    def mark(self, label: Any, counters: Mapping[str, Any]) -> dict[str, int]:
        """Close the interval ending now, labelled ``label`` (an episode index, a time), with the cumulative
        ``counters`` (`safety_counts` form or the wrapper's own); returns that interval's counts. Counters that
        went back (a restarted node) start over from their new value."""
        delta = self.since_last(counters)
        self.labels.append(label)
        for k in INTERVENTION_KINDS:
            self.per_interval[k].append(delta[k])
            self._totals[k] += delta[k]
        if self.keep is not None and len(self.labels) > self.keep:
            del self.labels[: -self.keep]
            for v in self.per_interval.values():
                del v[: -self.keep]
        self._last = safety_counts(counters)
        return delta

    def since_last(self, counters: Mapping[str, Any]) -> dict[str, int]:
        """The counts of the interval still open (``counters`` now minus the last mark), without closing it."""
        now = safety_counts(counters)
        return {k: now[k] - self._last[k] if now[k] >= self._last[k] else now[k] for k in INTERVENTION_KINDS}

    @property
    def totals(self) -> dict[str, int]:
        """Every interval's counts added up (those no longer kept included)."""
        return dict(self._totals)

    def to_dict(self) -> dict:
        return {"labels": list(self.labels), "per_interval": {k: list(v) for k, v in self.per_interval.items()},
                "totals": self.totals}


@dataclass
class ReportFigureData:
    """What one report figure shows: episodes, latency and interventions, and the words around them."""

    title: str
    episodes: EpisodeSeries
    latency: LatencyHistogram
    interventions: InterventionSeries | None = None
    """None: no SafetyWrapper ran (the panel says so)"""
    interventions_label: str = "episode"
    """the x axis of the interventions panel"""
    interventions_over_time: bool = False
    """the interventions' labels are times (s, heartbeats) rather than episode indices"""
    deadline_ms: float | None = None
    """the cycle's deadline, drawn on the histogram when given"""
    phases: dict[str, str] = field(default_factory=dict)
    """phase name -> legend text; episodes are coloured by phase when given (the demo's before/finetune/after)"""
