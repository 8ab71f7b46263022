"""``tinker benchmark sim2real``: the whole sim-to-real protocol, variant by variant, with a table and a plot."""

from __future__ import annotations

import argparse
from typing import Any

from tinker_cli._args import compensation_arg

ORDER = 50

EPILOG = """\
protocol (per held-out dynamics variant, --runs times with different seeds):
  1. zero-shot: the randomization-trained policy, evaluated in simulation on the variant (tinker eval)
  2. online fine-tuning through the ROS 2 loop on that variant for --finetune-episodes episodes
     (the demo's graph: sim_robot with the variant, experience bridge -> learner -> gated bundles)
  3. the newest published bundle, evaluated again in simulation on the same variant and seeds
  with --latency-compensation auto, between 1 and 2 the pretrained policy is also evaluated compensated on the
  same seeds: the table's "fine-tuning's own change" is the after's difference from that, not from zero-shot
  tinker/ArmSort-v0: the shipped sorter learned by imitation (BC); stage 2 fine-tunes its RL prior
  (pretrained/arm_sort/rl_prior, made by tinker prior: SAC whose actor is the BC policy) with the expert's
  demonstrations sampled beside the live data (RLPD), its actor kept near them (SAC's td3bc_alpha).

--bundle runs another policy of the task through the same protocol, e.g. the camera reach policy
(pretrained/arm_reach_vision: its locator stays, the learner fine-tunes the actor behind it, each published
bundle keeps the locator), with --reward sensors: the learner's rewards from the success sensor (the target the
camera found, the measured joints; for the camera sorter pretrained/arm_sort_vision, the objects the camera sees in
their bins and the suction cup's vacuum state), never the simulator's; the simulator only scores.

run r (0-based) evaluates episode seeds --seed + r * --eval-episodes onwards and seeds the robot's loop with r.
A variant with a key that cannot act on the env and policy (sim/dynamics_check.py) is refused when named;
without --variants every shipped variant runs whose keys all act, and the others are listed with why.

output (in --out): sim2real.json, sim2real.md (table, one row per variant and run), sim2real.png, and one demo
run directory per variant and run.

examples:
  tinker benchmark sim2real                                  the shipped policy, every shipped variant that acts on it
  tinker benchmark sim2real --train                          retrain with configs/sac_arm_reach.yaml first
  tinker benchmark sim2real --variants laggy --finetune-episodes 10 --eval-episodes 20
  tinker benchmark sim2real --env tinker/ArmSort-v0 --variants far_latency_sort --runs 3 --eval-episodes 50
  tinker benchmark sim2real --env tinker/ArmSort-v0 --variants far_latency_sort --runs 5 --latency-compensation auto
  tinker benchmark sim2real --bundle pretrained/arm_reach_vision --reward sensors --variants far_latency_reach --runs 5
  tinker benchmark sim2real --bundle pretrained/arm_sort_vision --reward sensors \
      --variants far_latency_sort --runs 5 --latency-compensation auto
"""

ENVS = ("tinker/ArmReach-v0", "tinker/ArmSort-v0")
"""the arm tasks the protocol runs on (each with its shipped pretrained policy)"""


