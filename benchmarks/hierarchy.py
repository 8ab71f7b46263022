"""Hierarchical PPO against flat PPO and SAC on multi-object sorting (``tinker/PlanarSort-v0``), at equal env
steps, each run driven by its own curriculum on the number of objects (1 -> 6, promoted at 80% success over
20 episodes).

    python benchmarks/hierarchy.py [--quick] [--no-sac]

Runs (each seed separately, all in this one process, one after the other):
- ``hppo_skills``: HPPO whose options are the env's 9 scripted skills (reach object i, carry to bin k),
  fixed duration 8 steps; only the high level learns;
- ``hppo_learned``: HPPO with 6 learned options (one network, one-hot option embedding), duration 8;
- ``ppo``: flat PPO, SB3's defaults except n_steps=256, n_envs=4 (the same rollout as the HPPO runs);
- ``sac``: flat SAC, train_freq=4 (one update per 4 env steps, to fit the compute budget), seed 0 only.

Per run: the curriculum's promotions (env step, level), the training success rate over the last 50 episodes
at each point of the curve, the level reached, and a final deterministic evaluation of 20 episodes at 6
objects (success rate and objects sorted). Writes benchmarks/results/hierarchy.json (``--quick``:
hierarchy.quick.json) and docs/hierarchy/curve.png (``--quick``: benchmarks/results/hierarchy.quick.png).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from _common import ROOT, arg_parser, header, machine, result_path, write_result

sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402

import tinker_sim  # noqa: E402,F401  (registers tinker/PlanarSort-v0 and the planar_sort skills)
from tinker_core.algos import HPPO, PPO, SAC, HPPOConfig, PPOConfig, SACConfig  # noqa: E402
from tinker_core.curriculum import Curriculum, CurriculumConfig  # noqa: E402
from tinker_core.evaluate import evaluate  # noqa: E402

ENV = "tinker/PlanarSort-v0"
LEVELS = [1, 2, 3, 4, 5, 6]
CURVE_EVERY = 5000
"""env steps between two points of the curve"""


def build(method: str, seed: int):
    if method == "hppo_skills":
        return HPPO(ENV, HPPOConfig(seed=seed, skills=["planar_sort"], n_steps=256, n_envs=4, log_interval=10**9))
    if method == "hppo_learned":
        return HPPO(ENV, HPPOConfig(seed=seed, num_options=6, n_steps=256, n_envs=4, log_interval=10**9))
    if method == "ppo":
        return PPO(ENV, PPOConfig(seed=seed, n_steps=256, n_envs=4, log_interval=10**9))
    if method == "sac":
        return SAC(ENV, SACConfig(seed=seed, train_freq=4, learning_starts=1000, log_interval=10**9))
    raise ValueError(method)


def run(method: str, seed: int, steps: int, eval_episodes: int, levels: list[int] = LEVELS) -> dict:
    """One training run; ``levels``: the curriculum's (``[6]``: 6 objects from the first step, no curriculum)."""
    algo = build(method, seed)
    cur = Curriculum(CurriculumConfig(param="num_objects", levels=levels, promote_at=0.8, window=20))
    curve: list[dict] = []
    promotions: list[dict] = []
    recent: list[bool] = []
    next_point = [CURVE_EVERY]

    def callback(a, info) -> None:
        for ep in info.get("episodes", ()):
            recent.append(bool(ep.success))
            if cur.record(bool(ep.success)):
                promotions.append({"step": int(a.num_timesteps), "num_objects": int(cur.value)})
        del recent[:-50]
        while a.num_timesteps >= next_point[0]:
            curve.append({"step": next_point[0], "num_objects": int(cur.value),
                          "success_rate_last50": float(np.mean(recent)) if recent else 0.0})
            next_point[0] += CURVE_EVERY

    cur.bind(algo)
    t0 = time.perf_counter()
    algo.learn(steps, progress=False, callback=callback)
    wall = time.perf_counter() - t0
    env = gym.make(ENV, num_objects=LEVELS[-1])
    policy = algo.policy if method.startswith("hppo") else (lambda o: algo.predict(o, deterministic=True))
    if method.startswith("hppo"):
        algo.policy.deterministic = True
    ev = evaluate(env, policy, eval_episodes, seed=10_000)
    algo.close()
    return {"method": method, "seed": seed, "env_steps": int(algo.num_timesteps), "wall_s": round(wall, 1),
            "level_reached_num_objects": int(cur.value), "promotions": promotions, "curve": curve,
            "eval_6_objects": {"episodes": ev.episodes, "success_rate": ev.success_rate,
                               "objects_sorted_rate": ev.objects_sorted_rate, "mean_return": ev.mean_return}}


