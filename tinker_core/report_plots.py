"""Draws a run's report figure (matplotlib, Agg): the one picture the demo's report and ``tinker eval`` write.

Three panels from `tinker_core.report_data.ReportFigureData`: success per episode with the policy version
marked (and the return, where known), the SafetyWrapper's interventions by kind (per episode or per heartbeat
over time), and the latency
histogram in the shared log bins. `draw_report` returns what it drew, read back from the plotted artists,
so a test (or a reader of ``report.json``) sees the numbers behind the picture.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tinker_core.report_data import INTERVENTION_KINDS, LATENCY_EDGES_MS, ReportFigureData

KIND_COLORS = {"clipped": "#f0a500", "rate_limited": "#2b8cbe", "workspace": "#8d6e63", "held": "#9c4fb5",
               "estop": "#d62728"}
"""One colour per intervention kind (the live page uses the same)."""
PHASE_COLORS = ("tab:gray", "tab:red", "tab:orange", "tab:blue", "tab:green", "tab:purple")
"""phases in order (the demo: warm-up, before, fine-tuning, final gate, after)"""
_ABOVE = dict(fontsize=7, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=6, frameon=False, borderaxespad=0.2)
"""legends sit above their panel, never over the data"""


def _success_panel(ax, data: ReportFigureData) -> dict:
    rows = data.episodes.rows
    x = np.arange(len(rows))
    s = np.array([r["success"] for r in rows], dtype=float)
    drawn: dict = {"x": x.tolist(), "success": s.tolist()}
    groups = ({ph: [i for i, r in enumerate(rows) if r["phase"] == ph] for ph in data.phases} if data.phases
              else {"": list(range(len(rows)))})
    for (ph, idx), color in zip(groups.items(), PHASE_COLORS):
        if idx:
            ax.scatter(x[idx], s[idx], s=14, color=color, zorder=3, label=data.phases.get(ph, ph) if ph else "episode")
    if rows:
        roll = data.episodes.rolling_success(10)
        ax.plot(x, roll, color="k", lw=1.5, label="success rate, last 10 episodes", zorder=4)
        drawn["rolling"] = roll
    if data.episodes.sorting:  # a sorting task: the share of objects sorted, which moves where full success does not
        share = [r["objects"] for r in rows]
        ax.scatter(x, share, s=22, facecolors="none", edgecolors="tab:purple", lw=0.8, zorder=2,
                   label="objects sorted (share)")
        objects_roll = data.episodes.rolling("objects", 10)
        ax.plot(x, objects_roll, color="tab:purple", lw=1.2, ls="--", zorder=4, label="objects sorted, last 10 episodes")
        drawn["objects"], drawn["objects_rolling"] = share, objects_roll
    changes = data.episodes.version_changes()
    for n, i in enumerate(changes):
        ax.axvline(i - 0.5, color="tab:blue", lw=0.8, ls=":", zorder=1)
        ax.text(i - 0.4, 1.09 if n % 2 == 0 else 1.02, f"v{rows[i]['policy_version']}", fontsize=7,
                color="tab:blue", va="bottom", ha="left")
    versions = sorted({r["policy_version"] for r in rows}, key=lambda v: (len(v), v))
    first = f"v{rows[0]['policy_version']}" if rows else "none"
    ax.set_ylim(-0.08, 1.2)
    ax.set_yticks([0, 0.5, 1])
    ax.set_xlabel("episode" + (f" (dotted: a new policy version from here; first {first})" if changes
                               else f" (policy {', '.join('v' + v for v in versions) or 'n/a'} throughout)"))
    ax.set_ylabel("success (1) or not (0)" + ("; share sorted" if data.episodes.sorting else ""))
    rets = [r["return"] for r in rows]
    if rows and all(v is not None for v in rets):
        twin = ax.twinx()
        twin.plot(x, rets, color="tab:gray", lw=0.8, marker=".", ms=3, label="return")
        twin.set_ylabel("episode return", color="tab:gray")
        twin.tick_params(axis="y", colors="tab:gray")
        drawn["return"] = [float(v) for v in rets]
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = twin.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, **_ABOVE)
    elif rows:
        ax.legend(**_ABOVE)
    drawn["version_changes"] = changes
    return drawn


def _interventions_panel(ax, data: ReportFigureData) -> dict:
    series = data.interventions
    ax.set_ylabel("SafetyWrapper:\ncommands changed or held")
    if series is None:
        ax.text(0.5, 0.5, "no SafetyWrapper in the loop: no interventions to show", ha="center", va="center",
                transform=ax.transAxes, color="tab:gray")
        ax.set_xticks([])
        ax.set_yticks([])
        return {}
    if data.interventions_over_time:
        x = np.array(series.labels, dtype=float)
        width = 0.85 * (float(np.median(np.diff(x))) if len(x) > 1 else 1.0)
    else:
        x, width = np.arange(len(series.labels), dtype=float), 0.85
    bottom = np.zeros(len(x))
    drawn: dict = {"x": x.tolist(), "labels": list(series.labels)}
    for kind in INTERVENTION_KINDS:
        h = np.array(series.per_interval[kind], dtype=float)
        # over time, a bar ends at its heartbeat: it covers the interval before it
        bars = ax.bar(x - width if data.interventions_over_time else x, h, bottom=bottom, width=width,
                      align="edge" if data.interventions_over_time else "center",
                      color=KIND_COLORS[kind], label=f"{kind.replace('_', '-')} ({int(h.sum())})")
        drawn[kind] = [int(round(b.get_height())) for b in bars]
        bottom += h
    if data.interventions_over_time:
        _phase_marks(ax, data)
        if len(x):
            ax.set_xlim(min(0.0, float(x[0]) - width), float(x[-1]) + width * 0.2)
    else:
        ax.set_xlim(-0.6, max(len(x), 1) - 0.4)
    ax.set_xlabel(data.interventions_label)
    ax.legend(**_ABOVE)
    ax.set_ylim(0, max(1.0, float(bottom.max()) if len(bottom) else 1.0) * (1.15 if data.interventions_over_time else 1.05))
    return drawn


def _phase_marks(ax, data: ReportFigureData) -> None:
    """On a time axis: each phase shaded from the previous phase's last episode end to its own, named at the top."""
    start = 0.0
    for (ph, text), color in zip(data.phases.items(), PHASE_COLORS):
        ends = [r["t_s"] for r in data.episodes.rows if r["phase"] == ph and r.get("t_s") is not None]
        if not ends:
            continue
        ax.axvspan(start, max(ends), color=color, alpha=0.12, lw=0, zorder=0)
        ax.text((start + max(ends)) / 2, 0.97, text, transform=ax.get_xaxis_transform(), fontsize=7, ha="center",
                va="top", color=color, clip_on=True)
        start = max(ends)


