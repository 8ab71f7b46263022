"""The demo's report: what the run measured, as ``report.json``, ``report.md`` and the figure ``demo.png``.

Every number comes from the run: episodes from the robot's ``task`` topic (`tinker.demo_monitor.Monitor`),
latency from the nodes' trace spans, counters from their /diagnostics. The figure is
`tinker_core.report_plots.draw_report`, the same one ``tinker eval`` writes and the live view draws.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tinker_core.evaluate import objects_summary, wilson_interval
from tinker_core.report_data import EpisodeSeries, LatencyHistogram, ReportFigureData
from tinker_core.report_plots import draw_report

PHASES = {"warmup": "warm-up", "before": "before fine-tuning", "finetune": "fine-tuning",
          "publish": "final gate", "after": "after fine-tuning"}
"""The monitor's phases, in time order (the figure's legend and shading)."""
E2E_MEASURES = "cycle latency: state published -> safe command received by the robot, 4 DDS hops (ms)"


def latency_from_traces(trace_dir: Path) -> dict:
    """End-to-end cycle latency (state publish → safe command at the robot) from the nodes' spans."""
    from tinker_core.tracer import read_trace

    files = sorted(trace_dir.glob("*.jsonl"))
    events = read_trace(files) if files else []
    e2e = sorted((e["start_ns"], e["dur_ns"] / 1e6) for e in events if e["module"] == "loop_e2e")
    if not e2e:
        return {"cycles": 0, "e2e_p50_ms": None, "e2e_p99_ms": None, "e2e_max_ms": None, "series": []}
    lat = np.array([d for _, d in e2e])
    t0 = e2e[0][0]
    return {"cycles": len(e2e), "e2e_p50_ms": float(np.percentile(lat, 50)),
            "e2e_p99_ms": float(np.percentile(lat, 99)), "e2e_max_ms": float(lat.max()),
            "series": [((s - t0) / 1e9, d) for s, d in e2e]}


def phase_summary(episodes: list[dict], phase: str) -> dict:
    return episode_summary([e for e in episodes if e["phase"] == phase])


def episode_summary(rows: list[dict]) -> dict:
    """Episodes, successes with their 95% interval, mean time to success, the versions that ran them and, on a
    sorting task, the objects sorted with theirs."""
    k, n = sum(e["success"] for e in rows), len(rows)
    lo, hi = wilson_interval(k, n)
    versions = sorted({e["policy_version"] for e in rows})
    tts = [e["time_to_success_s"] for e in rows if e.get("time_to_success_s") is not None]
    objects = (objects_summary(sum(e["objects_sorted"] for e in rows), sum(e["num_objects"] for e in rows))
               if rows and all("num_objects" in e for e in rows) else {})
    return {"episodes": n, "successes": k, "success_rate": k / n if n else 0.0, "ci_low": lo, "ci_high": hi,
            "mean_time_to_success_s": float(np.mean(tts)) if tts else None, "policy_versions": versions, **objects}


def version_summary(episodes: list[dict]) -> list[dict]:
    """Each policy version the robot ran, in the order it first ran: `episode_summary` of its episodes (every phase).
    An episode counts for the version that ran its end."""
    versions = dict.fromkeys(e["policy_version"] for e in episodes)
    return [{"version": v, **episode_summary([e for e in episodes if e["policy_version"] == v])} for v in versions]


def figure_data(report: dict, interventions: Any, latencies_ms: list[float]) -> ReportFigureData:
    """The figure's data from the report's episodes, the monitor's `InterventionSeries` and the traces' latencies."""
    b, a = report["before"], report["after"]
    objects = (f"; objects sorted {b['objects_sorted_rate'] * 100:.0f}% -> {a['objects_sorted_rate'] * 100:.0f}%"
               if "objects_total" in b and "objects_total" in a else "")
    episodes = EpisodeSeries()
    for e in report["episodes"]:
        episodes.add(e["success"], e["policy_version"], phase=e["phase"], episode=e["episode"], t_s=e.get("t_s"),
                     objects=e["objects_sorted"] / e["num_objects"] if e.get("num_objects") else None)
    return ReportFigureData(
        title=(f"tinker demo on {Path(report['dynamics']).stem}: success before {report['before']['success_rate'] * 100:.0f}% "
               f"-> after {report['after']['success_rate'] * 100:.0f}%{objects}"),
        episodes=episodes, latency=LatencyHistogram.of(latencies_ms, E2E_MEASURES), interventions=interventions,
        interventions_label="time (s); a bar: commands per heartbeat of the safety node (1 s), from its counters",
        interventions_over_time=True, deadline_ms=report["control_period"] * 1000.0, phases=PHASES)


