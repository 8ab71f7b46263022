"""SAC on a Dict observation env: tinker's steps/s with the Dict as the env gives it, the same env
flattened by gymnasium's ``FlattenObservation`` (the vector floor), with HER, and Stable-Baselines3
on the same three, in one run, alternating.

The env is ``tinker/PointGoal-v0`` (`tinker_sim.goal_env`: a numpy point mass, microseconds a step, so the
figures are the learner's cost). Both libraries use SB3's SAC defaults (net [256, 256], batch 256,
buffer 1e6, one gradient step per env step), ``learning_starts=100``, torch on one thread; HER:
``n_sampled_goal=4``, ``future`` (SB3: ``HerReplayBuffer``, same kwargs). Steps/s counts every env
step of ``learn`` (with its updates), after a short warm-up run of each.

    python benchmarks/dict_obs.py            # 3 repetitions of 1500 steps each (900 of them with updates)
    python benchmarks/dict_obs.py --quick    # 1 repetition of 800 steps
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from _common import ROOT, arg_parser, git_state, header, machine, write_result

sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402

import tinker_sim  # noqa: E402,F401  (registers tinker/PointGoal-v0)
from tinker_core.algos import SAC, SACConfig  # noqa: E402

ENV = "tinker/PointGoal-v0"
HER = {"n_sampled_goal": 4, "goal_selection_strategy": "future"}
HAS_HER = "her" in SACConfig.__dataclass_fields__  # False on commits before HER (for the "before" figure)


def _make(kind: str):
    return (lambda: gym.wrappers.FlattenObservation(gym.make(ENV))) if kind == "flat" else (lambda: gym.make(ENV))


def tinker_run(kind: str, steps: int, seed: int) -> float:
    extra = {"her": HER} if kind == "her" else {}
    algo = SAC(_make(kind), SACConfig(learning_starts=100, seed=seed, log_interval=10**9, **extra))
    t = time.perf_counter()
    algo.learn(steps, progress=False, tensorboard=False)
    return steps / (time.perf_counter() - t)


def sb3_run(kind: str, steps: int, seed: int) -> float:
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3 import HerReplayBuffer

    env = _make(kind)()
    kw = dict(replay_buffer_class=HerReplayBuffer, replay_buffer_kwargs=HER) if kind == "her" else {}
    policy = "MlpPolicy" if kind == "flat" else "MultiInputPolicy"
    algo = SB3SAC(policy, env, learning_starts=100, seed=seed, device="cpu", verbose=0, **kw)
    t = time.perf_counter()
    algo.learn(steps)
    return steps / (time.perf_counter() - t)


def main() -> None:
    ap = arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--no-sb3", action="store_true", help="tinker only (for a run on a commit before HER: no "
                    "figures against SB3)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    info = machine(("torch", "stable_baselines3"), load_key="load_avg_start")
    reps, steps = (1, 800) if args.quick else (3, 1500)
    kinds = ["dict", "flat"] + (["her"] if HAS_HER else [])
    libs = {"tinker": tinker_run} | ({} if args.no_sb3 else {"sb3": sb3_run})
    for lib, run in libs.items():  # warm-up (the compiled step's first load, imports)
        for kind in kinds:
            run(kind, 300, 99)
    rates: dict[str, list[float]] = {f"{lib}_{kind}": [] for lib in libs for kind in kinds}
    for rep in range(reps):
        for kind in kinds:
            for lib, run in libs.items():
                r = run(kind, steps, rep)
                rates[f"{lib}_{kind}"].append(r)
                print(f"rep {rep} {lib:6s} {kind:4s} {r:8.1f} steps/s", flush=True)
    med = {k: float(np.median(v)) for k, v in rates.items()}
    figures = {f"{k}_steps_per_s": round(v, 1) for k, v in med.items()}
    figures.update({f"{k}_steps_per_s_min": round(min(v), 1) for k, v in rates.items()})
    figures.update({f"{k}_steps_per_s_max": round(max(v), 1) for k, v in rates.items()})
    figures["tinker_dict_vs_flat_ratio"] = round(med["tinker_dict"] / med["tinker_flat"], 3)
    if HAS_HER:
        figures["tinker_her_vs_flat_ratio"] = round(med["tinker_her"] / med["tinker_flat"], 3)
    if "sb3" in libs:
        for kind in kinds:
            figures[f"{kind}_ratio_vs_sb3"] = round(med[f"tinker_{kind}"] / med[f"sb3_{kind}"], 3)
    rev, dirty = git_state()
    command = " ".join(["python benchmarks/dict_obs.py", *sys.argv[1:]])
    result = {**header("dict_obs", args.quick, info, command), "commit": rev, "dirty": dirty, "figures": figures,
              "goals": {"tinker_dict_vs_flat_ratio": ">= 0.8 (Dict obs on the vector fast path)",
                        "dict_ratio_vs_sb3": ">= 1.5", "her_ratio_vs_sb3": ">= 1.5"}}
    print(write_result("dict_obs", args.quick, result))
    print(figures)


if __name__ == "__main__":
    main()
