"""The game scenario: a hierarchy over scripted squad skills on ``tinker/Skirmish-v0`` (tinker's own micro-combat
stand-in for a StarCraft II micro scenario, not StarCraft II), trained with a curriculum on the number of opponents
(5 -> 10 -> 15 -> 20, promoted at 80% wins over 20 episodes), then its win rate at 20 opponents against the
scripted opponents, beside scripted high levels.

    python benchmarks/skirmish.py [--quick] [--steps N] [--only METHOD] [--seeds S ...] [--add]
    python benchmarks/skirmish.py --only hppo_impala --seeds 0 1 2 --add      # HPPO on IMPALA's Ray actors

Runs, one after the other in this process, each with its own curriculum and the same env-step budget:
- ``hppo``: synchronous HPPO (`tinker_core.algos.hppo`), its 4 envs in this process, options = the 4 skills of
  the set ``skirmish`` for 5 steps each; PPO's clipped surrogate on the semi-MDP;
- ``impala``: the same hierarchy's high level trained by IMPALA (`tinker_core.algos.impala`): 2 actor threads
  (4 envs each) step ``OptionEnv`` (one step = one skill for 5 env steps), asynchronous, V-trace corrects the lag;
  its loss is IMPALA's V-trace actor-critic, not PPO's clipped surrogate, one gradient step per batch;
- ``impala_clip``: ``impala`` with ``policy_loss: clip``: PPO's clipped surrogate on the ratio to the behaviour
  policy with V-trace advantages (as asynchronous PPO, APPO), one gradient step per batch: hierarchical PPO on
  IMPALA's actors, for the high level (the low level is the scripted skills);
- ``hppo_no_curriculum``: ``hppo`` at 20 opponents from the start (does the curriculum matter here?);
- ``hppo_impala``: hierarchical PPO on IMPALA: ``impala_clip`` with HPPO's several passes per batch (10 epochs in
  minibatches of 32 decisions, ``IMPALAConfig.n_epochs`` / ``minibatch_size``), on 2 **Ray** actors (a local Ray
  of 2 CPUs, shut down after the run; ``RAY_TMPDIR`` names its temp dir).

The IMPALA methods count their budget as the skirmish env steps behind the decisions the learner learned from
(``IMPALA.inner_env_steps``, counted by the actors' OptionEnvs); runs recorded before that counted the steps the
actors made (``env_steps_collected``, a little more: the queue holds some). Each run records its commit, its start
time and the load average at its start and end; ``--add`` merges by (method, seed), under a lock, so one process
per seed can run at once.

Baselines (no training), the same evaluation: always ``attack_nearest``, always ``focus_weakest``, a hand-written
kiting rule (``retreat`` when an opponent is within 0.1 of the squad, else ``focus_weakest``), a uniformly random
skill. Evaluation: ``--eval-episodes`` episodes (default 50, seeds 10000...) at 20 opponents, the trained high level
deterministic (most probable skill), a decision every 5 steps. Writes benchmarks/results/skirmish.json (``--quick``:
skirmish.quick.json) and docs/hierarchy/skirmish.png (``--quick``: benchmarks/results/skirmish.quick.png).
``--add``: keep the runs and baselines of the existing result file, replace or add the methods run now, redraw (each
run records its own commit, time and load).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time

import numpy as np

from _common import ROOT, arg_parser, header, machine, result_path, utc_now, write_result

sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import tinker_sim  # noqa: E402,F401  (registers tinker/Skirmish-v0 and the skirmish skills)
from tinker_core.algos import HPPO, IMPALA, HPPOConfig, IMPALAConfig  # noqa: E402
from tinker_core.curriculum import Curriculum, CurriculumConfig  # noqa: E402
from tinker_core.envs import EnvConfig  # noqa: E402
from tinker_core.hierarchy.option_env import OptionEnv  # noqa: E402
from tinker_sim.skirmish import SkirmishEnv  # noqa: E402

ENV = "tinker/Skirmish-v0"
LEVELS = [5, 10, 15, 20]
DURATION = 5
GAMMA = 0.99
CURVE_EVERY = 5000
SKILLS = ["skirmish"]
KITE_DISTANCE = 0.1
SKILL_NAMES = ["attack_nearest", "focus_weakest", "retreat", "regroup"]
HPPO_ON_IMPALA = dict(policy_loss="clip", n_epochs=10, minibatch_size=32, backend="ray", actor_cpus=1.0)
"""``hppo_impala``: HPPO's update (PPO's clipped surrogate, 10 epochs over each batch in minibatches of 32 decisions)
on IMPALA's 2 Ray actors, V-trace for the targets; every other setting as ``impala`` (docs/hierarchy/README.md: why)."""


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = p + z * z / (2 * n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (c - h) / d), min(1.0, (c + h) / d)


