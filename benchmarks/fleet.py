"""Several robots in one ROS 2 graph (tinker.fleet): how many hold the 50 ms cycle on this machine.

For N robots (one namespace each: sim_robot, perception, policy, safety, experience_bridge composed in one process
per robot, the shipped state-only reach policy, no camera) the loop runs for a fixed number of cycles at 20 Hz,
and for every robot and cycle we read sim_robot's ``loop_e2e`` span: from its JointState publish to the safe
command's arrival back at it. A cycle is **on time** only when a command that answers the policy (status passed,
clipped or rate_limited) arrives within the period; a held, e-stopped, late or missing answer is a miss. The
baseline is N = 1 in the same run (the single-robot loop), so the ratio says what the other robots cost.

    python benchmarks/fleet.py            # N = 1, 5, 10, 20; 400 cycles each (about 5 min)
    python benchmarks/fleet.py --quick    # N = 1, 3; 100 cycles each
    python benchmarks/fleet.py --robots 1 2 4 8

Nothing else should run meanwhile: the JSON records the load average at the start and at the end of each N.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# benchmarks/ is sys.path[0] when run as `python benchmarks/NAME.py`
from _common import ROOT, arg_parser, header, machine, write_result

sys.path.insert(0, str(ROOT))

SERVED = ("passed", "clipped", "rate_limited")
"""statuses of a command that answers the policy (anything else is the safety node holding the robot)"""


def run_fleet(n: int, cycles: int, period: float, env: dict, tmp: Path) -> dict:
    from tinker.fleet import Fleet
    from tinker_core.multiagent.agents_file import AgentsConfig
    from tinker_core.tracer import read_trace

    agents = AgentsConfig.from_dict({"agents": {f"robot{i + 1}": {"policy": "SAC"} for i in range(n)}})
    fleet = Fleet(agents, env=env, run_dir=tmp / f"logs_{n}",
                  overrides={"sim_robot": {"camera": False}, "/**": {"control_period": period}})
    for name, g in fleet.graphs.items():  # one trace folder per robot: the nodes' trace files are named by node
        g.overrides.setdefault("/**", {})["trace_dir"] = str(tmp / f"trace_{n}" / name)
    from tinker.bringup import BringupError

    t_start = time.monotonic()
    try:
        fleet.start(timeout=max(120.0, 12.0 * n))  # N processes import torch and onnxruntime on the same 2 cores
    except BringupError as e:  # a count whose graph did not come up does not fit: a result, not a crash
        fleet.stop()
        return {"robots": n, "startup_failed": str(e), "startup_s": time.monotonic() - t_start,
                "load_avg_end": os.getloadavg()[0], "cycles": 0, "misses": None, "miss_rate": None,
                "e2e_p50_ms": None, "e2e_p99_ms": None, "e2e_max_ms": None, "per_robot": {}}
    startup_s = time.monotonic() - t_start
    try:
        for g in fleet.graphs.values():
            g.call_trigger("safety/reset")  # a start-up stall may have latched a watchdog
        time.sleep(2.0)
        t0 = time.time_ns()
        time.sleep(cycles * period)
        t1 = time.time_ns()
        load_end = os.getloadavg()[0]
    finally:
        fleet.stop()
    per_robot, e2e_all, misses, total = {}, [], 0, 0
    for name in fleet.graphs:
        ev = [e for e in read_trace(sorted((tmp / f"trace_{n}" / name).glob("*.jsonl"))) if t0 <= e["start_ns"] <= t1]
        ticks = sorted(e["cycle"] for e in ev if e["module"] == "sim_robot")[:-1]
        answer = {e["cycle"]: e for e in ev if e["module"] == "loop_e2e"}
        on_time = [answer[c]["dur_ns"] / 1e3 for c in ticks if c in answer
                   and answer[c].get("status") in SERVED and answer[c]["dur_ns"] <= period * 1e9]
        m = len(ticks) - len(on_time)
        e2e = [answer[c]["dur_ns"] / 1e3 for c in ticks if c in answer]
        per_robot[name] = {"cycles": len(ticks), "misses": m,
                           "e2e_p50_us": float(np.percentile(e2e, 50)) if e2e else None,
                           "e2e_p99_us": float(np.percentile(e2e, 99)) if e2e else None}
        e2e_all += e2e
        misses += m
        total += len(ticks)
    return {"robots": n, "cycles": total, "misses": misses, "miss_rate": misses / total if total else None,
            "e2e_p50_ms": float(np.percentile(e2e_all, 50)) / 1e3 if e2e_all else None,
            "e2e_p99_ms": float(np.percentile(e2e_all, 99)) / 1e3 if e2e_all else None,
            "e2e_max_ms": float(np.max(e2e_all)) / 1e3 if e2e_all else None,
            "startup_s": startup_s, "load_avg_end": load_end, "per_robot": per_robot}


def main(argv: list[str] | None = None) -> int:
    ap = arg_parser(__doc__.splitlines()[0], quick_help="N = 1, 3 and 100 cycles each (about a minute)")
    ap.add_argument("--robots", type=int, nargs="+", help="robot counts to run (default 1 5 10 20)")
    ap.add_argument("--cycles", type=int, help="cycles per robot count (default 400; 100 with --quick)")
    args = ap.parse_args(argv)
    counts = args.robots or ([1, 3] if args.quick else [1, 5, 10, 20])
    cycles = args.cycles or (100 if args.quick else 400)
    period = 0.05
    env = {**os.environ, "ROS_DOMAIN_ID": os.environ.get("ROS_DOMAIN_ID", "77"),
           "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    info = machine(("onnxruntime",), load_key="load_avg_start")
    runs = []
    with tempfile.TemporaryDirectory(prefix="tinker-fleet-") as d:
        for n in counts:
            r = run_fleet(n, cycles, period, env, Path(d))
            r["load_avg_start"] = info["load_avg_start"] if not runs else runs[-1]["load_avg_end"]
            runs.append(r)
            if r.get("startup_failed"):
                print(f"{n:3d} robots: did not start ({r['startup_failed']}) after {r['startup_s']:.0f} s; "
                      f"load at end {r['load_avg_end']:.1f}", flush=True)
                continue
            print(f"{n:3d} robots: {r['cycles']} robot-cycles, {r['misses']} misses ({100 * (r['miss_rate'] or 0):.2f}%), "
                  f"e2e p50 {r['e2e_p50_ms']:.2f} ms, p99 {r['e2e_p99_ms']:.2f} ms, max {r['e2e_max_ms']:.2f} ms; "
                  f"start-up {r['startup_s']:.0f} s; load at end {r['load_avg_end']:.1f}", flush=True)
    base = runs[0]
    fit = [r["robots"] for r in runs if r["misses"] == 0]
    figures = {f"robots_{r['robots']}": {k: r[k] for k in ("cycles", "misses", "miss_rate", "e2e_p50_ms", "e2e_p99_ms",
                                                           "e2e_max_ms")}
               | {"p99_ratio_vs_one_robot": (r["e2e_p99_ms"] / base["e2e_p99_ms"])
                  if base["e2e_p99_ms"] and r["e2e_p99_ms"] else None,
                  "startup_failed": r.get("startup_failed")}
               for r in runs}
    figures["most_robots_with_zero_misses"] = max(fit) if fit else 0
    result = {**header("fleet", args.quick, info), "period_s": period, "cycles_per_count": cycles,
              "figures": figures, "runs": runs,
              "baseline": "the same graph with one robot, in the same run",
              "differences": "N robots = N composed processes (5 nodes each) and N simulators on the same 2 cores; "
                             "camera off (the shipped reach policy is state-only)",
              "goals": {"misses": "0 at 20 robots (or say how many fit)", "e2e_p99_ms": "< 50"}}
    print(f"most robots with 0 misses: {figures['most_robots_with_zero_misses']}")
    print(f"wrote {write_result('fleet', args.quick, result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
