"""The synchronous HPPO reference for benchmarks/skirmish_impala_diag.py: HPPO on tinker/Skirmish-v0 (the benchmark's
settings, seed 0), printing every 10th rollout the high level's entropy, the skills it sampled, the share of the
rollout's states where each skill is the most probable, its value loss, and the training win rate (last 50).

    python benchmarks/skirmish_hppo_diag.py STEPS
"""
import sys, time, numpy as np, torch
import tinker_sim  # noqa
from tinker_core.algos import HPPO, HPPOConfig
from tinker_core.curriculum import Curriculum, CurriculumConfig
steps = int(sys.argv[1])
algo = HPPO("tinker/Skirmish-v0", HPPOConfig(seed=0, skills=["skirmish"], max_duration=5, gamma=0.99, n_envs=4, n_steps=250, log_interval=10**9))
cur = Curriculum(CurriculumConfig(param="num_opponents", levels=[5, 10, 15, 20], promote_at=0.8, window=20)); cur.bind(algo)
wins = []
def cb(a, info):
    for ep in info.get("episodes", ()):
        wins.append(bool(ep.success))
    cur(a, info)
    if a.num_updates % 10 == 0:
        m = a._metrics
        ds = [d for dd in a.last_decisions for d in dd]
        freq = np.bincount([d.option for d in ds], minlength=4) / len(ds)
        R = np.array([d.reward for d in ds])
        with torch.no_grad():
            p = torch.softmax(a.high.pi.logits(torch.as_tensor(np.stack([d.obs for d in ds]))), -1)
        am = np.bincount(p.argmax(-1).numpy(), minlength=4) / len(ds)
        print(f"u{a.num_updates} L{cur.value:.0f} ent {m.get('high_entropy', float('nan')):.3f} freq {freq.round(3)} argmax {am.round(3)} vl {m.get('high_value_loss', 0):.2f} R {R.mean():.2f}±{R.std():.2f} wins50 {np.mean(wins[-50:]):.2f}", flush=True)
t0 = time.time(); algo.learn(steps, progress=False, callback=cb); print("wall", time.time() - t0, cur.history)