def evaluate(choose, episodes: int, n_opponents: int = 20) -> dict:
    """``choose(obs) -> skill index`` every ``DURATION`` steps, ``episodes`` episodes at ``n_opponents``."""
    env = OptionEnv(SkirmishEnv(num_opponents=n_opponents), SKILLS, DURATION, GAMMA)
    wins, kills, alive, usage = 0, 0, 0, np.zeros(len(env.skill_names), np.int64)
    for ep in range(episodes):
        obs, _ = env.reset(seed=10_000 + ep)
        while True:
            opt = int(choose(obs))
            usage[opt] += 1
            obs, _, term, trunc, info = env.step(opt)
            if term or trunc:
                break
        wins += bool(info["is_success"])
        kills += int(info["kills"])
        alive += int(info["squad_alive"])
    lo, hi = wilson(wins, episodes)
    return {"episodes": episodes, "num_opponents": n_opponents, "wins": wins, "win_rate": wins / episodes,
            "win_rate_ci95": [round(lo, 3), round(hi, 3)], "kills_fraction": kills / (episodes * n_opponents),
            "squad_alive_mean": alive / episodes,
            "skill_usage": {n.split("/")[-1]: int(u) for n, u in zip(env.skill_names, usage)}}


class Recorder:
    """The learn callback: drives the curriculum and records the curve against a step counter."""

    INSTRUMENTS = ("entropy", "value_loss", "rho_mean", "lag_mean", "clip_fraction", "high_entropy", "high_value_loss")

    def __init__(self, env_steps, levels: list[int] = LEVELS) -> None:
        self.cur = Curriculum(CurriculumConfig(param="num_opponents", levels=levels, promote_at=0.8, window=20))
        self.env_steps = env_steps
        self.curve: list[dict] = []
        self.promotions: list[dict] = []
        self.recent: list[bool] = []
        self.next_point = CURVE_EVERY

    def __call__(self, algo, info) -> None:
        steps = int(self.env_steps(algo))
        for ep in info.get("episodes", ()):
            self.recent.append(bool(ep.success))
            if self.cur.record(bool(ep.success)):
                self.promotions.append({"env_step": steps, "num_opponents": int(self.cur.value)})
        del self.recent[:-50]
        while steps >= self.next_point:
            m = info.get("metrics") or {}
            point = {"env_step": self.next_point, "num_opponents": int(self.cur.value),
                     "win_rate_last50": float(np.mean(self.recent)) if self.recent else 0.0,
                     **{k: round(float(m[k]), 4) for k in self.INSTRUMENTS if k in m}}
            for prefix in ("action_frac_", "greedy_frac_"):  # the skills sampled / the most probable skill, per skill
                if f"{prefix}0" in m:
                    point[prefix.rstrip("_")] = [round(float(m[f"{prefix}{i}"]), 3) for i in range(len(SKILL_NAMES))]
            self.curve.append(point)
            self.next_point += CURVE_EVERY