def register(sub: Any) -> None:
    p = sub.add_parser("benchmark", help="end-to-end protocols (sim2real: zero-shot, fine-tune, re-evaluate)",
                       description="Run a whole benchmark protocol across tinker's layers.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("protocol", choices=["sim2real"], help="which protocol to run")
    p.add_argument("--env", default=None, choices=ENVS,
                   help=f"the task (default: --bundle's own, as its manifest records it; else {ENVS[0]})")
    p.add_argument("--variants", nargs="*", default=None,
                   help="dynamics variant names in sim/config/dynamics or YAML paths (default: every shipped one "
                        "whose keys all act on the env and policy)")
    p.add_argument("--runs", type=int, default=1, help="repeat the protocol with different seeds (default 1)")
    p.add_argument("--seed", type=int, default=1000, help="first evaluation episode seed of run 0 (default 1000)")
    p.add_argument("--train", action="store_true",
                   help="train the policy with configs/sac_arm_reach.yaml first (default: the shipped pretrained one)")
    p.add_argument("--bundle", default=None,
                   help="the policy bundle to run (default: the task's shipped pretrained one); a camera bundle runs "
                        "with its estimate held, in the loop and in the evaluations (as tinker eval does by default)")
    p.add_argument("--checkpoint", default=None,
                   help="the checkpoint the learner fine-tunes (default: the task's shipped one: the reach policy's, "
                        "which also serves the vision bundle's actor; the sorter's RL prior)")
    p.add_argument("--reward", default="sim", choices=["sim", "sensors"],
                   help="the learner's rewards while fine-tuning: 'sim' (the simulator's true target, an oracle) "
                        "or 'sensors' (the success sensor; a vision bundle: the camera reach or the camera sorter); "
                        "the simulator scores either way")
    p.add_argument("--eval-episodes", type=int, default=50, help="simulation episodes per evaluation (default 50)")
    p.add_argument("--finetune-episodes", type=int, default=50, help="ROS-loop episodes of fine-tuning (default 50)")
    p.add_argument("--learner-set", nargs="*", default=[], metavar="NAME=VALUE",
                   help="the fine-tuning learner's LearnerConfig overrides, as tinker demo's (e.g. warmup=16 "
                        "batch_size=16 for a tiny budget)")
    p.add_argument("--latency-compensation", type=compensation_arg, default=0, metavar="PERIODS|auto",
                   help="the robot's command latency in control periods, compensated in the evaluations and the "
                        "fine-tuning loop (the launch YAML's latency_compensation; default 0: none). 'auto': "
                        "measured in each run from the zero-shot evaluation's first episodes (their commands and "
                        "joint states, tinker_core.loop.latency_estimate), then compensated in the fine-tuning "
                        "loop and the evaluation after it; the zero-shot evaluation runs uncompensated, and the "
                        "pretrained policy is scored compensated too, on the same episodes, before fine-tuning")
    p.add_argument("--out", default="runs/sim2real", help="output directory (default runs/sim2real)")
    p.set_defaults(func=run)


def env_for(env: str | None, bundle: str | None) -> str:
    """The task the protocol runs: ``--env``, else the bundle's own (its manifest's env_id), else ArmReach.
    `ConfigError` when ``--env`` names another task than the bundle's, or the bundle's is not one of `ENVS`."""
    from tinker.bundle_io import top_manifest
    from tinker_core.errors import ConfigError

    own = top_manifest(bundle).env_id if bundle else None
    if env and own and env != own:
        raise ConfigError(f"--env {env}, but --bundle {bundle} is a policy of {own}: leave --env out, or give a "
                          f"bundle of {env}")
    chosen = env or own or ENVS[0]
    if chosen not in ENVS:
        raise ConfigError(f"--bundle {bundle}: its task {chosen} is none the protocol runs ({', '.join(ENVS)})")
    return chosen


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


def select_variants(names: list[str] | None, env_id: str, manifest: Any, bundle: Any, repo: Any) \
        -> tuple[list[tuple[str, Any]], dict[str, str]]:
    """(name, path) of the variants to run and {name: why} of the shipped ones left out. Named variants must all
    act on ``env_id`` with the bundle (else `ConfigError`, before anything runs); without names, every shipped
    variant that acts whole."""
    from pathlib import Path

    from tinker_cli._compose import check_dynamics_for
    from tinker_core.errors import ConfigError

    policy = f"the policy {bundle}"
    if names:
        chosen = [(Path(n).stem, _variant_path(n, repo)) for n in names]
        for _, path in chosen:
            check_dynamics_for(manifest, env_id, path, policy)
        return chosen, {}
    chosen, skipped = [], {}
    for f in sorted((repo / "sim" / "config" / "dynamics").glob("*.yaml")):
        try:
            check_dynamics_for(manifest, env_id, f, policy)
        except ConfigError as e:
            skipped[f.stem] = "; ".join(line.strip() for line in str(e).splitlines()[1:-1])
            continue
        chosen.append((f.stem, f))
    return chosen, skipped


def _evaluate(bundle: Any, dynamics: Any, episodes: int, env_id: str = ENVS[0], seed: int = 1000,
              latency_compensation: int = 0, calibrate: bool = False) -> dict:
    """``episodes`` simulation episodes of ``bundle`` on ``dynamics``; a camera bundle (one with image_terms) is
    scored as the demo's loop runs it, its estimate held (``tinker eval``'s default, ``--estimate auto``);
    ``latency_compensation`` as `tinker eval --latency-compensation`. ``command_latency``: what the episodes'
    commands and joint states say the latency is; with ``calibrate``, from the first episodes only, until it
    stands (``command_latency_episodes`` of them)."""
    from tinker_cli._compose import bundle_modules, policy_env_for_bundle, wire_commanded
    from tinker_core.evaluate import evaluate
    from tinker_sim.latency_probe import CommandLatencyProbe

    mods = bundle_modules(bundle, latency_compensation=latency_compensation)
    env = policy_env_for_bundle(mods, env_id, dynamics=str(dynamics), latency_compensation=latency_compensation)
    wire_commanded(mods, env)
    env = probe = CommandLatencyProbe(env, until_known=calibrate)
    try:
        res = evaluate(env, mods.policy, episodes, seed=seed, control_period=float(env.unwrapped.control_period),
                       perception=mods.perception)
    finally:
        env.close()
    return {**res.to_dict(), "policy_version": mods.version, "seeds": [seed, seed + episodes - 1],
            "hold_estimate": mods.held, "latency_compensation": latency_compensation,
            "command_latency": probe.estimate().to_dict(), "command_latency_episodes": probe.episodes_fed}


def _rate(x: dict | None) -> str:
    """'92.0% [81–97]' of an evaluation (episodes; objects sorted in brackets after it on a sorting task)."""
    if x is None:
        return "—"
    s = f"{x['success_rate'] * 100:.1f}% [{x['ci_low'] * 100:.0f}–{x['ci_high'] * 100:.0f}]"
    if x.get("objects_sorted_rate") is not None:
        s += (f"; objects {x['objects_sorted_rate'] * 100:.1f}% "
              f"[{x['objects_ci_low'] * 100:.0f}–{x['objects_ci_high'] * 100:.0f}]")
    return s


def _plot(rows: list[dict], out: Any, env_id: str) -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(max(7.5, 1.6 * len(rows)), 4.8))
    x = np.arange(len(rows))
    candidates = (  # (row key, rate, CI low, CI high, label, colour); drawn where some row has it
        ("zero_shot", "success_rate", "ci_low", "ci_high", "zero-shot, episodes", "tab:red"),
        ("zero_shot", "objects_sorted_rate", "objects_ci_low", "objects_ci_high", "zero-shot, objects sorted", "tab:orange"),
        ("compensated", "success_rate", "ci_low", "ci_high", "compensated, not fine-tuned, episodes", "tab:blue"),
        ("compensated", "objects_sorted_rate", "objects_ci_low", "objects_ci_high",
         "compensated, not fine-tuned, objects sorted", "tab:cyan"),
        ("fine_tuned", "success_rate", "ci_low", "ci_high", "after fine-tuning, episodes", "tab:green"),
        ("fine_tuned", "objects_sorted_rate", "objects_ci_low", "objects_ci_high", "after fine-tuning, objects sorted",
         "tab:olive"))
    series = [c for c in candidates if any(r.get(c[0]) is not None and r[c[0]].get(c[1]) is not None for r in rows)]
    width = 0.8 / len(series)
    for j, (r_key, k, lo, hi, label, color) in enumerate(series):
        have = [i for i, r in enumerate(rows) if r.get(r_key) is not None and r[r_key].get(k) is not None]
        vals = np.array([rows[i][r_key][k] for i in have]) * 100
        # a Wilson bound at 0 or 100% can sit a rounding error inside the rate (100/100: 0.9999999999999999)
        err = np.maximum([vals - np.array([rows[i][r_key][lo] for i in have]) * 100,
                          np.array([rows[i][r_key][hi] for i in have]) * 100 - vals], 0.0)
        ax.bar(x[have] + (j - (len(series) - 1) / 2) * width, vals, width, yerr=err, color=color, capsize=3, label=label)
    ax.set_xticks(x, [f"{r['variant']} #{r['run']}" for r in rows], rotation=15)
    ax.set_ylabel("% (95% CI)")
    ax.set_ylim(0, 105)
    ax.set_title(f"tinker sim2real on {env_id}: zero-shot vs after online fine-tuning through ROS 2", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize=7)
    fig.tight_layout()
    path = out / "sim2real.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def loop_summary(rep: dict) -> dict:
    """What a row keeps of the fine-tuning loop's report (`tinker.demo.run_demo`); with ``fine_tune`` (why) where
    the learner made no update or published no version (every candidate refused by its gate), so that the unchanged
    policy is not scored as a fine-tuned one."""
    loop = {"published_version": rep["learner"].get("version") or 0,
            "ros_loop": {k: rep[k] for k in ("before", "finetune", "after")},
            "safety_interventions_in_loop": rep["safety_interventions"], "estops": rep["estops"],
            "unsafe_states_in_loop": sum(rep.get("unsafe_states", {}).values()),
            "by_version": rep.get("by_version", []),  # how each version did in the loop, by the simulator's score
            "learner_updates": rep["learner"].get("updates") or 0,
            "live_transitions": rep["learner"].get("ingested_total") or 0,
            "demonstrations": rep["learner"].get("demonstrations") or 0}
    if not loop["learner_updates"]:
        loop["fine_tune"] = (f"not fine-tuned: the learner made 0 updates on {loop['live_transitions']} live "
                             f"transitions (fewer than its warmup, or none arrived); the policy is the pretrained one")
    elif not loop["published_version"]:
        gate = rep["learner"].get("last_gate") or {}
        loop["fine_tune"] = (f"not fine-tuned: the learner made {loop['learner_updates']} updates and published no "
                             f"version (last gate: {gate.get('reason', 'never run')}); the policy is the pretrained one")
    return loop


