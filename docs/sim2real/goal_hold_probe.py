"""Does a reach policy stay at its goal where nothing resets the episode? The loop's stages in one process
(`tinker.in_process.InProcessLoop`: the nodes' perception, policy, safety and simulated robot), one long episode
per seed (``episode_cycles: 0``, the launch YAML's default), with the policy's ``at_goal`` hold and without it.

    python docs/sim2real/goal_hold_probe.py --out docs/sim2real/goal_hold [--seeds 1000-1019] [--cycles 300]
        [--bundle pretrained/arm_reach_vision]

Per seed and setting: the first cycle within the task's success distance (the simulator's true distance), the share
of the cycles after it still within, the largest and the final distance. Writes goal_hold.json and goal_hold.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SUCCESS = 0.05
"""m: the reach task's success distance (`tinker_sim.tasks.reach.SUCCESS_DISTANCE`)"""


def run(bundle: str, seed: int, cycles: int, at_goal: str) -> dict:
    from tinker.in_process import InProcessConfig, InProcessLoop

    d: list[float] = []
    cfg = InProcessConfig(bundle=bundle, overrides={"sim_robot": {"seed": seed, "episode_cycles": 0},
                                                    "policy": {"at_goal": at_goal}})
    with InProcessLoop(cfg) as loop:
        out = loop.run(cycles, lambda s: d.append(float(s.task[3])))
    x = np.array(d)
    first = int(np.argmax(x < SUCCESS)) if (x < SUCCESS).any() else None
    after = x[first:] if first is not None else x[:0]
    return {"seed": seed, "at_goal": at_goal, "first_success_cycle": first,
            "within_after": float((after < SUCCESS).mean()) if after.size else 0.0,
            "max_after_m": float(after.max()) if after.size else None, "final_m": float(x[-1]),
            "unsafe_states": sum(out["unsafe_states"].values()), "estopped": bool(out["estopped"])}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True)
    p.add_argument("--seeds", default="1000-1019", help="first-last")
    p.add_argument("--cycles", type=int, default=300)
    p.add_argument("--bundle", default="", help="'' = the shipped state reach policy")
    a = p.parse_args()
    lo, hi = (int(v) for v in a.seeds.split("-"))
    rows = []
    for seed in range(lo, hi + 1):
        for at_goal in ("act", "hold"):
            rows.append(run(a.bundle, seed, a.cycles, at_goal))
            r = rows[-1]
            print(f"seed {seed} {at_goal}: first {r['first_success_cycle']}, within after {r['within_after']:.0%}, "
                  f"max after {r['max_after_m']}, final {r['final_m']:.3f} m", flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for at_goal in ("act", "hold"):
        rs = [r for r in rows if r["at_goal"] == at_goal]
        summary[at_goal] = {"seeds": len(rs), "reached": sum(r["first_success_cycle"] is not None for r in rs),
                            "within_after_mean": float(np.mean([r["within_after"] for r in rs])),
                            "final_over_5cm": sum(r["final_m"] > 0.05 for r in rs),
                            "final_over_10cm": sum(r["final_m"] > 0.10 for r in rs),
                            "final_median_m": float(np.median([r["final_m"] for r in rs])),
                            "unsafe_states": sum(r["unsafe_states"] for r in rs),
                            "estops": sum(r["estopped"] for r in rs)}
    (out / "goal_hold.json").write_text(json.dumps({"command": " ".join(sys.argv), "bundle": a.bundle or "default",
                                                    "cycles": a.cycles, "summary": summary, "runs": rows}, indent=1))
    lines = ["| seed | act: within after / final (m) | hold: within after / final (m) |", "|---|---|---|"]
    for seed in range(lo, hi + 1):
        r = {x["at_goal"]: x for x in rows if x["seed"] == seed}
        lines.append(f"| {seed} | {r['act']['within_after']:.0%} / {r['act']['final_m']:.3f} | "
                     f"{r['hold']['within_after']:.0%} / {r['hold']['final_m']:.3f} |")
    (out / "goal_hold.md").write_text("\n".join(lines) + "\n\n" + json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
