"""`LiveFigures`: the report's figures, streamed while the loop runs (three JSON channels of the live view).

The same series the demo's report and ``tinker eval`` draw (`tinker_core.report_data`), filled from what the
``view`` node already sees (cycle outcomes, /diagnostics), never from the loop itself:

==========================  ================================================================================
topic                       content (schemas below)
==========================  ================================================================================
``/tinker/episodes``        success per finished episode with the policy version that ran it (last 200)
``/tinker/latency_hist``    cycle latency counts in the shared log bins (`LATENCY_EDGES_MS`), p50/p99, and
                            what the latency measures; at most once per ``every_s``
``/tinker/interventions``   the SafetyWrapper's interventions per episode by kind (its counters in the safety
                            node's /diagnostics at each episode end), the open episode's so far, the totals
==========================  ================================================================================

A client that connects late gets the whole (windowed) series in the next message.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from tinker_core.report_data import (INTERVENTION_KINDS, EpisodeSeries, InterventionSeries, LatencyHistogram,
                                     safety_counts)

LIVE_MEASURES = "cycle latency: robot state stamp -> safe command sent (ms)"
WINDOW = 200
"""episodes sent per message (the newest)"""

_COUNTS = {"type": "object", "properties": {k: {"type": "integer"} for k in INTERVENTION_KINDS}}
EPISODES_SCHEMA = {
    "type": "object",
    "properties": {
        "episodes": {"type": "array", "items": {"type": "object", "properties": {
            "index": {"type": "integer", "description": "episodes seen by the view, from 0"},
            "episode": {"type": "integer", "description": "the robot's episode counter"},
            "success": {"type": "boolean"}, "policy_version": {"type": "string"}}}},
        "total": {"type": "integer"}, "successes": {"type": "integer"},
    },
}
LATENCY_SCHEMA = {
    "type": "object",
    "properties": {
        "measures": {"type": "string", "description": "what the latency is (the axis label)"},
        "edges_ms": {"type": "array", "items": {"type": "number"}, "description": "bin edges, ms (log-spaced)"},
        "counts": {"type": "array", "items": {"type": "integer"}},
        "total": {"type": "integer"}, "clipped": {"type": "integer"},
        "p50_ms": {"type": ["number", "null"]}, "p99_ms": {"type": ["number", "null"]},
        "max_ms": {"type": ["number", "null"]},
    },
}
INTERVENTIONS_SCHEMA = {
    "type": "object",
    "properties": {
        "kinds": {"type": "array", "items": {"type": "string"}},
        "labels": {"type": "array", "items": {"type": "integer"}, "description": "episode index of each interval"},
        "per_interval": {"type": "object", "description": "kind -> commands per episode"},
        "open": {**_COUNTS, "description": "the episode still running, so far"},
        "totals": {**_COUNTS, "description": "all closed intervals"},
        "cumulative": {**_COUNTS, "description": "the safety node's counters in its last heartbeat"},
    },
}


class LiveFigures:
    """The three figure channels on ``ctx`` (a ``foxglove.Context``), fed by `LiveView`."""

    def __init__(self, ctx: Any, every_s: float = 1.0):
        import foxglove

        self.episodes_ch = foxglove.Channel("/tinker/episodes", schema=EPISODES_SCHEMA, context=ctx)
        self.latency_ch = foxglove.Channel("/tinker/latency_hist", schema=LATENCY_SCHEMA, context=ctx)
        self.interventions_ch = foxglove.Channel("/tinker/interventions", schema=INTERVENTIONS_SCHEMA, context=ctx)
        self.every_ns = int(every_s * 1e9)
        self.episodes = EpisodeSeries()
        self.latency = LatencyHistogram(LIVE_MEASURES, keep_values=False)
        self.interventions = InterventionSeries()
        self._counters: dict[str, int] = dict.fromkeys(INTERVENTION_KINDS, 0)
        self._last_hist_ns = 0

    def cycle(self, latency_ms: float | None, policy_version: str, episode: int | None, success: bool, ended: bool,
              now_ns: int | None = None) -> None:
        """One cycle as the view shows it: its latency, and whether its episode ended here (success or time-out)."""
        now_ns = now_ns or time.time_ns()
        if latency_ms is not None and latency_ms >= 0.0:
            self.latency.add(latency_ms)
        if ended:
            row = self.episodes.add(success, policy_version, episode=-1 if episode is None else episode)
            self.interventions.mark(row["index"], self._counters)
            self._publish_episodes(now_ns)
            self._publish_interventions(now_ns)
        if now_ns - self._last_hist_ns >= self.every_ns:
            self._last_hist_ns = now_ns
            self.latency_ch.log(self.latency.to_dict(), log_time=now_ns)

    def safety(self, counters: Mapping[str, Any], now_ns: int) -> None:
        """The safety node's SafetyWrapper counters (`tinker.wire.safety_counters` of its /diagnostics values)."""
        self._counters = safety_counts(counters)
        self._publish_interventions(now_ns)

    def _publish_episodes(self, now_ns: int) -> None:
        rows = self.episodes.rows
        self.episodes_ch.log({"episodes": [{k: r[k] for k in ("index", "episode", "success", "policy_version")}
                                           for r in rows[-WINDOW:]],
                              "total": len(rows), "successes": sum(r["success"] for r in rows)}, log_time=now_ns)

    def _publish_interventions(self, now_ns: int) -> None:
        s = self.interventions
        self.interventions_ch.log({"kinds": list(INTERVENTION_KINDS), "labels": s.labels[-WINDOW:],
                                   "per_interval": {k: v[-WINDOW:] for k, v in s.per_interval.items()},
                                   "open": s.since_last(self._counters), "totals": s.totals,
                                   "cumulative": dict(self._counters)}, log_time=now_ns)
