"""`LiveFigures`: the report's figures, streamed while the loop runs (three JSON channels of the live view).

The same series the demo's report and ``tinker eval`` draw (`tinker_core.report_data`), filled from what the
``view`` node already sees (cycle outcomes, /diagnostics), never from the loop itself:

==========================  ================================================================================
topic                       content (schemas below)
==========================  ================================================================================
``/tinker/episodes``        success per finished episode with the policy version that ran it (last 200)
``/tinker/latency_hist``    cycle latency counts in the shared log bins (`LATENCY_EDGES_MS`), p50/p99, and
                            what the latency measures; at most once per ``every_s``
``/tinker/interventions``   the SafetyWrapper's interventions by kind per heartbeat of the safety node (~1 s;
                            its counters in /diagnostics), labelled by time (s), and the totals
==========================  ================================================================================

A client that connects late gets the whole (windowed) series in the next message.
"""

from __future__ import annotations

import time
from typing import Any, Mapping

from tinker_core.report_data import INTERVENTION_KINDS, EpisodeSeries, InterventionSeries, LatencyHistogram

LIVE_MEASURES = "cycle latency: robot state stamp -> safe command sent (ms)"
WINDOW = 200
"""episodes and intervention intervals sent per message (the newest)"""

_COUNTS = {"type": "object", "properties": {k: {"type": "integer"} for k in INTERVENTION_KINDS}}
EPISODES_SCHEMA = {
    "type": "object",
    "properties": {
        "episodes": {"type": "array", "items": {"type": "object", "properties": {
            "index": {"type": "integer", "description": "episodes seen by the view, from 0"},
            "episode": {"type": "integer", "description": "the robot's episode counter"},
            "t_s": {"type": "number", "description": "when it ended, s since the view's first message"},
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
        "labels": {"type": "array", "items": {"type": "number"},
                   "description": "each interval's end: the heartbeat's time, s since the view's first message"},
        "per_interval": {"type": "object", "description": "kind -> commands changed or held in each interval"},
        "totals": {**_COUNTS, "description": "all intervals: the safety node's counters in its last heartbeat"},
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
        self.episodes = EpisodeSeries(keep=WINDOW)
        self.latency = LatencyHistogram(LIVE_MEASURES, keep_values=False)
        self.interventions = InterventionSeries(keep=WINDOW)
        self._last_hist_ns = 0
        self._t0_ns: int | None = None
        self._version = ""
        self._running: int | None = None
        """the episode of the newest cycle that did not end one (None: none seen, or it ended)"""

    def _t(self, now_ns: int) -> float:
        """Seconds since the first message (the time axis of episodes and interventions)."""
        if self._t0_ns is None:
            self._t0_ns = now_ns
        return round((now_ns - self._t0_ns) / 1e9, 2)

    def cycle(self, latency_ms: float | None, policy_version: str, episode: int | None, success: bool, ended: bool,
              now_ns: int | None = None) -> None:
        """One cycle as the view shows it: its latency, and whether its episode ended here (success or time-out)."""
        now_ns = now_ns or time.time_ns()
        self._version = policy_version or self._version  # a hold carries no version: the policy is the last seen
        if latency_ms is not None and latency_ms >= 0.0:
            self.latency.add(latency_ms)
        if ended:  # an episode the view joined at its very end is not shown: it saw none of it, nor its policy
            if episode is None or episode == self._running:
                self.episodes.add(success, self._version, episode=-1 if episode is None else episode,
                                  t_s=self._t(now_ns))
                self._publish_episodes(now_ns)
            self._running = None
        else:
            self._running = episode
        if now_ns - self._last_hist_ns >= self.every_ns:
            self._last_hist_ns = now_ns
            self.latency_ch.log(self.latency.to_dict(), log_time=now_ns)

    def safety(self, counters: Mapping[str, Any], now_ns: int) -> None:
        """One heartbeat's SafetyWrapper counters (`tinker.wire.safety_counters` of the safety node's /diagnostics)."""
        self.interventions.mark(self._t(now_ns), counters)
        self._publish_interventions(now_ns)

    def _publish_episodes(self, now_ns: int) -> None:
        e = self.episodes
        self.episodes_ch.log({"episodes": [{k: r[k] for k in ("index", "episode", "t_s", "success", "policy_version")}
                                           for r in e.rows],
                              "total": e.total, "successes": e.successes}, log_time=now_ns)

    def _publish_interventions(self, now_ns: int) -> None:
        s = self.interventions
        self.interventions_ch.log({"kinds": list(INTERVENTION_KINDS), "labels": s.labels,
                                   "per_interval": s.per_interval,
                                   "totals": s.totals}, log_time=now_ns)
