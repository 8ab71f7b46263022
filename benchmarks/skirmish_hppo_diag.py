"""The synchronous HPPO reference for benchmarks/skirmish_impala_diag.py: HPPO on tinker/Skirmish-v0 (the
benchmark's settings, seed 0), printing every 10th rollout the high level's entropy, the skills it sampled, the
share of the rollout's states where each skill is the most probable, its value loss, and the training win rate
(last 50). It prints only; docs/hierarchy/README.md quotes its output.

    python benchmarks/skirmish_hppo_diag.py STEPS
"""

from __future__ import annotations

import sys
import time

import numpy as np
import torch

from _common import ROOT

sys.path.insert(0, str(ROOT))

import tinker_sim  # noqa: E402,F401  (registers tinker/Skirmish-v0 and the skirmish skills)
from tinker_core.algos import HPPO, HPPOConfig  # noqa: E402
from tinker_core.curriculum import Curriculum, CurriculumConfig  # noqa: E402


def main(steps: int) -> None:
    algo = HPPO("tinker/Skirmish-v0", HPPOConfig(seed=0, skills=["skirmish"], max_duration=5, gamma=0.99, n_envs=4,
                                                 n_steps=250, log_interval=10**9))
    cur = Curriculum(CurriculumConfig(param="num_opponents", levels=[5, 10, 15, 20], promote_at=0.8, window=20))
    cur.bind(algo)
    wins: list[bool] = []

    def on_update(a: HPPO, info: dict) -> None:
        wins.extend(bool(ep.success) for ep in info.get("episodes", ()))
        cur(a, info)
        if a.num_updates % 10:
            return
        m = a._metrics  # the last update's losses (no public accessor: this is a diagnostic)
        ds = [d for dd in a.last_decisions for d in dd]
        freq = np.bincount([d.option for d in ds], minlength=4) / len(ds)
        r = np.array([d.reward for d in ds])
        with torch.no_grad():
            p = torch.softmax(a.high.pi.logits(torch.as_tensor(np.stack([d.obs for d in ds]))), -1)
        greedy = np.bincount(p.argmax(-1).numpy(), minlength=4) / len(ds)
        print(f"u{a.num_updates} L{cur.value:.0f} ent {m.get('high_entropy', float('nan')):.3f} "
              f"freq {freq.round(3)} argmax {greedy.round(3)} vl {m.get('high_value_loss', 0):.2f} "
              f"R {r.mean():.2f}±{r.std():.2f} wins50 {np.mean(wins[-50:]):.2f}", flush=True)

    t0 = time.time()
    algo.learn(steps, progress=False, callback=on_update)
    print("wall", time.time() - t0, cur.history)


if __name__ == "__main__":
    main(int(sys.argv[1]))
