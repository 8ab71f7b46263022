"""tinker's PPO / SAC / DQN against Stable-Baselines3 and sbx (SB3 on JAX) on third-party tasks, at RL Zoo settings.

The suite (``benchmarks/_suite.py``: ``TASKS``): Pendulum-v1 (PPO, SAC), MountainCarContinuous-v0 (PPO, SAC),
CartPole-v1 and Acrobot-v1 (DQN), panda-gym's PandaReach-v3 (SAC + HER). Each task carries its RL Zoo entry as
written in rl-baselines3-zoo hyperparams/{ppo,sac,dqn}.yml (tinker reads it with ``tinker_core.rlzoo.from_rlzoo``,
SB3 and sbx as rl_zoo3 does) and its budget (``n_timesteps``). Per task and seed the three libraries train in
alternation for the same env steps: SB3 and tinker in this process, sbx in a subprocess
(``benchmarks/_sbx_runner.py``) of the separate venv ``benchmarks/competitors_venv.sh`` builds (JAX stays out
of the project venv). Recorded per library: env steps/s (and the ratios tinker/SB3, tinker/sbx, sbx/SB3),
the final return of 10 deterministic evaluation episodes (mean, median, min, per seed; the success rate on
the goal task), the env step at which the mean of the last 10 training episodes reaches the task's threshold
(gymnasium's reward_threshold where the env registers one), and the update's achieved GFLOP/s: the FLOPs one
gradient step asks for (``_suite.update_flops``, the same count for every library) times the gradient steps
taken, over the seconds spent inside the library's update method, against the machine's measured float32
matrix-product peak (torch at the run's thread count; JAX's measured in the sbx venv).

Settings a library cannot apply are dropped and recorded per task (``not_applied``): sbx has no gSDE, so on
MountainCarContinuous (whose RL Zoo entries use gSDE) it runs without it, a difference of settings, not of
implementation (tinker's SAC with gSDE trains on the same compiled step as without it). tinker's update path (compiled C++ step, Python step, autograd) is recorded
per seed; a fallback off the compiled step is logged once by tinker and listed under ``fallbacks``.

    bash benchmarks/competitors_venv.sh                 # once: /work/venv-sbx with sbx, jax (torch pinned)
    python benchmarks/algos.py --seeds 5                # the full suite: RL Zoo budgets, 5 seeds (hours on 2 cores)
    python benchmarks/algos.py --quick                  # minutes: one seed, tiny budgets (same code path)
    python benchmarks/algos.py --seeds 3 --fraction 0.2 --only ppo_pendulum dqn_cartpole   # a reduced run: recorded
    python benchmarks/algos.py --only ppo_pendulum --seeds 20 --libs tinker sb3 --tag ppo_20_seeds

A run with fewer seeds or budgets than the full one is marked so per task (``timesteps``, ``fraction``,
``seeds``, ``full_rlzoo_budget``) and in ``run_kind``; it is never the full run.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

# benchmarks/ is sys.path[0] when run as `python benchmarks/NAME.py`
from _common import ROOT, arg_parser, header, machine, result_path, write_result
from _suite import (TASKS, Task, UpdateClock, dims, entry_without, evaluate, matmul_peak_gflops, not_applied,
                    ppo_samples_per_update, run_sb3_like, steps_to, task_update_flops)

sys.path.insert(0, str(ROOT))

from tinker_core.algos import DQN, PPO, SAC, DQNConfig, PPOConfig, SACConfig, native  # noqa: E402
from tinker_core.rlzoo import from_rlzoo  # noqa: E402

LIBS = ("tinker", "sb3", "sbx")
SBX_PYTHON = os.environ.get("SBX_PYTHON", "/work/venv-sbx/bin/python")
CONFIGS = {"ppo": (PPO, PPOConfig), "sac": (SAC, SACConfig), "dqn": (DQN, DQNConfig)}


class _Fallbacks(logging.Handler):
    """Keeps tinker's once-per-process warnings that an update runs off the compiled step."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "not the compiled step" in msg and msg not in self.seen:
            self.seen.append(msg)


FALLBACKS = _Fallbacks()
logging.getLogger().addHandler(FALLBACKS)