def _latency_panel(ax, data: ReportFigureData) -> dict:
    h = data.latency
    edges = LATENCY_EDGES_MS
    bars = ax.bar(edges[:-1], h.counts, width=np.diff(edges), align="edge", color="tab:gray", edgecolor="white", lw=0.4)
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    drawn = {"edges_ms": edges.tolist(), "counts": [int(round(b.get_height())) for b in bars]}
    marks = [(h.percentile(50), "tab:blue", "p50"), (h.percentile(99), "tab:red", "p99"), (h.max_ms, "tab:gray", "max")]
    if data.deadline_ms:
        marks.append((data.deadline_ms, "k", "deadline"))
    for v, color, name in marks:
        if v is not None:
            ax.axvline(v, color=color, ls="--", lw=1, label=f"{name} {v:.3g} ms")
    nz = np.nonzero(h.counts)[0]
    if len(nz):
        lo, hi = edges[nz[0]], edges[nz[-1] + 1]
        if data.deadline_ms:
            hi = max(hi, data.deadline_ms)
        ax.set_xlim(lo / 2, hi * 2)
        ax.legend(fontsize=7, loc="upper right", framealpha=0.85)
    else:
        ax.text(0.5, 0.5, "no latency measured", ha="center", va="center", transform=ax.transAxes, color="tab:gray")
    ax.set_xlabel(h.measures + " (log scale)")
    ax.set_ylabel(f"count (of {h.total})")
    if len(nz) and h.counts.max() > 50 * h.counts[nz].min():  # a tail of a few would be invisible: log counts
        ax.set_yscale("log")
        ax.set_ylim(0.7, h.counts.max() * 1.5)
        ax.set_ylabel(f"count (of {h.total}, log scale)")
    return drawn


def draw_report(data: ReportFigureData, path: str | os.PathLike) -> dict:
    """Write the figure to ``path`` (PNG); returns what each panel drew: ``success``, ``interventions``,
    ``latency`` (bar heights read back from the plot) and ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2, a3) = plt.subplots(3, 1, figsize=(10, 10), gridspec_kw={"height_ratios": [1.2, 1, 1]})
    try:
        drawn = {"success": _success_panel(a1, data), "interventions": _interventions_panel(a2, data),
                 "latency": _latency_panel(a3, data)}
        fig.suptitle(data.title, fontsize=11)
        a3.set_title("latency histogram", fontsize=9, loc="left")
        fig.tight_layout(h_pad=2.0)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    drawn["path"] = str(path)
    return drawn
