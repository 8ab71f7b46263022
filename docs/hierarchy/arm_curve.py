"""Draw arm_curve.png: training success of every ArmSort run in arm_runs/ (each run's own metrics.jsonl, copied
there) against env steps, each run's curriculum promotions marked. ``python docs/hierarchy/arm_curve.py``."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
RUNS = {
    "hppo_run7_shipped": ("HPPO, free release spot, 400k (run 7, shipped; run 6 is its first 200k)", "tab:red"),
    "hppo_run5": ("HPPO, final skills (run 5, shipped until 2026-12-05)", "tab:green"),
    "hppo_run4": ("HPPO, skills v2 (run 4)", "tab:cyan"),
    "hppo_run3_normalized": ("HPPO, skills v1 (run 3)", "tab:olive"),
    "hppo_run2_remaining": ("HPPO, no reward normalization (run 2)", "tab:gray"),
    "hppo_run1_per_step": ("HPPO, +2 per sorted object per step (run 1, stopped)", "tab:brown"),
    "ppo_flat": ("flat PPO (200k)", "tab:blue"),
    "ppo_flat_400k": ("flat PPO, 400k (2026-12-05)", "tab:purple"),
}


def main() -> None:
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, (label, color) in RUNS.items():
        rows = [json.loads(line) for line in (HERE / "arm_runs" / f"{name}.jsonl").read_text().splitlines() if line]
        pts = [(r["step"], r["rollout/success_rate"]) for r in rows if "rollout/success_rate" in r]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, label=label)
        for r in rows:
            if "curriculum/value" in r:
                ax.axvline(r["step"], color=color, ls=":", lw=1)
                ax.text(r["step"], 1.01, f"{int(r['curriculum/value'])}", color=color, ha="center", va="bottom",
                        fontsize=8)
    ax.set_xlabel("env steps")
    ax.set_ylabel("training success rate (recent episodes, at the current level)")
    ax.set_ylim(0, 1.08)
    ax.set_title("tinker/ArmSort-v0, curriculum 1 -> 2 -> 3 objects (dotted: promotion to the number above it)",
                 fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(HERE / "arm_curve.png", dpi=110)


if __name__ == "__main__":
    main()
