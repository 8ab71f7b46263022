"""``tinker record``: bring the graph up with every cycle recorded to an MCAP file."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 41


def register(sub: Any) -> None:
    from tinker_core.cli.bringup import add_graph_arguments

    p = sub.add_parser("record", help="run the ROS 2 graph and record every control cycle to MCAP",
                       description="Same as 'tinker bringup --record OUT': every cycle's policy input, raw action, "
                                   "command after safety, timestamps, policy version and safety status go to an "
                                   "MCAP file (schema tinker_msgs/msg/CycleRecord, readable by standard MCAP tools). "
                                   "Turn it into replay data with 'tinker replay import OUT'.")
    p.add_argument("out", metavar="RUN.mcap", help="the MCAP file to write")
    add_graph_arguments(p)
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: until Ctrl-C)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinker_core.cli import bringup

    args.record = args.out
    rc = bringup.run(args)
    print(f"tinker record: wrote {args.out}")
    return rc