def run_tinker(task: Task, steps: int, seed: int, double_q: bool = True) -> dict:
    """tinker on ``task`` from its RL Zoo entry (less what tinker does not apply)."""
    algo_cls, cfg_cls = CONFIGS[task.algo]
    settings = from_rlzoo(entry_without(task, "tinker"), task.algo, cfg_cls, where=task.name)
    extra = {"double_q": double_q} if task.algo == "dqn" else {}
    algo = algo_cls(task.gym_id, cfg_cls(**settings.section, **extra, seed=seed))
    if task.algo == "ppo":
        clock = UpdateClock(algo, "_update", lambda a, k: ppo_samples_per_update(task))
    else:
        clock = UpdateClock(algo, "_train", lambda a, k: int(a[0] if a else k["gradient_steps"]))
    curve: list[tuple[int, float]] = []  # every episode: algo.episode_history keeps the last 5000 only

    def record(a, info: dict) -> None:
        curve.extend((a.num_timesteps, e.ret) for e in info["episodes"])

    t0 = time.perf_counter()
    algo.learn(steps, callback=record, progress=False)
    wall = time.perf_counter() - t0
    norm = getattr(algo, "obs_norm", None)
    ev = evaluate(task, lambda o: algo.predict(o, deterministic=True), 10, seed)
    return {"steps_per_s": algo.num_timesteps / wall, "wall_s": wall, **ev, "curve": curve,
            "update_s": clock.seconds, "update_calls": clock.calls, "gradient_steps": clock.gradient_steps,
            "update_path": getattr(algo, "update_path", "autograd"), "rlzoo_notes": settings.notes,
            "not_applied": not_applied(task, "tinker"), "normalizer": norm is not None}


def run_sbx(task: Task, steps: int, seed: int, threads: int) -> dict:
    """sbx in its own venv's interpreter; the runner's last stdout line is its result."""
    cmd = [SBX_PYTHON, str(Path(__file__).with_name("_sbx_runner.py")), "--task", task.name, "--steps", str(steps),
           "--seed", str(seed), "--threads", str(threads)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1][:400] if (p.stderr or p.stdout) else "failed"}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    r["curve"] = [tuple(x) for x in r["curve"]]
    return r


def sbx_peak() -> dict | None:
    if not Path(SBX_PYTHON).exists():
        return None
    p = subprocess.run([SBX_PYTHON, str(Path(__file__).with_name("_sbx_runner.py")), "--peak"], capture_output=True,
                       text=True, cwd=ROOT)
    return json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else {"error": p.stderr[-300:]}


