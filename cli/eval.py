"""``tinker eval``: success rate of a policy bundle on a fixed dynamics variant, with a confidence interval."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tinker_cli._args import compensation_arg
from tinker_core.loop.held_estimate import CALIBRATION_DEADBAND_M, CALIBRATION_DEADBAND_RANGE_M, ESTIMATE_MODES

ORDER = 40

EPILOG = """\
dynamics files (YAML, keys as in sim/config/nominal.yaml; missing keys keep their nominal value):
  the arm, every task: mass_scale, joint_damping_scale, actuator_gain, action_latency_steps, obs_noise_std
  the camera, a policy with an image only: camera_shift_m, camera_tilt_deg, camera_fov_delta_deg,
    image_noise_std, light_intensity, light_azimuth_deg
  ArmSort only: friction, object_mass_scale, object_size_scale; ArmReach only, a state policy:
    target_bias_{x,y,z}_m
  a key that cannot act on the env and policy is refused, with why (sim/dynamics_check.py)
  shipped variants: sim/config/dynamics/*.yaml (docs/sim2real/variants.md: which acts on which policy)

any gymnasium env: a bundle or checkpoint trained on another env is run on the env it records (its id,
imports and wrappers), without the SafetyWrapper (it guards the arm); --env names another id.

examples:
  tinker eval                                          shipped ArmReach policy, nominal dynamics
  tinker eval runs/mcc/final --episodes 20             a checkpoint, on its recorded (wrapped) env
  tinker eval --dynamics sim/config/dynamics/heavy_arm.yaml --episodes 100
  tinker eval runs/reach/bundle --env tinker/ArmReach-v0 --json | tail -1 | jq .success_rate
  tinker eval --env tinker/ArmSort-v0 --episodes 100 --json | tail -1 | jq .objects_sorted_rate
  tinker eval --episodes 20 --plot runs/eval/nominal.png
  tinker eval --dynamics sim/config/dynamics/far_latency_reach.yaml --safety-config my_robot_safety.yaml
  tinker eval sorter --episodes 50       an exported hierarchical policy (hierarchy.json), on its recorded env

the figure (--plot, default runs/eval/eval.png; its path is printed and is "plot" in --json): success and
return per episode with the policy version, the SafetyWrapper's interventions per episode (clipped,
rate-limited, workspace, held, e-stop), and a histogram of the time per step of policy inference plus the
SafetyWrapper, measured in process (the physics step is not counted). The demo's report draws the same.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("eval", help="evaluate a policy bundle in simulation (success rate with 95%% CI)",
                       description="Run a policy bundle (ONNX, through onnxruntime, as deployed) on a simulated "
                                   "task with a fixed dynamics variant and the SafetyWrapper in the loop; print the "
                                   "success rate with a 95% Wilson interval, the mean time to success and the "
                                   "number of safety interventions; on a sorting task also the objects in the "
                                   "right bin / objects (--json key objects_sorted_rate).",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("policy", nargs="?", help="bundle or checkpoint directory (default: the shipped pretrained bundle "
                                             "for --env)")
    p.add_argument("--env", help="environment id (default: the one the policy records, else tinker/ArmReach-v0)")
    p.add_argument("--dynamics", help="fixed dynamics YAML (default: nominal)")
    p.add_argument("--episodes", type=int, default=50, help="episodes to run (default 50)")
    p.add_argument("--seed", type=int, default=1000, help="first episode seed (default 1000, apart from training)")
    p.add_argument("--no-safety", action="store_true", help="evaluate without the SafetyWrapper (not recommended)")
    p.add_argument("--safety-config", metavar="YAML", help="the SafetyWrapper's settings (default: "
                   "safety/config/kuka_iiwa.yaml, what the safety node runs), e.g. a copy with limit_from: measured")
    est = p.add_mutually_exclusive_group()
    est.add_argument("--estimate", choices=ESTIMATE_MODES, default="auto",
                     help="a vision bundle's image estimate (the located target): auto (default) averages it over "
                          "the episode's frames that show the target, as the perception node does by default "
                          "(a state bundle has none: per frame); held requires that; per_frame uses each frame's own")
    est.add_argument("--hold-estimate", dest="estimate", action="store_const", const="held",
                     help="the same as --estimate held")
    p.add_argument("--calibration-deadband", type=float, default=CALIBRATION_DEADBAND_M, metavar="M",
                   help="with a held estimate and a bundle that finds the hand: a camera offset the hand measures no "
                        f"longer than this is not corrected, m (default {CALIBRATION_DEADBAND_M}; the perception "
                        "node's calibration_deadband)")
    p.add_argument("--latency-compensation", type=compensation_arg, default=0, metavar="PERIODS|auto",
                   help="the robot's command latency in control periods, compensated: the policy acts on the pose "
                        "the newest command in flight brings the arm to, takes its deltas from there, and a task's "
                        "extra actions (the suction) are held back as long (default 0: off; the launch YAML's "
                        "latency_compensation). Every evaluation measures it from the commands and joint states and "
                        "prints it (command_latency in --json); on the robot the safety node's /diagnostics show "
                        "command_latency_periods. 'auto' (--runtime loop): start at 0 and compensate what the safety "
                        "stage measures once it has stood (the launch YAML's latency_auto: true)")
    p.add_argument("--curriculum", metavar="PARAM=VALUE", help="an env parameter set as a curriculum level before the "
                   "first episode, e.g. num_objects=3 (a policy trained with a curriculum records its first level)")
    p.add_argument("--runtime", choices=("env", "loop"), default="env",
                   help="env (default): the gymnasium env with the bundle and the SafetyWrapper as its command filter; "
                        "loop: the robot loop's stages as the ROS 2 nodes run them (sim_robot, perception, policy, "
                        "safety, experience_bridge from the launch YAML, wired by the loop's graph), in one process "
                        "without ROS. Counts episodes that reached success, unsafe states, e-stops (a latched one is "
                        "cleared at the next episode start, as an operator's /safety/reset) and the largest command "
                        "step")
    p.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    p.add_argument("--plot", default="runs/eval/eval.png", metavar="PNG",
                   help="where to write the figure (default runs/eval/eval.png; '' for none)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinker_cli._compose import bundle_modules, policy_env_for_bundle, wire_commanded
    from tinker_deploy.pretrained import default_bundle
    from tinker_core.errors import ConfigError
    from tinker_core.loop.latency_compensation import check_steps

    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    lo, hi = CALIBRATION_DEADBAND_RANGE_M
    if not lo <= args.calibration_deadband <= hi:
        raise ConfigError(f"--calibration-deadband: expected {lo}..{hi} m (the perception node's range), got "
                          f"{args.calibration_deadband}")
    if args.runtime == "loop":
        return _run_loop(args)
    if args.latency_compensation == "auto":
        raise ConfigError("--latency-compensation auto: the loop's safety stage measures the latency and the loop "
                          "follows it; add --runtime loop (--runtime env compensates a fixed number of periods)")
    if args.policy and not (Path(args.policy) / "manifest.json").is_file() and (Path(args.policy) / "meta.json").is_file():
        return _run_checkpoint(args)
    if args.policy:
        from tinker_deploy.hierarchy_runtime import is_hierarchy

        if is_hierarchy(args.policy):
            return _run_hierarchy(args)
    bundle = args.policy or default_bundle(args.env or DEFAULT_ENV)
    policy = bundle_modules(bundle, args.estimate, deadband_m=args.calibration_deadband,
                            latency_compensation=check_steps(args.latency_compensation, "--latency-compensation"))
    recorded = policy.manifest.env or ({"id": policy.manifest.env_id} if policy.manifest.env_id else {})
    env_id = args.env or recorded.get("id") or DEFAULT_ENV
    if env_id.startswith("tinker/"):
        from tinker_cli._compose import check_dynamics_for

        check_dynamics_for(policy.manifest, env_id, args.dynamics, f"the policy {bundle}")
        env = policy_env_for_bundle(policy, env_id, dynamics=args.dynamics, safety=not args.no_safety,
                                    safety_yaml=_safety_yaml(args), latency_compensation=args.latency_compensation)
        wire_commanded(policy, env)
        from tinker_sim.latency_probe import CommandLatencyProbe

        env = CommandLatencyProbe(env)  # what the robot's commands and joint states say its latency is
        period = float(env.unwrapped.control_period)
        safety = not args.no_safety
    else:
        _no_guard(args, f"{env_id!r} is not a tinker/ sim task")
        if args.latency_compensation:
            raise ConfigError(f"--latency-compensation: {env_id!r} is not a tinker/ arm task; the compensation "
                              f"predicts an arm's pose from its joint command stream")
        env, safety = _gym_env(args, env_id, recorded), False
        period = 1.0
    return _evaluate(args, env, policy, str(bundle), env_id, period, safety, version=policy.version)


DEFAULT_ENV = "tinker/ArmReach-v0"


def latency_line(est: Any, compensated: int) -> str:
    """What the joint states said of the robot's command latency, and whether the setting agrees."""
    if est.periods is None:
        return f"command latency: not measured ({est.why})"
    line = (f"command latency measured from the commands and joint states: {est.periods} control periods (R² "
            f"{est.fit:.3f}, next best lag {est.runner_up:.3f}); compensated: {compensated}")
    if est.periods != compensated:
        line += f". To act ahead of it: --latency-compensation {est.periods}"
    return line


def _no_guard(args: argparse.Namespace, why: str) -> None:
    """Refuse ``--safety-config`` where no SafetyWrapper runs."""
    if getattr(args, "safety_config", None):
        from tinker_core.errors import ConfigError

        raise ConfigError(f"--safety-config: {why}, without the SafetyWrapper (it guards the arm); nothing would read it")


def _no_held(args: argparse.Namespace, what: str) -> None:
    """Refuse ``--estimate held`` where no bundle's image estimate runs."""
    if getattr(args, "estimate", "auto") == "held":
        from tinker_core.errors import ConfigError

        raise ConfigError(f"--estimate held: {args.policy} is {what}; an estimate is held for an exported vision "
                          f"bundle (one with image_terms)")


def _safety_yaml(args: argparse.Namespace) -> str | None:
    """``--safety-config``, checked: a file that exists (named as the flag's), and not together with ``--no-safety``."""
    from tinker_core.errors import ConfigError

    if not args.safety_config:
        return None
    if args.no_safety:
        _no_guard(args, "with --no-safety the policy runs")
    if not Path(args.safety_config).is_file():
        raise ConfigError(f"--safety-config: {args.safety_config} does not exist")
    return args.safety_config


def _curriculum(args: argparse.Namespace) -> tuple[str, Any]:
    """``--curriculum PARAM=VALUE`` as (param, value), the value read as YAML (``3`` is an int)."""
    import yaml

    from tinker_core.errors import ConfigError

    param, sep, value = args.curriculum.partition("=")
    if not sep or not param:
        raise ConfigError(f"--curriculum {args.curriculum!r}: expected PARAM=VALUE, e.g. num_objects=3")
    return param, yaml.safe_load(value)


def _run_loop(args: argparse.Namespace) -> int:
    """``--runtime loop``: the bundle through the robot loop's stages in one process (`tinker.in_process`)."""
    import time

    import gymnasium as gym
    from tqdm import tqdm

    import tinker_sim  # noqa: F401  (registers the tinker/ ids: their time limits are the episodes' length)
    from tinker.bundle_io import top_manifest, resolve_bundle
    from tinker.in_process import InProcessConfig, InProcessLoop
    from tinker_cli._compose import check_dynamics_for
    from tinker_core.errors import ConfigError
    from tinker_core.evaluate import objects_summary, wilson_interval
    from tinker_core.loop.latency_compensation import check_steps

    if args.no_safety:
        raise ConfigError("--runtime loop: the loop's safety stage always runs (as the safety node does); "
                          "--no-safety applies to --runtime env")
    bundle = str(resolve_bundle(args.policy or "", args.env or DEFAULT_ENV))
    manifest = top_manifest(bundle)
    env_id = manifest.env_id or (manifest.env or {}).get("id") or DEFAULT_ENV
    if args.env and args.env != env_id:
        raise ConfigError(f"--runtime loop: the bundle {bundle} was trained on {env_id}; the simulated robot runs "
                          f"that task (--env {args.env} cannot apply)")
    check_dynamics_for(manifest, env_id, args.dynamics, f"the policy {bundle}")
    sim: dict[str, Any] = {"seed": args.seed, "episode_cycles": int(gym.spec(env_id).max_episode_steps),
                           "dynamics": args.dynamics or ""}
    if args.curriculum:
        param, value = _curriculum(args)
        if param != "num_objects":
            raise ConfigError(f"--curriculum {args.curriculum!r}: the loop's robot takes num_objects=N only")
        sim["num_objects"] = int(value)
    auto = args.latency_compensation == "auto"
    latency = {"latency_compensation": 0 if auto else check_steps(args.latency_compensation, "--latency-compensation"),
               "latency_auto": auto}
    overrides = {"sim_robot": sim, "perception": {"estimate": args.estimate,
                                                  "calibration_deadband": args.calibration_deadband, **latency},
                 "policy": latency,
                 "safety": {**latency, **({"config": _safety_yaml(args)} if args.safety_config else {})}}
    bar = tqdm(total=args.episodes, desc="eval (loop)", unit="ep", disable=args.json)
    t0 = time.perf_counter()
    # an e-stop is cleared at the next episode start (as an operator's /safety/reset; --runtime env resets its guard
    # every episode): each episode is judged on its own, and the e-stops are counted
    with InProcessLoop(InProcessConfig(bundle=bundle, overrides=overrides, reset_estop=True)) as loop:
        def on_cycle(s) -> None:
            if s.done:
                bar.update(1)
                bar.set_postfix(success=f"{loop.robot.successes}/{loop.episodes_done}")

        try:
            out = loop.run_episodes(args.episodes, on_cycle)
        finally:
            bar.close()
        hold = loop.stages["perception"].cycle.hold
        held = hold is not None
        latency = loop.stages["safety"].latency  # the safety stage's, from the states it heard and commands it sent
        measured = latency.estimate() if latency is not None else None
        compensated = loop.stages["safety"].compensated  # at the end: what auto took, else the setting
        taken = list(loop.stages["safety"].latency_taken)
        calibrated = held and loop.stages["perception"].cycle.hand is not None
    k, n = out["successes"], out["episodes"]
    lo, hi = wilson_interval(k, n)
    d = {"runtime": "loop", "policy": bundle, "env": env_id, "dynamics": args.dynamics or "nominal", "episodes": n,
         "successes": k, "success_rate": k / n, "ci_low": lo, "ci_high": hi, "cycles": out["cycles"],
         "unsafe_states": out["unsafe_states"], "estops": out["estops"], "holds": out["holds"],
         "deadline_misses": out["deadline_misses"], "max_command_step": out["max_command_step"],
         "commands_over_velocity_limit": out["commands_over_velocity_limit"], "transitions": out["transitions"],
         "flow": out["flow"], "hold_estimate": held, "camera_calibrated": calibrated,
         "calibration_deadband_m": args.calibration_deadband if calibrated else None,
         "latency_compensation": args.latency_compensation, "wall_s": time.perf_counter() - t0,
         "command_latency": measured.to_dict() if measured is not None else None,
         **({"latency_compensated_at_end": compensated, "latency_taken": taken} if auto else {}),
         **(objects_summary(out["objects_sorted"], out["objects_total"]) if out["objects_total"] else {})}
    if args.json:
        print(json.dumps(d))
    else:
        print(f"{env_id} | policy {bundle} | dynamics {d['dynamics']} | the loop's stages in one process"
              + (f" | {hold.summary}" if held else "")
              + (", the camera calibrated on the hand it sees" if calibrated else ""))
        unsafe = sum(out["unsafe_states"].values())
        objects = (f"; objects sorted {d['objects_sorted_rate']:.1%} ({d['objects_sorted']}/{d['objects_total']}, "
                   f"95% CI {d['objects_ci_low']:.1%}-{d['objects_ci_high']:.1%})" if "objects_total" in d else "")
        print(f"success {k}/{n} = {k / n:.1%} [95% CI {lo:.1%}-{hi:.1%}]{objects}; unsafe states {unsafe}; e-stops "
              f"{out['estops']} (each cleared at the next episode); holds {out['holds']}; largest command step "
              f"{out['max_command_step']:.2f} of the velocity limit; {out['cycles']} cycles, {out['transitions']} "
              f"transitions, {d['wall_s']:.1f} s")
        for line in taken:
            print(line)
        if measured is not None:
            print(latency_line(measured, compensated) + " (the safety stage's estimate)")
    return 0


def _gym_env(args: argparse.Namespace, env_id: str, recorded: dict) -> Any:
    """A gymnasium env that is not a tinker sim task: the recorded one (wrappers included) when the ids agree."""
    from tinker_core.envs import EnvConfig
    from tinker_core.errors import ConfigError

    if args.dynamics:
        raise ConfigError(f"--dynamics: dynamics files apply to the tinker/ sim tasks, not to {env_id!r}")
    if recorded.get("id") == env_id and "kwargs" in recorded:
        return EnvConfig.from_dict(recorded, "recorded env").make()
    return EnvConfig(env_id).make()


def _run_checkpoint(args: argparse.Namespace) -> int:
    """A training checkpoint (``runs/X/final``): its deterministic policy on the env it records."""
    import tinker_sim  # noqa: F401  (registers the tinker/ ids a checkpoint may record; the CLI is the composition root)
    from tinker_core.algos import load_algorithm

    _no_guard(args, "a checkpoint runs on its recorded env")
    _no_held(args, "a checkpoint")
    algo = load_algorithm(args.policy, device="cpu")
    if args.env and args.env != algo.env_id:
        from tinker_core.envs import EnvConfig

        env = EnvConfig(args.env).make()
    elif algo.vec_env is not None:
        env = algo.env_config.make() if algo.env_config is not None else algo.vec_env.envs[0]
    else:
        from tinker_core.errors import ConfigError

        raise ConfigError(f"{args.policy}: the checkpoint records no env; give --env")
    if args.dynamics:
        from tinker_core.errors import ConfigError

        raise ConfigError("--dynamics: evaluate a tinker/ sim policy as an exported bundle (tinker export), "
                          "which runs with the SafetyWrapper")
    env_id = args.env or algo.env_id or "?"
    policy = lambda o: algo.predict(o, deterministic=True)  # noqa: E731
    if hasattr(algo.policy, "reset"):  # a policy with state between steps (HPPO's running option): reset per episode
        algo.policy.deterministic = True
        policy = algo.policy
    return _evaluate(args, env, policy, str(args.policy), env_id,
                     float(getattr(env.unwrapped, "control_period", 1.0) or 1.0), False, version=algo.num_timesteps)


def _run_hierarchy(args: argparse.Namespace) -> int:
    """An exported hierarchical policy (``hierarchy.json``: tinker_deploy.hierarchy) on the env its levels record;
    an arm task is composed from the high level's bundle (its action chain, joints and layout) with the
    SafetyWrapper last, as a flat policy's."""
    from tinker_core.envs import EnvConfig
    from tinker_core.errors import ConfigError
    from tinker_deploy.hierarchy_runtime import HierarchicalOnnxPolicy

    _no_held(args, "a hierarchical policy")
    policy = HierarchicalOnnxPolicy(args.policy)
    recorded = policy.low.manifest.env or ({"id": policy.low.manifest.env_id} if policy.low.manifest.env_id else {})
    env_id = args.env or recorded.get("id")
    if not env_id:
        raise ConfigError(f"{args.policy}: the hierarchy records no env; give --env")
    safety = False
    if env_id.startswith("tinker/Arm"):
        from tinker_cli._compose import check_dynamics_for, policy_env_for_bundle

        check_dynamics_for(policy.high.manifest, env_id, args.dynamics, f"the policy {args.policy}")
        kwargs = dict(recorded.get("kwargs") or {}) if recorded.get("id") == env_id else {}
        layout = {k: kwargs[k] for k in ("task_kwargs", "max_episode_steps") if k in kwargs}  # not its randomization
        env = policy_env_for_bundle(policy.high, env_id, dynamics=args.dynamics, safety=not args.no_safety,
                                    safety_yaml=_safety_yaml(args), **layout)
        safety = not args.no_safety
    else:
        if args.dynamics:
            raise ConfigError("--dynamics: dynamics files apply to the tinker/ arm tasks")
        if env_id.startswith("tinker/"):
            import tinker_sim  # noqa: F401  (registers the tinker/ ids; the CLI is the composition root)
        env = (EnvConfig.from_dict(recorded, "recorded env") if recorded.get("id") == env_id and "kwargs" in recorded
               else EnvConfig(env_id)).make()
    return _evaluate(args, env, policy, str(args.policy), env_id, float(getattr(env.unwrapped, "control_period", 1.0)
                                                                          or 1.0), safety, version=policy.low.version)


def _evaluate(args: argparse.Namespace, env: Any, policy: Any, name: str, env_id: str, period: float, safety: bool,
              version: int) -> int:
    import numpy as np
    from tqdm import tqdm

    from tinker_cli._compose import BundleModules
    from tinker_cli._eval_figure import SafetyMarks, instrument, write_figure
    from tinker_core.evaluate import evaluate
    from tinker_core.monitor import format_flow

    if args.curriculum:
        from tinker_core.curriculum import apply_env_param

        apply_env_param(env, *_curriculum(args))  # in force from the first reset

    bar = tqdm(total=args.episodes, desc="eval", unit="ep", disable=args.json)
    wins = [0]
    modules = policy if isinstance(policy, BundleModules) else None
    perception, timed, timer, guard = (instrument(env, modules.policy, modules.perception) if modules is not None
                                       else instrument(env, policy))
    marks = SafetyMarks(guard if safety else None)

    def on_episode(i: int, row: dict) -> None:
        marks.episode_end(i)
        wins[0] += row["success"]
        bar.update(1)
        bar.set_postfix(success=f"{wins[0]}/{i + 1}", ret=f"{row['return']:.1f}")

    try:
        res = evaluate(env, timed, args.episodes, seed=args.seed, control_period=period, on_episode=on_episode,
                       perception=perception)
    finally:
        bar.close()
        env.close()
    d = res.to_dict()
    rets = [r["return"] for r in res.per_episode]
    held = getattr(getattr(modules, "perception", None), "hold", None)  # HeldPerception's hold
    calibrated = held is not None and modules.perception.hand is not None
    d.update(policy=name, env=env_id, dynamics=args.dynamics or "nominal", policy_version=version, safety=safety,
             hold_estimate=bool(modules is not None and modules.held),
             latency_compensation=getattr(args, "latency_compensation", 0),
             camera_calibrated=calibrated,
             calibration_deadband_m=held.deadband_m if calibrated else None,
             safety_config=(getattr(args, "safety_config", None) or "default") if safety else None,
             std_return=float(np.std(rets)), curriculum=args.curriculum or None)
    measured = env.estimate() if hasattr(env, "estimate") else None  # `CommandLatencyProbe`
    if measured is not None:
        d["command_latency"] = measured.to_dict()
    if args.plot:
        d.update(write_figure(args.plot, res.per_episode, timer, marks, env_id=env_id, version=version,
                              name="/".join(Path(name).parts[-2:]) or name,
                              dynamics=Path(args.dynamics).stem if args.dynamics else "nominal"))
    if args.json:
        print(json.dumps(d))
    else:
        print(f"{env_id} | policy {name} (v{version}) | dynamics {args.dynamics or 'nominal'}"
              + (f" | {held.summary}" if held is not None else "")
              + (", the camera calibrated on the hand it sees" if d["camera_calibrated"] else "")
              + ("" if safety else " | no SafetyWrapper"))
        print(res.format() + f"; return std {d['std_return']:.2f}")
        print("edges (the evaluation's pipeline; p50/p99: the receiving module's time per message):")
        print(format_flow(res.flow))
        if measured is not None:
            print(latency_line(measured, d["latency_compensation"]))
        if "plot" in d:
            timed = (("perception + " if perception is not None else "") + "policy"
                     + (" + SafetyWrapper" if safety else ""))
            print(f"figure: {d['plot']} ({timed} per step p50 {d['step_ms_p50']:.3f} ms, p99 {d['step_ms_p99']:.3f} ms)")
    return 0
