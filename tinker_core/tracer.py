"""Tracer: one span per module per cycle, written as JSON lines, and the latency-breakdown tool.

The format (one object per line) is shared by the in-process pipeline and the ROS 2 nodes::

    {"cycle": 12, "module": "policy", "node": "policy_node", "start_ns": 1712..., "dur_ns": 84000}

Optional keys: ``edge`` (``"env->perception"``) and ``bytes`` (payload size), from which ``--flow``
computes per-edge messages/s, bytes/s and latency percentiles offline.

``python -m tinker_core.tracer --latency_breakdown TRACE [--plot latency.png] [--flow]`` prints a
per-module table (count, p50, p99, max, share of the cycle) and optionally a histogram PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np


class Tracer:
    """Collects spans and appends them to a JSONL file (buffered, flushed every ``flush_every``)."""

    def __init__(self, path: str | os.PathLike | None = None, node: str = "", flush_every: int = 256):
        self.path = Path(path) if path else None
        self.node = node or f"pid{os.getpid()}"
        self.flush_every = flush_every
        self._buf: list[str] = []
        self._lock = threading.Lock()
        self._f = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "a", buffering=1 << 16)

    @property
    def enabled(self) -> bool:
        return self._f is not None

    def record(self, cycle: int, module: str, start_ns: int, dur_ns: int, **extra) -> None:
        if self._f is None:
            return
        ev = {"cycle": cycle, "module": module, "node": self.node, "start_ns": start_ns, "dur_ns": dur_ns}
        if extra:
            ev.update(extra)
        line = json.dumps(ev, separators=(",", ":"))
        with self._lock:
            self._buf.append(line)
            if len(self._buf) >= self.flush_every:
                self._flush_locked()

    @contextmanager
    def span(self, cycle: int, module: str) -> Iterator[None]:
        t0 = time.time_ns()
        p0 = time.perf_counter_ns()
        try:
            yield
        finally:
            self.record(cycle, module, t0, time.perf_counter_ns() - p0)

    def _flush_locked(self) -> None:
        if self._f is not None and self._buf:
            self._f.write("\n".join(self._buf) + "\n")
            self._f.flush()
            self._buf.clear()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def close(self) -> None:
        self.flush()
        if self._f is not None:
            self._f.close()
            self._f = None


def read_trace(paths: list[str | os.PathLike]) -> list[dict]:
    events = []
    for p in paths:
        with open(p) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    print(f"warning: {p}:{n}: skipped a line that is not JSON (a trace cut off mid-write?)",
                          file=sys.stderr)
                    continue
                if not isinstance(ev, dict) or not _REQUIRED.issubset(ev) or not isinstance(ev["dur_ns"], int):
                    print(f"warning: {p}:{n}: skipped a span without {sorted(_REQUIRED)}", file=sys.stderr)
                    continue
                events.append(ev)
    return events


_REQUIRED = frozenset({"cycle", "module", "start_ns", "dur_ns"})


def flow_from_events(events: list[dict]) -> list[dict]:
    """Per-edge flow from spans that carry ``edge`` (and ``bytes``): the monitor's figures, offline."""
    by: dict[str, list[dict]] = {}
    for e in events:
        if "edge" in e:
            by.setdefault(e["edge"], []).append(e)
    rows = []
    for edge, evs in by.items():
        starts = np.asarray([e["start_ns"] for e in evs], dtype=np.float64)
        durs = np.asarray([e["dur_ns"] for e in evs], dtype=np.float64) / 1e3
        nbytes = sum(int(e.get("bytes", 0)) for e in evs)
        span_s = (starts.max() - starts.min()) / 1e9
        rate = (len(evs) - 1) / span_s if len(evs) > 1 and span_s > 0 else 0.0
        rows.append({"edge": edge, "messages": len(evs), "bytes": nbytes, "messages_per_s": rate,
                     "bytes_per_s": rate * nbytes / len(evs), "latency_p50_us": float(np.percentile(durs, 50)),
                     "latency_p99_us": float(np.percentile(durs, 99))})
    return rows


