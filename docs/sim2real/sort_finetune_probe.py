"""In-process probe of the sorter's RL fine-tuning (no ROS): the RL prior (``tinker prior``) fine-tuned online on a
dynamics variant as the learner does it (SAC's ``train_on_batch``, half demonstrations and half live data, the
demonstration rows marked), then scored before and after on the same episode seeds with the SafetyWrapper in the
loop. It measures the algorithm alone, fast; ``tinker benchmark sim2real --env tinker/ArmSort-v0`` measures it
through ROS 2.

    python docs/sim2real/sort_finetune_probe.py --prior pretrained/arm_sort/rl_prior --out runs/sort_probe \
        [--episodes 50] [--eval-episodes 50] [--utd 2] [--td3bc-alpha 0.005] [--latency-compensation 4] [--seed 0]

Writes OUT/probe.json: the settings, before and after (episodes fully sorted, objects sorted, e-stops, unsafe
states), and the objects sorted in each fine-tuning episode.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def compensator(steps: int):
    """``(obs, env) -> the policy's input``: the observation at the pose the newest command in flight brings the arm
    to (`tinker_core.loop.latency_compensation`, as the perception node and ``tinker eval`` rewrite it), or as it is
    with ``steps`` 0. The state sorter's bundle manifest gives the terms and the action chain."""
    from tinker.bundle_io import top_manifest
    from tinker_core.loop.latency_compensation import LatencyCompensation

    if not steps:
        return lambda obs, env: obs
    comp = LatencyCompensation.for_manifest(top_manifest(ROOT / "pretrained/arm_sort/bundle"), steps)
    return lambda obs, env: comp(np.asarray(obs, np.float32), env.unwrapped.commanded_target)


def score(algo, dynamics: str, episodes: int, seed: int, compensation: int = 0) -> dict:
    from tinker_cli._compose import make_env
    from tinker_core.evaluate import evaluate

    env = make_env("tinker/ArmSort-v0", dynamics=dynamics, latency_compensation=compensation)
    see = compensator(compensation)
    try:
        res = evaluate(env, lambda o: algo.predict(see(o, env), deterministic=True), episodes, seed=seed)
    finally:
        env.close()
    d = res.to_dict()
    return {k: d.get(k) for k in ("success_rate", "ci_low", "ci_high", "objects_sorted_rate", "objects_ci_low",
                                  "objects_ci_high", "safety_estops", "safety_violations")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prior", default=str(ROOT / "pretrained/arm_sort/rl_prior"))
    ap.add_argument("--dynamics", default=str(ROOT / "sim/config/dynamics/far_latency_sort.yaml"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--eval-episodes", type=int, default=50)
    ap.add_argument("--eval-seed", type=int, default=1000)
    ap.add_argument("--utd", type=int, default=2, help="updates per live transition")
    ap.add_argument("--warmup", type=int, default=128, help="live transitions before the first update")
    ap.add_argument("--td3bc-alpha", type=float, default=None, help="default: the prior's")
    ap.add_argument("--latency-compensation", type=int, default=0,
                    help="control periods of command latency the policy's input compensates, in fine-tuning and both "
                         "scores (sim.arm_env's latency_compensation; 0: off)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    import tinker_sim  # noqa: F401
    from tinker_cli._compose import make_env
    from tinker_core.algos import load_algorithm
    from tinker_core.learner import MixedReplay
    from tinker_core.replay import StorageConfig
    from tinker_core.transition import Transition

    torch.manual_seed(args.seed)
    sac = load_algorithm(Path(args.prior, "checkpoint"), device="cpu")
    if args.td3bc_alpha is not None:
        sac.config.td3bc_alpha = args.td3bc_alpha
    mix = MixedReplay(200_000, 100_000, real_fraction=0.5, prioritized=False, storage=StorageConfig(), seed=args.seed)
    n_demo = mix.load("sim", Path(args.prior, "demonstrations"), seed=args.seed)
    t0 = time.monotonic()
    before = score(sac, args.dynamics, args.eval_episodes, args.eval_seed, args.latency_compensation)
    print(f"before: {before}", flush=True)
    env = make_env("tinker/ArmSort-v0", dynamics=args.dynamics, seed=args.seed,
                   latency_compensation=args.latency_compensation)
    see = compensator(args.latency_compensation)
    sorted_per_episode, updates, live = [], 0, 0
    try:
        for ep in range(args.episodes):
            obs, _ = env.reset(seed=5000 + 100 * args.seed + ep)
            obs = see(obs, env)
            while True:
                action = sac.predict(obs, deterministic=False)
                nxt, r, term, trunc, info = env.step(action)
                nxt = see(nxt, env)
                mix.add(Transition(obs, np.asarray(action, np.float32), float(r), bool(term), bool(trunc),
                                   {"source": "real"}, nxt))
                live += 1
                obs = nxt
                if live >= args.warmup:
                    for _ in range(args.utd):
                        batch, _, _ = mix.sample(256)
                        sac.train_on_batch(batch, demo_mask=mix.demo_mask(mix.last_split, ("sim", "intervention")))
                        updates += 1
                if term or trunc:
                    break
            sorted_per_episode.append(int(info.get("sorted", 0)))
            if ep % 10 == 9:
                print(f"episode {ep + 1}: objects sorted in the last 10 {sorted_per_episode[-10:]}, {updates} updates, "
                      f"{time.monotonic() - t0:.0f} s", flush=True)
    finally:
        env.close()
    after = score(sac, args.dynamics, args.eval_episodes, args.eval_seed, args.latency_compensation)
    print(f"after: {after}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"settings": {**vars(args), "td3bc_alpha": sac.config.td3bc_alpha}, "demonstrations": n_demo,
              "before": before, "after": after, "updates": updates, "live_transitions": live,
              "objects_sorted_per_finetune_episode": sorted_per_episode, "wall_s": round(time.monotonic() - t0, 1)}
    (out / "probe.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'probe.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
