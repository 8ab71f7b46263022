"""Why the skirmish high level on IMPALA ended on one skill: an instrumented IMPALA run over OptionEnv (2 actor
threads x 4 envs, the benchmark's ``impala`` settings unless overridden), recording for every learner update the
skills sampled in its batch, the share of the batch's states where each skill is the most probable (the
deterministic policy's choice), the policy's entropy on those states before the update, the value loss, mean rho,
lag and gradient norm.

    python benchmarks/skirmish_impala_diag.py STEPS TAG ['{"policy_loss": "clip", "n_epochs": 10, ...}']

Merges ``{TAG: {...}}`` into benchmarks/results/skirmish_impala_diag.json and prints every fifth update.
docs/hierarchy/README.md ("Why IMPALA ended on one skill") reads it.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import torch

from _common import RESULTS, ROOT, git_state

sys.path.insert(0, str(ROOT))

import tinker_sim  # noqa: E402,F401  (registers tinker/Skirmish-v0 and the skirmish skills)
from tinker_core.algos import IMPALA, IMPALAConfig  # noqa: E402
from tinker_core.curriculum import Curriculum, CurriculumConfig  # noqa: E402
from tinker_core.envs import EnvConfig  # noqa: E402
from tinker_core.impala.trajectory import TrajectoryBatch  # noqa: E402


def main() -> None:
    steps, tag = int(sys.argv[1]), sys.argv[2]
    extra = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    env = EnvConfig("tinker/Skirmish-v0", {}, ["tinker_sim"], [{"tinker_core.hierarchy.option_env.OptionEnv":
                                                                 {"skills": ["skirmish"], "max_duration": 5, "gamma": 0.99}}])
    kw = dict(seed=0, gamma=0.99 ** 5, num_actors=2, envs_per_actor=4, unroll_length=20, batch_trajectories=2,
              queue_size=4, mode="async", backend="local", learning_rate=5e-4, ent_coef=0.01, torch_threads=1,
              log_interval=10**9, policy_loss="vtrace")
    kw.update(extra)
    algo = IMPALA(env, IMPALAConfig(**kw))
    cur = Curriculum(CurriculumConfig(param="num_opponents", levels=[5, 10, 15, 20], promote_at=0.8, window=20))
    cur.bind(algo)
    log: list[dict] = []
    update = algo.update_from_trajectories

    def instrumented(trajs):
        b = TrajectoryBatch.of(trajs)
        acts = b.actions.reshape(-1)
        with torch.no_grad():
            obs = algo._obs_to_tensor(b.obs.reshape(-1, b.obs.shape[-1]))
            probs = torch.softmax(algo.pi.logits(algo.perception(obs)), -1)
            ent = float(-(probs * probs.clamp_min(1e-12).log()).sum(-1).mean())
            greedy = np.bincount(probs.argmax(-1).numpy(), minlength=4) / acts.size
            v = algo.vf(algo.perception(obs)).reshape(-1)
        m = update(trajs)
        m = {k: v for k, v in m.items() if not k.startswith(("action_frac_", "greedy_frac_"))}
        m.update(freq=(np.bincount(acts, minlength=4) / acts.size).round(3).tolist(), ent_pre=ent,
                 argmax=greedy.round(3).tolist(), rew_mean=float(b.rewards.mean()), rew_std=float(b.rewards.std()),
                 v_mean=float(v.mean()), level=float(cur.value), n=algo.num_updates)
        log.append(m)
        return m

    algo.update_from_trajectories = instrumented
    wins: list[bool] = []

    def callback(a, info):
        wins.extend(bool(ep.success) for ep in info.get("episodes", ()))
        cur(a, info)
        return False if a.num_timesteps * 5 >= steps else None

    t0 = time.time()
    algo.learn(10**9, progress=False, callback=callback)
    wall = time.time() - t0
    algo.close()
    for m in log[::5]:
        print(f"u{m['n']:4d} L{m['level']:.0f} ent {m['ent_pre']:.3f} sampled {m['freq']} greedy {m['argmax']} "
              f"vl {m['value_loss']:.2f} rho {m['rho_mean']:.3f} gn {m['grad_norm']:.1f}")
    print("wall", round(wall), "updates", algo.num_updates, "training wins, last 50", np.mean(wins[-50:]))
    path = RESULTS / "skirmish_impala_diag.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    old[tag] = {"settings": {k: v for k, v in kw.items() if k != "log_interval"}, "decisions": steps // 5,
                "commit": git_state()[0], "wall_s": round(wall), "updates": int(algo.num_updates),
                "training_wins_last50": float(np.mean(wins[-50:])), "promotions": cur.history,
                "keys": "freq: skills sampled in the batch (attack_nearest, focus_weakest, retreat, regroup); argmax: "
                        "share of the batch's states where each is the most probable; ent_pre: entropy before the update",
                "per_update": log}
    path.write_text(json.dumps(old, indent=1) + "\n")


if __name__ == "__main__":
    main()