def run_hppo(steps: int, seed: int, episodes: int, levels: list[int] = LEVELS) -> dict:
    algo = HPPO(ENV, HPPOConfig(seed=seed, skills=SKILLS, max_duration=DURATION, gamma=GAMMA, n_envs=4, n_steps=250,
                                log_interval=10**9))
    rec = Recorder(lambda a: a.num_timesteps, levels)
    rec.cur.bind(algo)
    t0 = time.perf_counter()
    algo.learn(steps, progress=False, callback=rec)
    wall = time.perf_counter() - t0
    with torch.no_grad():
        ev = evaluate(lambda o: int(algo.high.pi.logits(torch.as_tensor(o)[None]).argmax(-1)), episodes)
    algo.close()
    return {"method": "hppo" if levels == LEVELS else "hppo_no_curriculum", "seed": seed, "env_steps": int(algo.num_timesteps), "wall_s": round(wall, 1),
            "level_reached_num_opponents": int(rec.cur.value), "promotions": rec.promotions, "curve": rec.curve,
            "eval_20": ev}


def run_impala(steps: int, seed: int, episodes: int, policy_loss: str = "vtrace", method: str | None = None,
               **overrides) -> dict:
    """IMPALA over OptionEnv until the learner has learned from ``steps`` skirmish env steps (its
    ``inner_env_steps``: the primitive steps behind the decisions it took from the queue)."""
    env = EnvConfig(ENV, {}, ["tinker_sim"], [{"tinker_core.hierarchy.option_env.OptionEnv":
                                                {"skills": SKILLS, "max_duration": DURATION, "gamma": GAMMA}}])
    kw = dict(seed=seed, gamma=GAMMA ** DURATION, num_actors=2, envs_per_actor=4, unroll_length=20,
              batch_trajectories=2, queue_size=4, mode="async", backend="local", learning_rate=5e-4,
              ent_coef=0.01, torch_threads=1, log_interval=10**9, policy_loss=policy_loss)
    kw.update(overrides)
    ray_run = kw["backend"] == "ray"
    if ray_run:
        import ray

        # RAY_TMPDIR (if set) names Ray's temp dir; 2 CPUs: one per actor (the learner is this process)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    algo = IMPALA(env, IMPALAConfig(**kw))
    rec = Recorder(lambda a: a.inner_env_steps)
    rec.cur.bind(algo)

    def callback(a, info):
        rec(a, info)
        return False if a.inner_env_steps >= steps else None

    try:
        t0 = time.perf_counter()
        algo.learn(10**9, progress=False, callback=callback)  # decisions; the callback stops it at `steps` env steps
        wall = time.perf_counter() - t0
        with torch.no_grad():
            ev = evaluate(lambda o: int(algo.predict(o, deterministic=True)), episodes)
        out = {"method": method or ("impala" if policy_loss == "vtrace" else f"impala_{policy_loss}"), "seed": seed,
               "env_steps": int(algo.inner_env_steps),
               "env_steps_collected": int(sum(s.get("inner_env_steps", 0) for s in algo.actor_stats)),
               "option_steps_learned": int(algo.num_timesteps), "updates": int(algo.num_updates),
               "wall_s": round(wall, 1), "impala": {k: kw[k] for k in sorted(kw) if k not in ("log_interval",)},
               "level_reached_num_opponents": int(rec.cur.value), "promotions": rec.promotions, "curve": rec.curve,
               "policy_lag": algo.lag.summary(), "actors": algo.actor_stats, "eval_20": ev}
    finally:
        algo.close()
        if ray_run:
            ray.shutdown()
    return out


def baselines(episodes: int) -> dict:
    rng = np.random.default_rng(0)
    rules = {"always_attack_nearest": lambda o: 0, "always_focus_weakest": lambda o: 1,
             "kite_rule": lambda o: 2 if o[7] < KITE_DISTANCE else 1, "random_skill": lambda o: int(rng.integers(4))}
    return {name: evaluate(rule, episodes) for name, rule in rules.items()}