def _finetune(args: argparse.Namespace, name: str, run_idx: int, dyn: Any, bundle: Any, checkpoint: Any, out: Any,
              seed: int, learner: dict, demonstrations: Any, compensation: int) -> tuple[dict | None, dict]:
    """Stages 2 and 3 for one variant and run: the demo's ROS loop fine-tunes (``learner``: LearnerConfig overrides),
    then the newest bundle is evaluated. A learner that made no update changed nothing: no "after" is scored (None),
    and the row says why."""
    from tinker.demo import DemoConfig, run_demo

    demo_out = out / f"finetune_{name}" / f"run{run_idx}"
    rep = run_demo(DemoConfig(bundle=str(bundle), checkpoint=str(checkpoint), dynamics=str(dyn), out=str(demo_out),
                              env_id=args.env, demonstrations=str(demonstrations) if demonstrations else None,
                              episodes_before=1, finetune_episodes=args.finetune_episodes, episodes_after=1,
                              seed=run_idx, reward=args.reward, learner=dict(learner),
                              latency_compensation=compensation),
                   progress=lambda s: print("   " + s) if s.startswith(("phase", "  final")) else None)
    loop = loop_summary(rep)
    published = loop["published_version"]
    if "fine_tune" in loop:
        print(f"== {name} run {run_idx}: {loop['fine_tune']}")
        return None, loop
    tuned_bundle = demo_out / "bundles" / f"v{published:06d}" if published else bundle
    print(f"== {name} run {run_idx}: evaluation after fine-tuning (bundle {tuned_bundle.name})")
    after = _evaluate(tuned_bundle, dyn, args.eval_episodes, args.env, seed, compensation)
    print(f"   success {after['success_rate'] * 100:.1f}%")
    return after, loop


