"""``tinker goal``: send a running graph a goal, as ``ros2 topic pub --once /goal ...`` would; say what became of it."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 42


def register(sub: Any) -> None:
    p = sub.add_parser(
        "goal", help="send a running ROS 2 graph a reach goal (base frame, m) and say whether it was taken",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Publishes one geometry_msgs/PointStamped on the graph's 'goal' topic (what 'ros2 topic pub "
                    "--once goal ...' does, for an install without ros2cli), then reads the simulated robot's "
                    "/diagnostics: the reach target moved there (taken), or the goal was refused and why (outside "
                    "the box reach targets are drawn from, a sorter, another frame than the robot's base). On a "
                    "real robot's graph it reports the goal sent. The policy holds at a goal once there "
                    "(docs/sim2real/goal_hold.md). Run it beside 'tinker bringup' on the same ROS_DOMAIN_ID.",
        epilog="examples:\n  tinker goal 0.5 0.1 0.35\n  tinker goal 0.45 0.25 0.3 --namespace robot1\n"
               "  tinker goal 0.6 -0.2 0.4 --frame lbr_iiwa_link_0\n"
               "exit status: 0 taken or sent, 1 refused, 2 nothing subscribed")
    for axis in "xyz":
        p.add_argument(axis, type=float, help=f"the goal's {axis}, m, in the robot's base frame")
    p.add_argument("--namespace", default="", help="the graph's namespace (default: none)")
    p.add_argument("--frame", default="", help="header.frame_id (default: empty, the base frame)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for a subscriber and the answer")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinker.goal_sender import send_goal
    from tinker_cli._ros import ros_node

    with ros_node("tinker_goal") as (node, ex):
        result = send_goal(node, ex, args.namespace, (args.x, args.y, args.z), args.frame, args.timeout)
    print(f"{result.outcome}: {result.message}")
    return {"taken": 0, "sent": 0, "refused": 1}.get(result.outcome, 2)