def _plot(curves: dict, path: Path) -> Path:
    """One panel per setup; each line is one seed's training curve (mean of the last 10 episodes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(4, len(curves))
    rows = -(-len(curves) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), dpi=90, squeeze=False)
    for ax in axes.flat[len(curves):]:
        ax.axis("off")
    for ax, (name, libs) in zip(axes.flat, curves.items()):
        for lib, color in (("tinker", "tab:blue"), ("sb3", "tab:orange"), ("sbx", "tab:green")):
            for i, curve in enumerate(libs.get(lib, [])):
                if len(curve) < 2:
                    continue
                st, rt = np.asarray(curve, dtype=float).T
                k = min(10, len(rt))
                ax.plot(st[k - 1:], np.convolve(rt, np.ones(k) / k, mode="valid"), color=color, alpha=0.8,
                        label=lib if i == 0 else None)
        ax.axhline(TASKS[name].threshold, color="gray", ls="--", lw=1)
        ax.set_title(name)
        ax.set_xlabel("env steps")
        ax.set_ylabel("episode return (mean of 10)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _summary(task: Task, rows: dict[str, list[dict]], flops_per_step: int, peak: dict) -> dict:
    """Figures of one task: per library speed, return spread, threshold, GFLOP/s; then the ratios."""
    f: dict = {}
    name = task.name
    for lib, rs in rows.items():
        rs = [r for r in rs if "error" not in r]
        if not rs:
            continue
        sps = [r["steps_per_s"] for r in rs]
        fin = [r["final_return"] for r in rs]
        hit = [r["steps_to_threshold"] for r in rs if r["steps_to_threshold"] is not None]
        f[f"{name}_{lib}_steps_per_s"] = float(np.median(sps))
        f[f"{name}_{lib}_final_return_mean"] = float(np.mean(fin))
        f[f"{name}_{lib}_final_return_std"] = float(np.std(fin, ddof=1)) if len(fin) > 1 else None
        f[f"{name}_{lib}_final_return_median"] = float(np.median(fin))
        f[f"{name}_{lib}_final_return_min"] = float(np.min(fin))
        f[f"{name}_{lib}_final_returns"] = [round(float(x), 1) for x in fin]
        if task.goal:
            f[f"{name}_{lib}_success_rates"] = [round(r.get("success_rate", float("nan")), 2) for r in rs]
        f[f"{name}_{lib}_steps_to_threshold_median"] = float(np.median(hit)) if hit else None
        f[f"{name}_{lib}_seeds_reaching_threshold"] = len(hit)
        gf = [r["gradient_steps"] * flops_per_step / r["update_s"] / 1e9 for r in rs if r.get("update_s")]
        f[f"{name}_{lib}_update_gflops_per_s"] = float(np.median(gf)) if gf else None
        # against the best float32 product measured on this machine (any library, at the run's threads)
        f[f"{name}_{lib}_update_fraction_of_matmul_peak"] = (float(np.median(gf)) / peak["machine"] if gf else None)
        f[f"{name}_{lib}_update_share_of_wall"] = float(np.median([r["update_s"] / r["wall_s"] for r in rs]))
    for a, b in (("tinker", "sb3"), ("tinker", "sbx"), ("sbx", "sb3")):
        ka, kb = f"{name}_{a}_steps_per_s", f"{name}_{b}_steps_per_s"
        if ka in f and kb in f:
            f[f"{name}_speed_ratio_{a}_vs_{b}"] = f[ka] / f[kb]
            ok = [(x, y) for x, y in zip(rows[a], rows[b]) if "error" not in x and "error" not in y]
            f[f"{name}_speed_ratios_{a}_vs_{b}_per_seed"] = [round(x["steps_per_s"] / y["steps_per_s"], 3)
                                                             for x, y in ok]
            fa = np.array([x["final_return"] for x, _ in ok])
            fb = np.array([y["final_return"] for _, y in ok])
            f[f"{name}_return_diff_{a}_vs_{b}"] = float(fa.mean() - fb.mean())
            f[f"{name}_return_diff_{a}_vs_{b}_stderr"] = (float(np.sqrt(fa.var(ddof=1) / len(fa) + fb.var(ddof=1) / len(fb)))
                                                          if len(ok) > 1 else None)
    return f


def main() -> int:
    ap = arg_parser(__doc__.split("\n")[0], "one seed, tiny budgets: a few minutes")
    ap.add_argument("--seeds", type=int, default=5, help="seeds per task (the issue's full run: 5)")
    ap.add_argument("--fraction", type=float, default=1.0,
                    help="scale every RL Zoo budget (a reduced run; recorded per task and never the full run)")
    ap.add_argument("--task-fraction", nargs="*", default=[], metavar="TASK=F",
                    help="scale one task's budget (overrides --fraction for it), e.g. sac_mountaincar=0.1")
    ap.add_argument("--only", nargs="*", choices=sorted(TASKS), help="run only these tasks")
    ap.add_argument("--libs", nargs="*", choices=LIBS, default=list(LIBS), help="libraries to run (default all)")
    ap.add_argument("--threads", type=int, default=1,
                    help=f"torch / XLA threads, the same for every library (default 1: per-core speed; torch's own "
                         f"default here is {torch.get_num_threads()})")
    ap.add_argument("--tag", default="",
                    help="write results/algos.TAG.json (and .png) instead of algos.json")
    ap.add_argument("--dqn-plain-targets", action="store_true",
                    help="tinker's DQN with plain max-Q targets, as SB3's (default: its double-Q targets)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the tasks of the result file's earlier run that this run does not repeat (each task "
                         "records the run it comes from): to finish a suite in parts, or to run disjoint --only "
                         "lists in parallel (one per core: taskset -c N) into one file")
    args = ap.parse_args()
    if args.tag and not args.tag.replace("_", "").replace("-", "").isalnum():
        ap.error(f"--tag: letters, digits, '_' and '-' only, got {args.tag!r}")
    fractions = {}
    for item in args.task_fraction:
        k, _, v = item.partition("=")
        if k not in TASKS:
            ap.error(f"--task-fraction: unknown task {k!r}; tasks: {sorted(TASKS)}")
        fractions[k] = float(v)
    if "sbx" in args.libs and not Path(SBX_PYTHON).exists():
        ap.error(f"sbx: no interpreter at {SBX_PYTHON}; run `bash benchmarks/competitors_venv.sh` first "
                 "(or set SBX_PYTHON), or leave sbx out with --libs tinker sb3")
    result_name = f"algos.{args.tag}" if args.tag else "algos"
    previous = _previous_run(result_path(result_name, args.quick))
    # the header (commit, dirty) before this run writes its own result file, which is tracked
    head = header("algos", args.quick,
                  machine(("torch", "stable_baselines3", "gymnasium", "panda-gym"),
                          gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                          extra={"torch_threads": args.threads,
                                 "sbx_python": SBX_PYTHON if "sbx" in args.libs else None}),
                  "python " + " ".join(["benchmarks/algos.py", *sys.argv[1:]]))
    torch.set_num_threads(args.threads)
    if "tinker" in args.libs:  # build (once per machine) or load the compiled steps before anything is timed
        native.load()
    seeds = [0] if args.quick else list(range(args.seeds))
    peak = {"torch": matmul_peak_gflops(torch.mm, lambda n, m: torch.rand(n, m)),
            # oneDNN's product (what tinker's compiled SAC step may route through, tinker_products)
            "torch_onednn": matmul_peak_gflops(lambda a, b: torch._C._nn.mkldnn_linear(a, b, None),
                                               lambda n, m: torch.rand(n, m).to_mkldnn())}
    jp = sbx_peak() if "sbx" in args.libs else None
    if jp and "jax_matmul_gflops" in jp:
        peak["jax"] = jp["jax_matmul_gflops"]
    peak_figs = {k: v["peak"] for k, v in peak.items()}
    peak_figs["machine"] = max(peak_figs.values())
    print(f"matrix-product peak GFLOP/s: {peak_figs}", flush=True)
    figures: dict = {f"matmul_peak_gflops_{k}": v for k, v in peak_figs.items()}
    per_task: dict = {}
    curves_png: dict = {}
    versions: dict = {}
    for name in args.only or TASKS:
        task = TASKS[name]
        frac = 1.0 if args.quick else fractions.get(name, args.fraction)
        steps = task.quick_steps if args.quick else int(task.steps * frac)
        obs, act = dims(task)
        flops = task_update_flops(task, obs, act)
        rows: dict[str, list[dict]] = {lib: [] for lib in args.libs}
        for seed in seeds:  # alternate the libraries so load changes hit all of them
            for lib in args.libs:
                if lib == "tinker":
                    r = run_tinker(task, steps, seed, double_q=not args.dqn_plain_targets)
                elif lib == "sb3":
                    r = run_sb3_like(task, "sb3", steps, seed)
                else:
                    r = run_sbx(task, steps, seed, args.threads)
                    versions.update({k: r[k] for k in ("jax", "sbx") if k in r})
                if "error" in r:
                    print(f"{name} seed {seed} {lib:6s}: ERROR {r['error']}", flush=True)
                else:
                    r["steps_to_threshold"] = steps_to(r["curve"], task.threshold)
                    gf = r["gradient_steps"] * flops / r["update_s"] / 1e9 if r["update_s"] else 0.0
                    print(f"{name} seed {seed} {lib:6s}: {r['steps_per_s']:7.1f} steps/s, final return "
                          f"{r['final_return']:8.1f}" + (f" (success {r['success_rate']:.2f})" if task.goal else "")
                          + f", threshold at {r['steps_to_threshold']}, update {gf:.2f} GFLOP/s"
                          + (f" [{r['update_path']}]" if lib == "tinker" else ""), flush=True)
                rows[lib].append(r)
        figures.update(_summary(task, rows, flops, peak_figs))
        per_task[name] = {
            "env": task.env, "algo": task.algo, "rlzoo_entry": dict(task.entry), "entry_source": task.source,
            "threshold": task.threshold, "threshold_source": task.threshold_source,
            "timesteps": steps, "fraction_of_rlzoo_budget": round(steps / task.steps, 4),
            "full_rlzoo_budget": steps == task.steps, "seeds": seeds,
            "not_applied": {lib: not_applied(task, lib) for lib in args.libs if not_applied(task, lib)},
            "update_flops_per_gradient_step": flops, "obs_dim": obs, "action_dim": act,
            "errors": {lib: [r["error"] for r in rs if "error" in r] for lib, rs in rows.items()
                       if any("error" in r for r in rs)},
            "run": {"when": head["when"], "commit": head["commit"], "command": head["command"],
                    "load_avg_1min_at_end": round(os.getloadavg()[0], 2)},
        }
        if "tinker" in rows:
            ok = [r for r in rows["tinker"] if "error" not in r]
            per_task[name]["tinker_update_path"] = [r["update_path"] for r in ok]
            per_task[name]["tinker_rlzoo_notes"] = ok[0]["rlzoo_notes"] if ok else []
            if task.algo in ("sac", "dqn"):  # the compiled SAC and DQN steps' product library
                per_task[name]["tinker_products"] = native.gemm() or "not loaded"
            if task.algo == "dqn":
                per_task[name]["tinker_double_q"] = not args.dqn_plain_targets
        curves_png[name] = {lib: [r["curve"] for r in rs if "error" not in r] for lib, rs in rows.items()}
        # re-read at each write: two runs of disjoint tasks (one per core) can --merge into one file
        figures_kept, tasks_kept = _earlier_tasks(result_path(result_name, args.quick), args.only or list(TASKS)) \
            if args.merge else ({}, {})
        path = _write(args, result_name, head, {**figures_kept, **figures}, {**tasks_kept, **per_task}, peak,
                      versions, previous)  # after each task: a cut run keeps its tasks
    png = _plot(curves_png, result_path(result_name, args.quick, ".png"))
    print(json.dumps({k: v for k, v in figures.items() if not isinstance(v, list)}, indent=1))
    print(f"wrote {path} and {png}")
    return 0


def _previous_run(path: Path) -> dict | None:
    """The run a new result replaces, when it is of the earlier 3-setup format (README cites its figures): kept
    whole under ``previous_run`` of the new file."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return old.get("previous_run") if "tasks" in old else old