def format_report(r: dict) -> str:
    b, a, lat = r["before"], r["after"], r["latency"]

    def pct(x: float) -> str:
        return f"{x * 100:.1f}%"

    def tts(p: dict) -> str:
        return "n/a" if p["mean_time_to_success_s"] is None else f"{p['mean_time_to_success_s']:.2f} s"

    p50 = "n/a" if lat["e2e_p50_ms"] is None else f"{lat['e2e_p50_ms']:.2f} ms"
    p99 = "n/a" if lat["e2e_p99_ms"] is None else f"{lat['e2e_p99_ms']:.2f} ms"
    unsafe = {k: v for k, v in r.get("unsafe_states", {}).items() if v}
    pub = r["learner"].get("published") or {}
    g = pub.get("gate") if isinstance(pub, dict) else None
    gate = "n/a" if not g else (f"{'passed' if g.get('passed') else 'refused'} (sim success {pct(g['success_rate'])}, "
                                f"{g.get('estops', 0)} e-stops, mean return {g['mean_return']:.2f})")
    sorting = any("objects_total" in p for p in (b, r["finetune"], a))

    def objects(p: dict) -> str:
        if not sorting:
            return ""
        if "objects_total" not in p:
            return " n/a |"
        return (f" {pct(p['objects_sorted_rate'])} ({p['objects_sorted']}/{p['objects_total']}), "
                f"{pct(p['objects_ci_low'])}–{pct(p['objects_ci_high'])} |")

    def row(name: str, p: dict) -> str:
        return (f"| {name} | {p['episodes']} | {pct(p['success_rate'])} | {pct(p['ci_low'])}–{pct(p['ci_high'])} |"
                f"{objects(p)} {tts(p)} | {p['policy_versions']} |")

    return "\n".join([
        f"tinker demo — {r['env_id']} on dynamics {Path(r['dynamics']).stem} (training used randomized nominal)",
        "",
        "| | episodes | success | 95% CI |" + (" objects sorted, 95% CI |" if sorting else "")
        + " mean time to success | policy versions |",
        "|---|---|---|---|" + ("---|" if sorting else "") + "---|---|",
        row("before fine-tuning", b), row("during fine-tuning", r["finetune"]), row("after fine-tuning", a),
        "",
        *by_version_line(r.get("by_version")),
        f"cycle latency (state publish → safe command at the robot): p50 {p50}, p99 {p99} over {lat['cycles']} cycles",
        f"deadline misses: {r['deadline_misses']}",
        *latency_line(r.get("command_latency")),
        f"safety: {sum(unsafe.values())} unsafe states reached by the robot{' ' + str(unsafe) if unsafe else ''}; "
        f"{r['safety_interventions']} commands adjusted by the SafetyWrapper (clipped, rate-limited, held); "
        f"e-stops: {', '.join(r['estops']) or 'none'}",
        f"learner: {r['learner'].get('updates', 0)} updates on {r['learner'].get('ingested_total', 0)} live transitions, "
        f"{r['learner'].get('version') or 0} gated versions published; newest gate: {gate}; "
        f"policy node reloads: {r['policy_reloads']}",
        f"transitions sent by the bridge: {r['bridge'].get('sent', '0')}, dropped: {r['bridge'].get('dropped', '0')}",
        f"learner's rewards: {REWARD_SOURCES.get(r.get('reward_source', 'sim'), r.get('reward_source'))}; "
        "the success above is the simulator's (its ground truth)"
        + ("; an episode succeeds when every object is in its right bin, and the objects sorted count each object "
           "at the episode's end" if sorting else ""),
    ] + ([f"STAND-IN operator (a script, not a person; fine-tuning phase only, so 'during' counts its takeovers): "
          f"{json.dumps(r.get('operator_counts'))}; learner ingested {r['learner'].get('ingested')}, "
          f"sampled {r['learner'].get('sampled')}"] if r.get("operator", "none") != "none" else []) + ([f"figure: {Path(r['plot']).name} (success per episode with the policy versions, the SafetyWrapper's "
          "interventions per second, the cycle latency histogram)"] if r.get("plot") else []))


def by_version_line(versions: list[dict] | None) -> list[str]:
    """The report's line on how each version did on the robot (few episodes each: read it with that in mind)."""
    if not versions:
        return []

    def one(v: dict) -> str:
        objects = f", objects {v['objects_sorted']}/{v['objects_total']}" if "objects_total" in v else ""
        return f"v{v['version']} {v['successes']}/{v['episodes']}{objects}"
    return ["on the robot, by policy version (successes/episodes, every phase; few episodes each): "
            + "; ".join(map(one, versions))]


def latency_line(lat: dict | None) -> list[str]:
    """The report's line on the robot's command latency (the safety node's measure) against the compensation."""
    if not lat:
        return []
    if not str(lat["measured"]).isdigit():
        return [f"command latency: not measured by the safety node ({lat['measured']}); compensated: "
                f"{lat['compensated']}"]
    fit = f", R² {lat['fit']}" if lat.get("fit") else ""
    line = (f"command latency measured by the safety node from its states and commands: {lat['measured']} control "
            f"periods{fit}; compensated: {lat['compensated']}" + (" (latency_auto)" if lat.get("auto") else ""))
    if int(lat["measured"]) != int(lat["compensated"]) and not lat.get("auto"):
        line += f" (set latency_compensation: {lat['measured']}; tinker demo --latency-compensation {lat['measured']})"
    return [line]


REWARD_SOURCES = {"sim": "the simulator's task topic (its ground truth: the true target, the objects' true places)",
                  "sensors": "the success sensor (the target the camera found, FK of the measured joints; for the "
                             "sorter the objects the camera sees in their bins and the suction's vacuum state)"}


def write_report(report: dict, interventions: Any, out: Path, progress: Callable[[str], None] = print) -> dict:
    """Draw the figure, then write ``report.json`` and ``report.md`` (both name the figure) into ``out``."""
    series = report["latency"].pop("series", [])
    drawn = draw_report(figure_data(report, interventions, [d for _, d in series]), out / "demo.png")
    report["plot"] = drawn["path"]
    report["figure"] = {"path": drawn["path"], "latency_histogram": drawn["latency"],
                        "interventions_per_heartbeat": drawn["interventions"],
                        "version_changes": drawn["success"].get("version_changes", [])}
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    text = format_report(report)
    (out / "report.md").write_text(text + f"\n\n![demo]({Path(drawn['path']).name})\n")
    progress("")
    progress(text)
    progress(f"\nreport: {out / 'report.md'}, {out / 'report.json'}; figure: {drawn['path']}")
    return report