def plot(runs: list[dict], base: dict, path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"hppo": "tab:green", "impala": "tab:purple", "impala_clip": "tab:orange", "hppo_no_curriculum": "tab:olive",
              "hppo_impala": "tab:blue"}
    seen: dict[str, int] = {}
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 9), gridspec_kw={"height_ratios": [1, 1.6]})
    for r in runs:
        c = colors[r["method"]]
        ls = ("-", "--", ":", "-.")[seen.get(r["method"], 0) % 4]
        seen[r["method"]] = seen.get(r["method"], 0) + 1
        name = f"{r['method']} s{r['seed']}"
        xs = [p["env_step"] for p in r["curve"]]
        end = xs[-1] if xs else 0
        lx = [0] + [p["env_step"] for p in r["promotions"]] + [end]
        ly = [r["curve"][0]["num_opponents"] if not r["promotions"] else LEVELS[0]] + \
            [p["num_opponents"] for p in r["promotions"]]
        stages = ", ".join(f"{p['num_opponents']} @ {p['env_step']:,}" for p in r["promotions"]) or "none (20 from the start)"
        ax1.step(lx, ly + ly[-1:], where="post", color=c, ls=ls, label=f"{name}: promotions {stages}")
        ax2.plot(xs, [p["win_rate_last50"] for p in r["curve"]], color=c, ls=ls,
                 label=f"{name} (eval at 20: {r['eval_20']['win_rate']:.0%})")
        for p in r["promotions"]:
            ax2.axvline(p["env_step"], color=c, ls=ls, alpha=0.3, lw=0.8)
    for (name, ev), ls in zip(base.items(), (":", "--", "-.", (0, (1, 4)))):
        ax2.axhline(ev["win_rate"], color="gray", ls=ls, lw=1, label=f"{name} at 20: {ev['win_rate']:.0%}")
    last = max([p["env_step"] for r in runs for p in r["promotions"]] + [0])
    ax1.set_xlim(0, max(2 * last, 1000))  # the stages are passed early: the top panel shows that span only
    ax1.set_xlabel("skirmish env steps (the curriculum's span)")
    ax1.set_ylabel("curriculum: opponents")
    ax1.set_ylim(3, 22)
    ax1.legend(loc="lower right", fontsize=7)
    ax2.set_ylabel("training win rate\n(last 50 episodes, at the current level)")
    ax2.set_xlabel("skirmish env steps")
    ax2.set_ylim(-0.02, 1.12)
    ax2.legend(loc="lower right", fontsize=6.5, ncol=2)
    ax1.set_title("tinker/Skirmish-v0 (a stand-in, not StarCraft II): hierarchy over 4 scripted squad skills,\n"
                  "curriculum 5 -> 20 opponents (vertical lines: promotions); grey: scripted high levels at 20",
                  fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


METHODS = {"hppo": run_hppo, "impala": run_impala,
           "impala_clip": lambda steps, seed, episodes: run_impala(steps, seed, episodes, "clip"),
           "hppo_no_curriculum": lambda steps, seed, episodes: run_hppo(steps, seed, episodes, [LEVELS[-1]]),
           "hppo_impala": lambda steps, seed, episodes: run_impala(steps, seed, episodes, method="hppo_impala",
                                                                   **HPPO_ON_IMPALA)}


def main() -> None:
    ap = arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None, help="env steps per run (default 300000; --quick 20000)")
    ap.add_argument("--eval-episodes", type=int, default=None, help="episodes at 20 opponents (default 50; --quick 10)")
    ap.add_argument("--only", choices=list(METHODS), default=None, help="run one method only")
    ap.add_argument("--add", action="store_true", help="merge into the existing result file (see the module doc)")
    ap.add_argument("--plot-only", action="store_true", help="redraw the PNG from the existing result file, run nothing")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="one run per seed and method (default 0)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.plot_only:
        png = result_path("skirmish", True, ".png") if args.quick else ROOT / "docs" / "hierarchy" / "skirmish.png"
        old = json.loads(result_path("skirmish", args.quick).read_text())
        plot(old["runs"], old["baselines"], png)
        print(f"redrew {png}")
        return
    steps = args.steps or (20_000 if args.quick else 300_000)
    episodes = args.eval_episodes or (10 if args.quick else 50)
    cmd = "python benchmarks/skirmish.py" + (" --quick" if args.quick else "") + \
        (f" --steps {args.steps}" if args.steps else "") + (f" --only {args.only}" if args.only else "") + \
        (f" --seeds {' '.join(map(str, args.seeds))}" if args.seeds != [0] else "") + (" --add" if args.add else "")
    head = header("skirmish", args.quick, machine(("torch",), load_key="load_avg_start"), cmd)
    runs = []
    for method, fn in METHODS.items():
        if args.only and method != args.only:
            continue
        if not args.only and method in ("impala_clip", "hppo_no_curriculum"):
            continue  # added later with --only METHOD --add
        for seed in args.seeds:
            load0 = load_avg()
            r = {**fn(steps, seed, episodes), "commit": head["commit"], "when": utc_now(),
                 "load_avg_start": load0, "load_avg_end": load_avg(), "command": cmd}
            print(f"{method} seed {seed}: level {r['level_reached_num_opponents']} opponents, eval at 20 "
                  f"{r['eval_20']}, {r['wall_s']} s", flush=True)
            runs.append(r)
    with result_lock(args.quick):  # parallel `--add` runs (one seed each) merge one at a time
        write_all(args, runs, head, steps, episodes, cmd)


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


