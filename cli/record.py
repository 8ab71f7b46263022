"""``tinker record``: bring the graph up with every cycle recorded to an MCAP file."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 41


def register(sub: Any) -> None:
    from tinker_cli.bringup import add_graph_arguments

    p = sub.add_parser("record", help="run the ROS 2 graph and record every control cycle to MCAP",
                       description="Same as 'tinker bringup --record OUT': the view node records the standard topics "
                                   "(sensor_msgs/JointState, the command, sensor_msgs/Image, diagnostic_msgs/"
                                   "DiagnosticArray, tf2_msgs/TFMessage from the URDF) and one "
                                   "tinker_msgs/msg/CycleRecord per cycle (policy input, raw action, command after "
                                   "safety, timestamps, policy version, safety status and reason, episode ends) to an "
                                   "MCAP file that ros2 bag, rosbags and Foxglove read (every schema is in the file). "
                                   "Replay it with 'tinker view OUT'; turn it into replay data with "
                                   "'tinker replay import OUT'.")
    p.add_argument("out", metavar="RUN.mcap", help="the MCAP file to write")
    add_graph_arguments(p)
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: until Ctrl-C)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinker_cli import bringup

    args.record = args.out
    rc = bringup.run(args)
    print(f"tinker record: wrote {args.out}")
    return rc
