"""Learner updates: one process (compiled step, autograd step) against Lightning Fabric DDP over 2 CPU
processes (gloo), same global batch and network (RL Zoo's Pendulum SAC, 256x256, batch 256), in the same
run, in rotation (rounds), each configuration a fresh process started by `tinker_core.learner.fabric_backend`.
Records updates/s, samples/s, and for Fabric the time spent in the gradient all-reduces.

    python benchmarks/learner_fabric.py [--quick]

Writes benchmarks/results/learner_fabric.json (``--quick``: learner_fabric.quick.json).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, arg_parser, header, machine, write_result

CONFIGS = [("compiled, 1 process", 1, "compiled"), ("autograd, 1 process", 1, "autograd"),
           ("Fabric DDP, 2 processes (autograd)", 2, "autograd")]


def one(devices: int, path: str, steps: int, batch: int, hidden: int, tmp: Path) -> dict:
    out = tmp / f"{devices}-{path}-{len(list(tmp.iterdir()))}"
    cmd = [sys.executable, "-m", "tinker_core.learner.fabric_backend", "--devices", str(devices), "--path", path,
           "--steps", str(steps), "--batch", str(batch), "--hidden", str(hidden), "--out", str(out)]
    load0 = os.getloadavg()[0]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return {"error": p.stderr[-2000:]}
    res = json.loads((out / "result.json").read_text())
    res["load_1min_before_after"] = [round(load0, 2), round(os.getloadavg()[0], 2)]
    return res


def main() -> None:
    ap = arg_parser(__doc__.splitlines()[0], quick_help="1 round of 30 timed steps")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=256, help="global batch")
    ap.add_argument("--hidden", type=int, default=256)
    a = ap.parse_args()
    rounds, steps = (1, 30) if a.quick else (a.rounds, a.steps)
    info = machine(("torch", "lightning"), load_key="load_1min_at_start")
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in CONFIGS}
    with tempfile.TemporaryDirectory() as d:
        for r in range(rounds):
            for name, devices, path in CONFIGS:
                res = one(devices, path, steps, a.batch, a.hidden, Path(d))
                runs[name].append(res)
                print(f"round {r}: {name}: " + (f"{res['updates_per_s']:.1f} updates/s, "
                      f"{res['samples_per_s']:.0f} samples/s, p50 {res['step_ms_p50']:.2f} ms, load "
                      f"{res['load_1min_before_after']}" if "error" not in res else res["error"][-500:]), flush=True)
    summary = {}
    for name, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        if ok:
            summary[name] = {"updates_per_s_each_round": [round(r["updates_per_s"], 1) for r in ok],
                             "samples_per_s_each_round": [round(r["samples_per_s"]) for r in ok],
                             "step_ms_p50_each_round": [round(r["step_ms_p50"], 2) for r in ok],
                             "path": ok[0]["path"]}
            if ok[0]["devices"] > 1:
                summary[name]["all_reduce_ms_per_update_each_round"] = [round(r["all_reduce_ms_per_update"], 2)
                                                                        for r in ok]
    result = {**header("learner_fabric", a.quick, info,
                       command=f"python benchmarks/learner_fabric.py" + (" --quick" if a.quick else
                                                                          f" --rounds {rounds} --steps {steps}")),
              "network": f"SAC {a.hidden}x{a.hidden}, 2 critics, Pendulum-v1 spaces", "global_batch": a.batch,
              "timed_steps_per_run": steps, "torch_threads_per_process": 1, "summary": summary, "runs": runs,
              "load_1min_at_end": round(os.getloadavg()[0], 2)}
    print(json.dumps(summary, indent=1))
    print("wrote", write_result("learner_fabric", a.quick, result))


if __name__ == "__main__":
    main()