@contextlib.contextmanager
def result_lock(quick: bool):
    import fcntl
    import tempfile
    from pathlib import Path

    with open(Path(tempfile.gettempdir()) / f"tinker_skirmish{'.quick' if quick else ''}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write_all(args, runs: list[dict], head: dict, steps: int, episodes: int, cmd: str) -> None:
    old = json.loads(result_path("skirmish", args.quick).read_text()) if args.add else None
    if old is not None:
        done = {(r["method"], r["seed"]) for r in runs}
        first = old.get("first_run") or {k: old[k] for k in ("when", "commit", "command")}
        kept = [{"commit": first["commit"], "when": first["when"], "command": first["command"], **r}
                for r in old["runs"] if (r["method"], r["seed"]) not in done]
        runs = sorted(kept + runs, key=lambda r: (list(METHODS).index(r["method"]), r["seed"]))
        base = old["baselines"]
        head = {**head, "first_run": first}
    else:
        base = baselines(episodes)
    for name, ev in base.items():
        print(f"{name}: {ev}", flush=True)
    png = result_path("skirmish", True, ".png") if args.quick else ROOT / "docs" / "hierarchy" / "skirmish.png"
    plot(runs, base, png)
    out = write_result("skirmish", args.quick, {
        **head, "settings": {"env": ENV, "env_steps_per_run": steps, "seeds": sorted({r["seed"] for r in runs}),
                             "curriculum_levels": LEVELS,
                             "promote_at": 0.8, "window": 20, "option_duration": DURATION, "gamma": GAMMA,
                             "eval_episodes_at_20": episodes, "eval_seeds": [10_000, 10_000 + episodes - 1]},
        "figures": {**{f"{r['method']}_seed{r['seed']}_win_rate_at_20": r["eval_20"]["win_rate"] for r in runs},
                    **{f"{r['method']}_seed{r['seed']}_wall_s": r["wall_s"] for r in runs},
                    **{f"{k}_win_rate_at_20": v["win_rate"] for k, v in base.items()}},
        "runs": runs, "baselines": base,
        "goals": {"hppo_win_rate_at_20": "> always_attack_nearest_win_rate_at_20"}})
    print(f"wrote {out} and {png}")


if __name__ == "__main__":
    main()