def plot(runs: list[dict], path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"hppo_skills": "tab:green", "hppo_learned": "tab:orange", "ppo": "tab:blue", "sac": "tab:red"}
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    seen = set()
    for r in runs:
        c = colors[r["method"]]
        xs = [p["step"] for p in r["curve"]]
        label = r["method"] if r["method"] not in seen else None
        seen.add(r["method"])
        ax1.step(xs, [p["num_objects"] for p in r["curve"]], where="post", color=c, alpha=0.8, label=label)
        ax2.plot(xs, [p["success_rate_last50"] for p in r["curve"]], color=c, alpha=0.8, label=label)
        for p in r["promotions"]:
            ax2.axvline(p["step"], color=c, alpha=0.25, lw=0.8)
            ax2.text(p["step"], 1.02, str(p["num_objects"]), color=c, fontsize=6, ha="center")
    ax1.set_ylabel("curriculum: objects per episode")
    ax1.set_ylim(0.5, 6.5)
    ax1.legend(loc="upper left")
    ax2.set_ylabel("training success\n(last 50 training episodes)")
    ax2.set_xlabel("env steps")
    ax2.set_ylim(-0.02, 1.1)
    ax1.set_title("tinker/PlanarSort-v0: hierarchical vs flat at equal env steps (one line per seed;\n"
                  "vertical lines: curriculum promotions, labelled with the new number of objects)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--no-sac", action="store_true", help="leave SAC out (the slowest run)")
    ap.add_argument("--plot-only", action="store_true", help="redraw the PNG from the existing result file, run nothing")
    ap.add_argument("--no-curriculum", action="store_true",
                    help="the ablation: hppo_skills with the curriculum and at 6 objects from the first step, same "
                         "steps and seeds, in one run (hierarchy_no_curriculum.json)")
    args = ap.parse_args()
    if args.no_curriculum:
        return no_curriculum(args)
    if args.plot_only:
        import json

        png = result_path("hierarchy", True, ".png") if args.quick else ROOT / "docs" / "hierarchy" / "curve.png"
        plot(json.loads(result_path("hierarchy", args.quick).read_text())["runs"], png)
        print(f"redrew {png}")
        return
    steps = 20_000 if args.quick else 300_000
    seeds = [0] if args.quick else [0, 1, 2]
    eval_episodes = 5 if args.quick else 20
    head = header("hierarchy", args.quick, machine(("torch",), load_key="load_avg_start"),
                  "python benchmarks/hierarchy.py" + (" --quick" if args.quick else "") + (" --no-sac" if args.no_sac else ""))
    plan = [(m, s) for s in seeds for m in ("hppo_skills", "hppo_learned", "ppo")]
    if not (args.quick or args.no_sac):
        plan.append(("sac", 0))
    runs = []
    for m, s in plan:
        r = run(m, s, steps, eval_episodes)
        print(f"{m} seed {s}: level {r['level_reached_num_objects']} objects, eval at 6 objects "
              f"{r['eval_6_objects']}, {r['wall_s']} s", flush=True)
        runs.append(r)
    figures: dict[str, float] = {}
    for m in dict.fromkeys(m for m, _ in plan):
        rs = [r for r in runs if r["method"] == m]
        figures[f"{m}_level_reached_num_objects_median"] = float(np.median([r["level_reached_num_objects"] for r in rs]))
        figures[f"{m}_eval6_success_rate_median"] = float(np.median([r["eval_6_objects"]["success_rate"] for r in rs]))
        figures[f"{m}_eval6_objects_sorted_rate_median"] = float(np.median(
            [r["eval_6_objects"]["objects_sorted_rate"] for r in rs]))
        figures[f"{m}_wall_s_median"] = float(np.median([r["wall_s"] for r in rs]))
    png = result_path("hierarchy", True, ".png") if args.quick else ROOT / "docs" / "hierarchy" / "curve.png"
    plot(runs, png)
    out = write_result("hierarchy", args.quick, {
        **head, "settings": {"env": ENV, "env_steps_per_run": steps, "seeds": seeds, "curriculum_levels": LEVELS,
                             "promote_at": 0.8, "window": 20, "eval_episodes_at_6_objects": eval_episodes},
        "figures": figures, "runs": runs,
        "goals": {"hppo_skills_level_reached_num_objects_median": "> ppo_level_reached_num_objects_median"}})
    print(f"wrote {out} and {png}")


def no_curriculum(args) -> None:
    """hppo_skills with the curriculum (1 -> 6 objects) and at 6 objects from the first step, per seed in turn, in
    the same run: whether the curriculum is what gets it there."""
    steps, seeds = (20_000, [0]) if args.quick else (300_000, [0, 1, 2])
    eval_episodes = 5 if args.quick else 20
    head = header("hierarchy_no_curriculum", args.quick, machine(("torch",), load_key="load_avg_start"),
                  "python benchmarks/hierarchy.py --no-curriculum" + (" --quick" if args.quick else ""))
    runs = []
    for s in seeds:
        for arm, levels in (("curriculum", LEVELS), ("no_curriculum", [LEVELS[-1]])):
            r = {"arm": arm, **run("hppo_skills", s, steps, eval_episodes, levels=levels)}
            print(f"hppo_skills, {arm}, seed {s}: eval at 6 objects {r['eval_6_objects']}, {r['wall_s']} s", flush=True)
            runs.append(r)
    figures = {}
    for arm in ("curriculum", "no_curriculum"):
        ev = [r["eval_6_objects"] for r in runs if r["arm"] == arm]
        figures[f"hppo_skills_{arm}_eval6_success_rate_median"] = float(np.median([e["success_rate"] for e in ev]))
        figures[f"hppo_skills_{arm}_eval6_objects_sorted_rate_median"] = float(np.median(
            [e["objects_sorted_rate"] for e in ev]))
    out = write_result("hierarchy_no_curriculum", args.quick, {
        **head, "settings": {"env": ENV, "env_steps_per_run": steps, "seeds": seeds,
                             "arms": {"curriculum": LEVELS, "no_curriculum": [LEVELS[-1]]}, "promote_at": 0.8,
                             "window": 20, "eval_episodes_at_6_objects": eval_episodes},
        "figures": figures, "runs": runs})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