def measured_compensation(before: dict) -> int:
    """The compensation a run goes on with under --latency-compensation auto: the latency its zero-shot episodes
    measured (0, and why, where they could not tell)."""
    est, n = before["command_latency"], before["command_latency_episodes"]
    if est["periods"] is None:
        print(f"   command latency not measured in {n} episodes ({est['why']}): the loop runs uncompensated")
        return 0
    print(f"   command latency measured from the first {n} episode(s)' commands and joint states: {est['periods']} "
          f"control periods (R² {est['fit']:.3f}, next best lag {est['runner_up']:.3f}); compensated from here on")
    return int(est["periods"])


def table(rows: list[dict], env_id: str) -> str:
    """The markdown table of a protocol's rows (one per variant and run). Where the loop compensates a latency the
    zero-shot evaluation did not (``--latency-compensation auto``), the pretrained policy is also scored compensated
    on the same episodes (``compensated``), and fine-tuning's own change is the after's difference from that."""
    lines = ["| variant | run (episode seeds) | zero-shot success | unsafe states / e-stops (zero-shot) "
             "| compensated, not fine-tuned (e-stops) | after fine-tuning | unsafe states / e-stops (after) "
             "| fine-tuning's own change | mean time to success (before → after) | bundle | learner updates "
             "| unsafe states / e-stops in the loop |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def t(x: dict | None) -> str:
        return "n/a" if x is None or x["mean_time_to_success_s"] is None else f"{x['mean_time_to_success_s']:.2f} s"

    for r in rows:
        b, a, c = r["zero_shot"], r["fine_tuned"], r.get("compensated")
        seeds = f"{r['run']} ({b['seeds'][0]}–{b['seeds'][1]})"
        if r.get("latency_compensation"):  # the fine-tuning loop and the evaluation after it
            seeds += f"; loop and after compensate {r['latency_compensation']} periods"
        comp = "= zero-shot" if c is None else f"{_rate(c)} ({c['safety_estops']})"
        if a is None:  # the loop ran and its learner made no update
            lines.append(f"| {r['variant']} | {seeds} | {_rate(b)} | {b['safety_violations']} / {b['safety_estops']} "
                         f"| {comp} | fine-tune: {r['fine_tune']} | — | — | {t(b)} | — | 0 "
                         f"| {r['unsafe_states_in_loop']} / {len(r['estops'])} |")
        else:
            lines.append(f"| {r['variant']} | {seeds} | {_rate(b)} | {b['safety_violations']} / {b['safety_estops']} "
                         f"| {comp} | {_rate(a)} | {a['safety_violations']} / {a['safety_estops']} | {own_change(c or b, a)} "
                         f"| {t(b)} → {t(a)} | v{r['published_version']} | {r['learner_updates']} "
                         f"| {r['unsafe_states_in_loop']} / {len(r['estops'])} |")
    return "\n".join(lines)


def own_change(base: dict, after: dict) -> str:
    """What fine-tuning changed over ``base``, the pretrained policy scored on the same episodes as the loop ran it:
    points of objects sorted (a sorting task) or of episodes, and e-stops."""
    key = "objects_sorted_rate" if after.get("objects_sorted_rate") is not None else "success_rate"
    what = "objects" if key == "objects_sorted_rate" else "episodes"
    return (f"{(after[key] - base[key]) * 100:+.1f} points of {what}, "
            f"{after['safety_estops'] - base['safety_estops']:+d} e-stops")


def run(args: argparse.Namespace) -> int:
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tinker_cli._compose import REPO, load_policy
    from tinker_deploy.pretrained import finetune_start, pretrained_dir
    from tinker_core.errors import ConfigError, TinkerError

    for k in ("runs", "eval_episodes"):
        if getattr(args, k) < 1:
            raise ConfigError(f"--{k.replace('_', '-')} must be >= 1, got {getattr(args, k)}")
    if args.bundle and not Path(args.bundle).exists():
        raise ConfigError(f"--bundle: {Path(args.bundle).resolve()} does not exist")
    args.env = env_for(args.env, args.bundle)
    if args.train and args.env != ENVS[0]:
        raise ConfigError(f"--train: the protocol retrains only the ArmReach policy (configs/sac_arm_reach.yaml); "
                          f"for {args.env} run 'tinker train' and 'tinker export' yourself")
    if args.train and (args.bundle or args.checkpoint):
        raise ConfigError("--train makes its own bundle and checkpoint; leave out --bundle and --checkpoint")
    from tinker_cli.demo import learner_overrides

    learner = learner_overrides(args.learner_set)  # a malformed one is refused now, not after the zero-shot stage
    out = Path(args.out).resolve()
    bundle = Path(args.bundle).resolve() if args.bundle else pretrained_dir(args.env) / "bundle"
    checkpoint, demonstrations = (Path(args.checkpoint).resolve(), None) if args.checkpoint else finetune_start(args.env)
    for what, path in {"--bundle": bundle, "--checkpoint": checkpoint}.items():
        if not path.exists():
            raise ConfigError(f"{what}: {path} does not exist")
    from tinker_deploy.hierarchy_runtime import is_hierarchy

    if is_hierarchy(bundle):
        raise ConfigError(f"--bundle {bundle}: a hierarchical policy (hierarchy.json); this protocol runs one-level "
                          f"bundles. Evaluate it on a variant with 'tinker eval {bundle} --dynamics VARIANT.yaml'")
    if args.reward == "sensors":  # refused now, with why, not after the zero-shot stage
        from tinker.reward_source import sensor_outcome

        sensor_outcome(str(bundle), args.env)
    variants, skipped = select_variants(args.variants, args.env, load_policy(bundle).manifest, bundle, REPO)
    for name, why in skipped.items():
        print(f"variant {name} left out: {why}")
    if not variants:
        raise ConfigError(f"no shipped variant acts on {args.env} with {bundle}; name one with --variants")
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    import tinker.demo  # noqa: F401  (the ROS package, only when the loop runs)
    out.mkdir(parents=True, exist_ok=True)
    if args.train:
        run_dir = out / "train"
        print(f"training with configs/sac_arm_reach.yaml -> {run_dir}")
        for cmd in ([sys.executable, "-m", "tinker_cli", "train", "--config", str(REPO / "configs" / "sac_arm_reach.yaml"),
                     "--out", str(run_dir)],
                    [sys.executable, "-m", "tinker_cli", "export", str(run_dir / "final"), "-o", str(out / "bundle")]):
            if subprocess.run(cmd).returncode != 0:
                raise TinkerError(f"step failed: {' '.join(cmd)}")
        bundle, checkpoint = out / "bundle", run_dir / "final"
    rows = []
    for name, dyn in variants:
        for r in range(args.runs):
            seed = args.seed + r * args.eval_episodes
            print(f"\n== {name} run {r}: zero-shot evaluation ({args.eval_episodes} episodes, seeds {seed}–"
                  f"{seed + args.eval_episodes - 1})")
            auto = args.latency_compensation == "auto"
            before = _evaluate(bundle, dyn, args.eval_episodes, args.env, seed, 0 if auto else args.latency_compensation,
                               calibrate=auto)
            print(f"   success {_rate(before)}")
            compensation = measured_compensation(before) if auto else args.latency_compensation
            row: dict[str, Any] = {"variant": name, "run": r, "dynamics": str(dyn), "zero_shot": before,
                                   "latency_compensation": compensation, "compensated": None}
            if compensation != before["latency_compensation"]:  # the baseline of what fine-tuning adds
                print(f"== {name} run {r}: the same episodes compensated ({compensation} periods), not fine-tuned")
                row["compensated"] = _evaluate(bundle, dyn, args.eval_episodes, args.env, seed, compensation)
                print(f"   success {_rate(row['compensated'])}")
            after, loop = _finetune(args, name, r, dyn, bundle, checkpoint, out, seed, learner, demonstrations,
                                    compensation)
            row.update(fine_tuned=after, **loop)
            rows.append(row)
    md = table(rows, args.env)
    # the results first: a figure that cannot be drawn must not lose an hour of runs
    (out / "sim2real.json").write_text(json.dumps({"env": args.env, "bundle": str(bundle), "rows": rows,
                                                   "left_out": skipped, "settings": vars(args) | {"func": None}},
                                                  indent=1, default=str))
    source = "the success sensor" if args.reward == "sensors" else "the simulator"
    (out / "sim2real.md").write_text(f"{args.env}, policy {bundle}, fine-tuned on {source}'s rewards\n\n" + md
                                     + "\n\n![sim2real](sim2real.png)\n")
    png = _plot(rows, out, args.env)
    print("\n" + md + f"\n\nwrote {out / 'sim2real.md'}, {out / 'sim2real.json'}, {png}")
    return 0
