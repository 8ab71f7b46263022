"""``tinker eval``: success rate of a policy bundle on a fixed dynamics variant, with a confidence interval."""

from __future__ import annotations

import argparse
import json
from typing import Any

ORDER = 40

EPILOG = """\
dynamics files (YAML, keys as in sim/config/nominal.yaml):
  mass_scale, friction, joint_damping_scale, actuator_gain, action_latency_steps,
  obs_noise_std, camera_shift_m, object_mass_scale  (missing keys keep their nominal value)
  shipped variants: sim/config/dynamics/*.yaml

examples:
  tinker eval                                          shipped ArmReach policy, nominal dynamics
  tinker eval --dynamics sim/config/dynamics/heavy_arm.yaml --episodes 100
  tinker eval runs/reach/bundle --env tinker/ArmReach-v0 --json | tail -1 | jq .success_rate
  tinker eval --env tinker/ArmSort-v0 --episodes 100 --json | tail -1 | jq .objects_sorted_rate
"""


def register(sub: Any) -> None:
    p = sub.add_parser("eval", help="evaluate a policy bundle in simulation (success rate with 95%% CI)",
                       description="Run a policy bundle (ONNX, through onnxruntime, as deployed) on a simulated "
                                   "task with a fixed dynamics variant and the SafetyWrapper in the loop; print the "
                                   "success rate with a 95% Wilson interval, the mean time to success and the "
                                   "number of safety interventions; on a sorting task also the objects in the "
                                   "right bin / objects (--json key objects_sorted_rate).",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("policy", nargs="?", help="bundle directory (default: the shipped pretrained one for --env)")
    p.add_argument("--env", default="tinker/ArmReach-v0", help="environment id (default tinker/ArmReach-v0)")
    p.add_argument("--dynamics", help="fixed dynamics YAML (default: nominal)")
    p.add_argument("--episodes", type=int, default=50, help="episodes to run (default 50)")
    p.add_argument("--seed", type=int, default=1000, help="first episode seed (default 1000, apart from training)")
    p.add_argument("--no-safety", action="store_true", help="evaluate without the SafetyWrapper (not recommended)")
    p.add_argument("--json", action="store_true", help="print one JSON object on the last line")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from tinker_core.cli._compose import default_bundle, load_policy, policy_env_for_bundle
    from tinker_core.errors import ConfigError
    from tinker_core.evaluate import evaluate

    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    bundle = args.policy or default_bundle(args.env)
    policy = load_policy(bundle)
    env = policy_env_for_bundle(policy, args.env, dynamics=args.dynamics, safety=not args.no_safety)
    bar = tqdm(total=args.episodes, desc="eval", unit="ep", disable=args.json)
    wins = [0]

    def on_episode(i: int, row: dict) -> None:
        wins[0] += row["success"]
        bar.update(1)
        bar.set_postfix(success=f"{wins[0]}/{i + 1}")

    try:
        res = evaluate(env, policy, args.episodes, seed=args.seed,
                       control_period=float(env.unwrapped.control_period), on_episode=on_episode)
    finally:
        bar.close()
        env.close()
    d = res.to_dict()
    d.update(policy=str(bundle), env=args.env, dynamics=args.dynamics or "nominal",
             policy_version=policy.version, safety=not args.no_safety)
    if args.json:
        print(json.dumps(d))
    else:
        print(f"{args.env} | policy {bundle} (v{policy.version}) | dynamics {args.dynamics or 'nominal'}")
        print(res.format())
    return 0