def _earlier_tasks(path: Path, redo: list[str]) -> tuple[dict, dict]:
    """(figures, tasks) of the file's earlier run for the tasks not in ``redo``; each task keeps its run's record."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}, {}
    if "tasks" not in old:
        return {}, {}
    keep = [n for n in old["tasks"] if n not in redo]
    figs = {k: v for k, v in old["figures"].items() if any(k.startswith(n + "_") for n in keep)}
    tasks = {}
    for n in keep:
        tasks[n] = dict(old["tasks"][n])
        tasks[n].setdefault("run", {"when": old["when"], "commit": old["commit"], "command": old["command"],
                                    "load_avg_1min_at_end": old["machine"].get("load_avg_1min_at_end")})
        tasks[n]["run"].setdefault("matmul_peak_gflops_machine", old["figures"].get("matmul_peak_gflops_machine"))
    return figs, tasks


def _write(args, result_name: str, head: dict, figures: dict, per_task: dict, peak: dict, versions: dict,
           previous: dict | None) -> Path:
    full = (all(v["full_rlzoo_budget"] and len(v["seeds"]) >= 5 for v in per_task.values())
            and not args.quick and set(args.libs) == set(LIBS) and set(per_task) == set(TASKS))
    goals = {f"{n}_speed_ratio_tinker_vs_sb3": ">= 1.5" for n in per_task}
    goals.update({f"{n}_return_diff_tinker_vs_sb3": ">= -(2 x stderr): not worse than SB3 beyond the seeds' spread"
                  for n in per_task})
    out = {
        **head,
        "run_kind": "full (RL Zoo budgets, >= 5 seeds, all tasks and libraries)" if full else
                    "reduced: see each task's timesteps, fraction_of_rlzoo_budget and seeds; not the full run",
        "fallbacks": FALLBACKS.seen,
        "load_avg_1min_at_end": round(os.getloadavg()[0], 2),
        "versions": versions,
        "matmul_peak_gflops": peak,
        "figures": figures,
        "goals": goals,
        "tasks": per_task,
        **({"previous_run": previous} if previous else {}),
    }
    return write_result(result_name, args.quick, out)


if __name__ == "__main__":
    raise SystemExit(main())
