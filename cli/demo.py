"""``tinker demo``: the main job on the simulated robot, end to end, with a report."""

from __future__ import annotations

import argparse
from typing import Any

from tinker_cli._args import compensation_arg
from tinker_cli.benchmark import ENVS, env_for

ORDER = 1

EPILOG = """\
what runs (about 5 minutes on 2 CPUs):
  a learner process (fine-tunes the shipped pretrained SAC checkpoint) + the ROS 2 graph
  sim_robot -> perception -> policy -> safety -> sim_robot (+ experience_bridge) at 50 ms, on a
  dynamics variant that differs from training; episodes before, during and after online fine-tuning;
  improved policies are hot-reloaded by the policy node only after the learner's simulation gate.

output (in --out): report.md, report.json, demo.png (success per episode with the policy versions, the
SafetyWrapper's interventions per second by kind, the cycle latency histogram: the figure tinker eval and
the live view draw too), trace/ (per-node spans: python -m tinker_core.tracer --latency_breakdown
OUT/trace/*.jsonl), nodes/*.log, learner.log.

examples:
  tinker demo
  tinker demo --dynamics sim/config/dynamics/heavy_arm.yaml --finetune-episodes 60
  tinker demo --episodes-before 3 --finetune-episodes 3 --episodes-after 3      (a smoke run)
  tinker demo --env tinker/ArmSort-v0   (the sorter, on 4 periods of command latency, fine-tuned by SAC from its
                                         imitation policy with the expert's demonstrations: RLPD-style)
  tinker demo --bundle pretrained/arm_reach_vision --reward sensors   (the camera finds the target; the learner's
                                                                       reward comes from the robot's sensors only)
  tinker demo --bundle pretrained/arm_reach_vision --reward sensors --operator scripted
                                      (a scripted STAND-IN for a person takes over and labels while fine-tuning)
"""


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="pretrained policy -> ROS 2 loop on the simulated arm -> online fine-tuning",
                       description="The main job on the embedded default robot: bring up the ROS 2 stack on the "
                                   "PyBullet arm with shifted dynamics, run the pretrained policy, fine-tune it "
                                   "online from the live loop, hot-reload improved policies, and report.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default=None, choices=ENVS,
                   help="the task (default: --bundle's own, else tinker/ArmReach-v0). tinker/ArmSort-v0 fine-tunes "
                        "the shipped sorter from "
                        "its RL prior (pretrained/arm_sort/rl_prior: SAC started from the imitation policy, with the "
                        "expert's demonstrations sampled beside the live data) on far_latency_sort.yaml")
    p.add_argument("--dynamics", default=None,
                   help="robot dynamics YAML (default sim/config/dynamics/shifted_miscalibrated.yaml: a heavier, laggier arm with a "
                        "7.5 cm hand-eye calibration error; for a camera bundle, which finds the target itself, "
                        "shifted_heavy_laggy.yaml: a much heavier, weaker, laggier arm)")
    p.add_argument("--bundle", default=None, help="policy bundle (default: the env's shipped one, e.g. "
                                                  "pretrained/arm_reach/bundle)")
    p.add_argument("--checkpoint", default=None, help="checkpoint to fine-tune (default: the env's shipped one, e.g. "
                                                      "pretrained/arm_reach/checkpoint, pretrained/arm_sort/rl_prior/checkpoint)")
    p.add_argument("--demonstrations", default=None,
                   help="a saved replay of demonstrations sampled beside the live data (default: the shipped RL "
                        "prior's, for a task that has one)")
    p.add_argument("--episodes-before", type=int, default=20)
    p.add_argument("--finetune-episodes", type=int, default=50)
    p.add_argument("--episodes-after", type=int, default=20)
    p.add_argument("--out", default="runs/demo", help="output directory (default runs/demo)")
    p.add_argument("--record", action="store_true", help="also record every cycle to OUT/run.mcap")
    p.add_argument("--view", action="store_true",
                   help="live view while it runs: http://127.0.0.1:8766/ (Foxglove WebSocket ws://127.0.0.1:8765)")
    p.add_argument("--reward", choices=("sim", "sensors"), default="sim",
                   help="the learner's rewards: sim = the simulator's true target (default); sensors = the success "
                        "sensor, from the target the camera finds and the measured joints (needs a vision bundle, "
                        "e.g. --bundle pretrained/arm_reach_vision; the camera sorter --env tinker/ArmSort-v0 "
                        "--bundle pretrained/arm_sort_vision: the objects the camera sees in their bins)")
    p.add_argument("--operator", choices=("none", "scripted"), default="none",
                   help="scripted = a STAND-IN for a person at a teleop device (a script, not a person; it looks at "
                        "the simulator's ground truth as a person looks at the scene): during fine-tuning it takes "
                        "over on the intervention topic when the arm heads away from the target and labels each "
                        "episode via the experience bridge's ~/label_episode; turns on safety.intervention_topic "
                        "(docs/sim2real/human_data.md). none = no one (default)")
    p.add_argument("--latency-compensation", type=compensation_arg, default=0, metavar="PERIODS|auto",
                   help="the robot's command latency in control periods, compensated by the loop (the launch YAML's "
                        "latency_compensation; default 0: none); 'auto': the latency the safety node measures, once "
                        "it has stood (latency_auto: true)")
    p.add_argument("--learner-set", nargs="*", default=[], metavar="NAME=VALUE",
                   help="LearnerConfig overrides, e.g. gate_min_success=0.9 publish_every=200")
    p.set_defaults(func=run)


def learner_overrides(items: list[str]) -> dict:
    """``--learner-set NAME=VALUE ...`` as LearnerConfig overrides (each value read as JSON, else kept as text)."""
    import json

    from tinker_core.errors import ConfigError

    overrides = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"--learner-set: expected NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            overrides[k] = json.loads(v)
        except json.JSONDecodeError:
            overrides[k] = v
    return overrides


def run(args: argparse.Namespace) -> int:
    import os

    from tinker_cli._compose import REPO
    from tinker_deploy.pretrained import finetune_start, pretrained_dir

    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    from tinker.demo import DemoConfig, default_dynamics, run_demo

    args.env = env_for(args.env, args.bundle)
    bundle = args.bundle or str(pretrained_dir(args.env) / "bundle")
    checkpoint, demonstrations = finetune_start(args.env) if not args.checkpoint else (args.checkpoint, None)
    overrides = learner_overrides(args.learner_set)
    cfg = DemoConfig(
        bundle=bundle, checkpoint=str(checkpoint), env_id=args.env,
        demonstrations=args.demonstrations or (str(demonstrations) if demonstrations else None),
        dynamics=args.dynamics or default_dynamics(bundle, REPO / "sim" / "config" / "dynamics", args.env),
        out=args.out, episodes_before=args.episodes_before, finetune_episodes=args.finetune_episodes,
        episodes_after=args.episodes_after, learner=overrides, record=args.record,
        view=args.view, reward=args.reward, operator=args.operator, latency_compensation=args.latency_compensation)
    run_demo(cfg)
    return 0
