"""tinker's PPO / SAC / DQN against Stable-Baselines3, same process, same envs, same RL Zoo hyperparameters.

For each (algorithm, env) and seed, both libraries train for the same number of env steps, in
alternation; we record wall-clock env steps/s, the episode-return curve (training episodes), the
timesteps at which the mean of the last 10 training episodes first reaches the threshold (-200 on
Pendulum-v1, 475 on CartPole-v1), and the final mean return of 10 deterministic evaluation episodes.

Fairness notes: both use torch with the same thread count (1 unless ``--threads``, recorded);
both get RL Zoo's entries exactly (rl-baselines3-zoo hyperparams/{ppo,sac,dqn}.yml, checked at
commit 22e3ff2 of April 2026): PPO Pendulum-v1 with gSDE (use_sde, sde_sample_freq 4) and no
normalization, SAC Pendulum-v1 with lr 1e-3 and SB3 defaults, DQN CartPole-v1 as listed;
tinker's DQN is double DQN (its default; ``--dqn-plain-targets`` for SB3's plain targets), SB3's is not. tinker's compiled SAC step sends its products
through the library measured faster on the machine (torch's BLAS or oneDNN, see tinker_core/algos/native.py; recorded
as ``tinker_products``); SB3's go through torch's default, the BLAS. ``TINKER_SAC_GEMM=blas`` runs
tinker's step on the BLAS too, for the comparison without that choice.

    python benchmarks/algos.py            # full: several seeds, RL Zoo budgets (about 25 min on 2 idle cores)
    python benchmarks/algos.py --quick    # about a minute: one seed, tiny budgets (same code path)
    python benchmarks/algos.py --only ppo_pendulum --seeds 20 --tag ppo_20_seeds   # -> results/algos.ppo_20_seeds.json
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

# benchmarks/ is sys.path[0] when run as `python benchmarks/NAME.py`
from _common import ROOT, arg_parser, header, machine, result_path, write_result

sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402

from tinker_core.algos import DQN, PPO, SAC, DQNConfig, PPOConfig, SACConfig, native  # noqa: E402


# RL Zoo hyperparameters (rl-baselines3-zoo hyperparams/*.yml), written once for both libraries.
SETUPS = {
    "ppo_pendulum": dict(env="Pendulum-v1", threshold=-200.0, steps=100_000, quick_steps=8192, normalize=False, n_envs=4,
                         common=dict(n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10, ent_coef=0.0,
                                     learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4)),
    "sac_pendulum": dict(env="Pendulum-v1", threshold=-200.0, steps=20_000, quick_steps=600, normalize=False, n_envs=1,
                         common=dict(learning_rate=1e-3)),
    "dqn_cartpole": dict(env="CartPole-v1", threshold=475.0, steps=50_000, quick_steps=2000, normalize=False, n_envs=1,
                         common=dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
                                     gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
                                     exploration_fraction=0.16, exploration_final_eps=0.04)),
}


def _eval(predict, env_id: str, episodes: int, seed: int) -> float:
    env = gym.make(env_id)
    rets = []
    for ep in range(episodes):
        o, _ = env.reset(seed=10_000 + seed * 100 + ep)
        done, ret = False, 0.0
        while not done:
            o, r, te, tr, _ = env.step(predict(o))
            ret += r
            done = te or tr
        rets.append(ret)
    return float(np.mean(rets))


def _steps_to(curve: list[tuple[int, float]], threshold: float, window: int = 10) -> int | None:
    rets = [r for _, r in curve]
    for i in range(window - 1, len(rets)):
        if np.mean(rets[i - window + 1:i + 1]) >= threshold:
            return int(curve[i][0])
    return None


def run_tinker(name: str, s: dict, steps: int, seed: int, double_q: bool = True) -> dict:
    c = dict(s["common"])
    algo_name = name.split("_")[0]
    if algo_name == "ppo":
        cfg = PPOConfig(**c, n_envs=s["n_envs"], normalize_obs=s["normalize"], normalize_reward=s["normalize"], seed=seed)
        algo = PPO(s["env"], cfg)
    elif algo_name == "sac":
        algo = SAC(s["env"], SACConfig(**c, seed=seed))
    else:
        algo = DQN(s["env"], DQNConfig(**c, net_arch=[256, 256], seed=seed, double_q=double_q))
    t0 = time.perf_counter()
    algo.learn(steps, progress=False)
    wall = time.perf_counter() - t0
    final = _eval(lambda o: algo.predict(o, deterministic=True), s["env"], 10, seed)
    return {"steps_per_s": algo.num_timesteps / wall, "wall_s": wall, "final_return": final,
            "curve": list(algo.episode_history), "update_path": getattr(algo, "update_path", "autograd")}


def run_sb3(name: str, s: dict, steps: int, seed: int) -> dict:
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    c = dict(s["common"])
    algo_name = name.split("_")[0]
    env = make_vec_env(s["env"], n_envs=s["n_envs"], seed=seed)
    if s["normalize"]:
        env = VecNormalize(env, gamma=c["gamma"])
    if algo_name == "ppo":
        model = sb3.PPO("MlpPolicy", env, seed=seed, device="cpu", **c)
    elif algo_name == "sac":
        model = sb3.SAC("MlpPolicy", env, seed=seed, device="cpu", **c)
    else:
        model = sb3.DQN("MlpPolicy", env, seed=seed, device="cpu", policy_kwargs=dict(net_arch=[256, 256]), **c)
    curve: list[tuple[int, float]] = []

    from stable_baselines3.common.callbacks import BaseCallback

    class Curve(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals.get("infos", []):
                if "episode" in info:
                    curve.append((self.num_timesteps, float(info["episode"]["r"])))
            return True

    t0 = time.perf_counter()
    model.learn(steps, callback=Curve())
    wall = time.perf_counter() - t0
    if s["normalize"]:
        env.training = False

        def predict(o):
            return model.predict(env.normalize_obs(o[None]), deterministic=True)[0][0]
    else:
        def predict(o):
            return model.predict(o, deterministic=True)[0]
    final = _eval(predict, s["env"], 10, seed)
    return {"steps_per_s": steps / wall, "wall_s": wall, "final_return": final, "curve": curve}


def _plot(curves: dict, path: Path) -> Path:
    """One panel per setup; each line is one seed's training curve (mean of the last 10 episodes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5 * len(curves), 3.6), dpi=100, squeeze=False)
    for ax, (name, libs) in zip(axes[0], curves.items()):
        for lib, color in (("tinker", "tab:blue"), ("sb3", "tab:orange")):
            for i, curve in enumerate(libs.get(lib, [])):
                if len(curve) < 2:
                    continue
                st, rt = np.asarray(curve, dtype=float).T
                k = min(10, len(rt))
                ax.plot(st[k - 1:], np.convolve(rt, np.ones(k) / k, mode="valid"), color=color, alpha=0.8,
                        label=lib if i == 0 else None)
        ax.axhline(SETUPS[name]["threshold"], color="gray", ls="--", lw=1)
        ax.set_title(name)
        ax.set_xlabel("env steps")
        ax.set_ylabel("episode return (mean of 10)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main() -> int:
    ap = arg_parser(__doc__.split("\n")[0], "one seed, tiny budgets: about a minute")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per setup in the full run")
    ap.add_argument("--fraction", type=float, default=1.0,
                    help="scale the RL Zoo budgets (e.g. 0.2 on a machine too busy for the full run; recorded)")
    ap.add_argument("--only", nargs="*", choices=sorted(SETUPS), help="run only these setups")
    ap.add_argument("--threads", type=int, default=1,
                    help=f"torch threads, the same for both libraries (default 1: per-core speed; torch's own "
                         f"default here is {torch.get_num_threads()})")
    ap.add_argument("--tag", default="",
                    help="write results/algos.TAG.json (and .png) instead of the full run's algos.json: for a run "
                         "with other settings, e.g. --only ppo_pendulum --seeds 20 --tag ppo_20_seeds")
    ap.add_argument("--dqn-plain-targets", action="store_true",
                    help="tinker's DQN with plain max-Q targets, as SB3's (default: its double-Q targets)")
    args = ap.parse_args()
    if args.tag and not args.tag.replace("_", "").replace("-", "").isalnum():
        ap.error(f"--tag: letters, digits, '_' and '-' only, got {args.tag!r}")
    result_name = f"algos.{args.tag}" if args.tag else "algos"
    torch.set_num_threads(args.threads)
    seeds = [0] if args.quick else list(range(args.seeds))
    figures: dict[str, float | int | None] = {}
    goals: dict[str, str] = {}
    per_setup = {}
    curves_png = {}
    for name in args.only or SETUPS:
        s = SETUPS[name]
        steps = s["quick_steps"] if args.quick else int(s["steps"] * args.fraction)
        rows = {"tinker": [], "sb3": []}
        for seed in seeds:  # alternate the two libraries so load changes hit both
            for lib in ("tinker", "sb3"):
                r = (run_tinker(name, s, steps, seed, double_q=not args.dqn_plain_targets) if lib == "tinker"
                     else run_sb3(name, s, steps, seed))
                r["steps_to_threshold"] = _steps_to(r["curve"], s["threshold"])
                rows[lib].append(r)
                print(f"{name} seed {seed} {lib:6s}: {r['steps_per_s']:7.1f} steps/s, final return {r['final_return']:8.1f}, "
                      f"threshold at {r['steps_to_threshold']}", flush=True)
        for lib in rows:
            sps = [r["steps_per_s"] for r in rows[lib]]
            fin = [r["final_return"] for r in rows[lib]]
            reach = [r["steps_to_threshold"] for r in rows[lib]]
            figures[f"{name}_{lib}_steps_per_s"] = float(np.median(sps))
            figures[f"{name}_{lib}_final_return_mean"] = float(np.mean(fin))
            figures[f"{name}_{lib}_final_return_min"] = float(np.min(fin))
            # one stalled evaluation episode costs ~-800 on Pendulum: the median says more than the mean
            figures[f"{name}_{lib}_final_return_median"] = float(np.median(fin))
            figures[f"{name}_{lib}_final_returns"] = [round(float(x), 1) for x in fin]
            hit = [x for x in reach if x is not None]
            figures[f"{name}_{lib}_steps_to_threshold_median"] = float(np.median(hit)) if hit else None
            figures[f"{name}_{lib}_seeds_reaching_threshold"] = len(hit)
            curves_png.setdefault(name, {})[lib] = [r["curve"] for r in rows[lib]]
        figures[f"{name}_speed_ratio_vs_sb3"] = figures[f"{name}_tinker_steps_per_s"] / figures[f"{name}_sb3_steps_per_s"]
        figures[f"{name}_return_diff_vs_sb3"] = (figures[f"{name}_tinker_final_return_mean"]
                                                 - figures[f"{name}_sb3_final_return_mean"])
        figures[f"{name}_median_return_diff_vs_sb3"] = (figures[f"{name}_tinker_final_return_median"]
                                                        - figures[f"{name}_sb3_final_return_median"])
        figures[f"{name}_speed_ratios_per_seed"] = [round(t["steps_per_s"] / b["steps_per_s"], 3)
                                                    for t, b in zip(rows["tinker"], rows["sb3"])]
        # the spread of the seeds: the standard error of the difference of the two means
        fins = [np.array([r["final_return"] for r in rows[lib]]) for lib in ("tinker", "sb3")]
        figures[f"{name}_return_diff_stderr"] = (float(np.sqrt(sum(f.var(ddof=1) / len(f) for f in fins)))
                                                 if len(seeds) > 1 else None)
        if name.startswith(("ppo", "sac")):
            goals[f"{name}_speed_ratio_vs_sb3"] = ">= 2.0"
        goals[f"{name}_return_diff_vs_sb3"] = ">= 0 (equal or better final return at equal timesteps)"
        per_setup[name] = {"env": s["env"], "timesteps": steps, "seeds": seeds, "threshold": s["threshold"],
                           "hyperparameters": s["common"], "normalize": s["normalize"], "n_envs": s["n_envs"]}
        per_setup[name]["tinker_update_path"] = sorted({r["update_path"] for r in rows["tinker"]})
        if name.startswith("sac"):
            per_setup[name]["tinker_products"] = native.gemm() or "python step"
        if name.startswith("dqn"):
            per_setup[name]["tinker_double_q"] = not args.dqn_plain_targets
    out = {
        **header("algos", args.quick,
                 machine(gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
                         extra={"torch_threads": args.threads}, load_key="load_avg_1min_at_end"),
                 "python " + " ".join(["benchmarks/algos.py", *sys.argv[1:]])),
        "figures": figures,
        "goals": goals,
        "setups": per_setup,
    }
    path = write_result(result_name, args.quick, out)
    png = _plot(curves_png, result_path(result_name, args.quick, ".png"))
    print(json.dumps(figures, indent=1))
    print(f"wrote {path} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
