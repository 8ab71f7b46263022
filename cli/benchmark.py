"""``tinker benchmark sim2real``: the whole sim-to-real protocol, variant by variant, with a table and a plot."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 50

EPILOG = """\
protocol (per held-out dynamics variant):
  1. zero-shot: the randomization-trained policy, evaluated in simulation on the variant (tinker eval)
  2. online fine-tuning through the ROS 2 loop on that variant for --finetune-episodes episodes
     (the demo's graph: sim_robot with the variant, experience bridge -> learner -> gated bundles)
  3. the newest published bundle, evaluated again in simulation on the same variant and seeds

output (in --out): sim2real.json, sim2real.md (table), sim2real.png (before/after per variant),
and one demo run directory per variant.

examples:
  tinker benchmark sim2real                                  the shipped policy, every shipped variant
  tinker benchmark sim2real --train                          retrain with configs/sac_arm_reach.yaml first
  tinker benchmark sim2real --variants laggy --finetune-episodes 10 --eval-episodes 20
"""


def register(sub: Any) -> None:
    p = sub.add_parser("benchmark", help="end-to-end protocols (sim2real: zero-shot, fine-tune, re-evaluate)",
                       description="Run a whole benchmark protocol across tinker's layers.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("protocol", choices=["sim2real"], help="which protocol to run")
    p.add_argument("--variants", nargs="*", default=None,
                   help="dynamics variant names in sim/config/dynamics or YAML paths (default: all shipped)")
    p.add_argument("--train", action="store_true",
                   help="train the policy with configs/sac_arm_reach.yaml first (default: the shipped pretrained one)")
    p.add_argument("--eval-episodes", type=int, default=50, help="simulation episodes per evaluation (default 50)")
    p.add_argument("--finetune-episodes", type=int, default=50, help="ROS-loop episodes of fine-tuning (default 50)")
    p.add_argument("--out", default="runs/sim2real", help="output directory (default runs/sim2real)")
    p.set_defaults(func=run)


def _variant_path(name: str, repo: Any) -> Any:
    from pathlib import Path

    from tinker_core.errors import ConfigError

    p = Path(name)
    if p.suffix in (".yaml", ".yml"):
        if not p.is_file():
            raise ConfigError(f"--variants: {p} does not exist")
        return p
    q = repo / "sim" / "config" / "dynamics" / f"{name}.yaml"
    if not q.is_file():
        known = sorted(f.stem for f in (repo / "sim" / "config" / "dynamics").glob("*.yaml"))
        raise ConfigError(f"--variants: no variant {name!r}; shipped: {known}")
    return q


def _evaluate(bundle: Any, dynamics: Any, episodes: int) -> dict:
    from tinker_cli._compose import load_policy, policy_env_for_bundle
    from tinker_core.evaluate import evaluate

    policy = load_policy(bundle)
    env = policy_env_for_bundle(policy, "tinker/ArmReach-v0", dynamics=str(dynamics))
    try:
        res = evaluate(env, policy, episodes, seed=1000, control_period=float(env.unwrapped.control_period))
    finally:
        env.close()
    return {**res.to_dict(), "policy_version": policy.version}


def _plot(rows: list[dict], out: Any) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows)), 4))
    x = np.arange(len(rows))
    for off, key, color in ((-0.2, "zero_shot", "tab:red"), (0.2, "fine_tuned", "tab:green")):
        vals = [r[key]["success_rate"] * 100 for r in rows]
        err = [[(r[key]["success_rate"] - r[key]["ci_low"]) * 100 for r in rows],
               [(r[key]["ci_high"] - r[key]["success_rate"]) * 100 for r in rows]]
        ax.bar(x + off, vals, 0.4, yerr=err, color=color, capsize=3, label=key.replace("_", " "))
    ax.set_xticks(x, [r["variant"] for r in rows], rotation=15)
    ax.set_ylabel("success % (95% CI)")
    ax.set_ylim(0, 105)
    ax.set_title("tinker sim2real: zero-shot vs after online fine-tuning through ROS 2")
    ax.legend(loc="lower right")
    fig.tight_layout()
    path = out / "sim2real.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(args: argparse.Namespace) -> int:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tinker_cli._compose import REPO
    from tinker_deploy.pretrained import pretrained_dir
    from tinker_core.errors import TinkerError

    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    from tinker.demo import DemoConfig, run_demo

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    names = args.variants or sorted(f.stem for f in (REPO / "sim" / "config" / "dynamics").glob("*.yaml"))
    variants = [(Path(n).stem, _variant_path(n, REPO)) for n in names]
    if args.train:
        run_dir = out / "train"
        print(f"training with configs/sac_arm_reach.yaml -> {run_dir}")
        for cmd in ([sys.executable, "-m", "tinker_cli", "train", "--config", str(REPO / "configs" / "sac_arm_reach.yaml"),
                     "--out", str(run_dir)],
                    [sys.executable, "-m", "tinker_cli", "export", str(run_dir / "final"), "-o", str(out / "bundle")]):
            if subprocess.run(cmd).returncode != 0:
                raise TinkerError(f"step failed: {' '.join(cmd)}")
        bundle, checkpoint = out / "bundle", run_dir / "final"
    else:
        pre = pretrained_dir("tinker/ArmReach-v0")
        bundle, checkpoint = pre / "bundle", pre / "checkpoint"
    rows = []
    for name, dyn in variants:
        print(f"\n== {name}: zero-shot evaluation ({args.eval_episodes} episodes)")
        before = _evaluate(bundle, dyn, args.eval_episodes)
        print(f"   success {before['success_rate'] * 100:.1f}%")
        demo_out = out / f"finetune_{name}"
        rep = run_demo(DemoConfig(bundle=str(bundle), checkpoint=str(checkpoint), dynamics=str(dyn), out=str(demo_out),
                                  episodes_before=1, finetune_episodes=args.finetune_episodes, episodes_after=1),
                       progress=lambda s: print("   " + s) if s.startswith(("phase", "  final")) else None)
        published = rep["learner"].get("version") or 0
        tuned_bundle = demo_out / "bundles" / f"v{published:06d}" if published else bundle
        print(f"== {name}: evaluation after fine-tuning (bundle {tuned_bundle.name})")
        after = _evaluate(tuned_bundle, dyn, args.eval_episodes)
        print(f"   success {after['success_rate'] * 100:.1f}%")
        rows.append({"variant": name, "dynamics": str(dyn), "zero_shot": before, "fine_tuned": after,
                     "published_version": published, "ros_loop": {k: rep[k] for k in ("before", "finetune", "after")},
                     "safety_interventions_in_loop": rep["safety_interventions"], "estops": rep["estops"],
                     "unsafe_states_in_loop": sum(rep.get("unsafe_states", {}).values()),
                     "learner_updates": rep["learner"].get("updates") or 0})
    lines = ["| variant | zero-shot success | after fine-tuning | mean time to success (before → after) | bundle "
             "| learner updates | unsafe states / e-stops in the loop |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        b, a = r["zero_shot"], r["fine_tuned"]

        def t(x: dict) -> str:
            return "n/a" if x["mean_time_to_success_s"] is None else f"{x['mean_time_to_success_s']:.2f} s"

        lines.append(f"| {r['variant']} | {b['success_rate'] * 100:.1f}% [{b['ci_low'] * 100:.0f}–{b['ci_high'] * 100:.0f}] "
                     f"| {a['success_rate'] * 100:.1f}% [{a['ci_low'] * 100:.0f}–{a['ci_high'] * 100:.0f}] "
                     f"| {t(b)} → {t(a)} | v{r['published_version']} | {r['learner_updates']} "
                     f"| {r['unsafe_states_in_loop']} / {len(r['estops'])} |")
    table = "\n".join(lines)
    png = _plot(rows, out)
    (out / "sim2real.json").write_text(json.dumps({"rows": rows, "settings": vars(args) | {"func": None}},
                                                  indent=1, default=str))
    (out / "sim2real.md").write_text(table + f"\n\n![sim2real]({png.name})\n")
    print("\n" + table + f"\n\nwrote {out / 'sim2real.md'}, {out / 'sim2real.json'}, {png}")
    return 0