def format_flow(rows: list[dict]) -> str:
    out = [f"{'edge':<28}{'msg/s':>10}{'KB/s':>10}{'p50 us':>10}{'p99 us':>10}{'count':>10}"]
    for r in rows:
        out.append(f"{r['edge']:<28}{r['messages_per_s']:>10.0f}{r['bytes_per_s'] / 1e3:>10.1f}"
                   f"{r['latency_p50_us']:>10.1f}{r['latency_p99_us']:>10.1f}{r['messages']:>10d}")
    return "\n".join(out)


def latency_breakdown(events: list[dict]) -> list[dict]:
    """Per-module statistics in microseconds, ordered by first appearance."""
    by: dict[str, list[int]] = {}
    for e in events:
        by.setdefault(e["module"], []).append(int(e["dur_ns"]))
    cycles = {e["cycle"] for e in events}
    total = sum(sum(v) for v in by.values()) or 1
    rows = []
    for m, durs in by.items():
        a = np.asarray(durs, dtype=np.float64) / 1e3
        rows.append({
            "module": m, "count": len(durs), "p50_us": float(np.percentile(a, 50)),
            "p99_us": float(np.percentile(a, 99)), "max_us": float(a.max()), "mean_us": float(a.mean()),
            "share": float(a.sum() * 1e3 / total), "per_cycle": len(durs) / max(len(cycles), 1),
        })
    return rows


def format_breakdown(rows: list[dict]) -> str:
    out = [f"{'module':<24}{'count':>8}{'p50 us':>10}{'p99 us':>10}{'max us':>10}{'share':>8}"]
    for r in rows:
        out.append(f"{r['module']:<24}{r['count']:>8}{r['p50_us']:>10.1f}{r['p99_us']:>10.1f}"
                   f"{r['max_us']:>10.1f}{r['share'] * 100:>7.1f}%")
    return "\n".join(out)


def plot_breakdown(events: list[dict], out: str | os.PathLike) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by: dict[str, list[float]] = {}
    for e in events:
        by.setdefault(e["module"], []).append(e["dur_ns"] / 1e3)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    hi = max(np.percentile(v, 99.5) for v in by.values())
    bins = np.linspace(0, hi * 1.05 + 1e-9, 60)
    for m, v in by.items():
        ax.hist(np.clip(v, 0, bins[-1]), bins=bins, alpha=0.55, label=f"{m} (p99 {np.percentile(v, 99):.0f} us)")
    ax.set_xlabel("span duration (us)")
    ax.set_ylabel("count")
    ax.set_title("tinker latency breakdown")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tinker_core.tracer",
                                 description="Summarize tinker trace files (JSON lines of spans).")
    ap.add_argument("--latency_breakdown", "--latency-breakdown", nargs="+", metavar="TRACE", required=True,
                    help="trace file(s) written by the pipeline or the ROS 2 nodes")
    ap.add_argument("--plot", metavar="PNG", help="also write a latency histogram to this PNG")
    ap.add_argument("--flow", action="store_true",
                    help="also print per-edge flow (messages/s, KB/s, latency p50/p99) from spans that name an edge")
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    args = ap.parse_args(argv)
    missing = [p for p in args.latency_breakdown if not Path(p).is_file()]
    if missing:
        print(f"error: trace file(s) not found: {missing}", file=sys.stderr)
        return 2
    events = read_trace(args.latency_breakdown)
    if not events:
        print("error: the trace holds no spans", file=sys.stderr)
        return 2
    rows = latency_breakdown(events)
    print(json.dumps(rows, indent=2) if args.json else format_breakdown(rows))
    if args.flow:
        flow = flow_from_events(events)
        print(json.dumps(flow, indent=2) if args.json else "\n" + format_flow(flow))
    if args.plot:
        print(f"wrote {plot_breakdown(events, args.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
