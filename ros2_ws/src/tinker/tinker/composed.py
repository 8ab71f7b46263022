"""All tinker nodes in one process and one executor (``tinker bringup --composed``).

``python -m tinker.composed --nodes sim_robot,perception,policy,safety,experience_bridge --ros-args
--params-file config/bringup.yaml -r __ns:=/robot1``: the same nodes, parameters and lifecycle
services as separate processes, without the inter-process hops.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import rclpy
from rclpy.signals import SignalHandlerOptions

from tinker.runtime import NodeFatal, spin_until_signal
from tinker_core.errors import TinkerError

CLASSES = {"sim_robot": "SimRobotNode", "perception": "PerceptionNode", "policy": "PolicyNode",
           "safety": "SafetyNode", "experience_bridge": "ExperienceBridgeNode"}


def main(args: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if args is None else args)
    ros_args = argv[argv.index("--ros-args"):] if "--ros-args" in argv else []
    own = argv[: len(argv) - len(ros_args)]
    ap = argparse.ArgumentParser(prog="python -m tinker.composed")
    ap.add_argument("--nodes", default=",".join(CLASSES), help="comma-separated node names")
    opts = ap.parse_args(own)
    rclpy.init(args=["tinker_composed", *ros_args], signal_handler_options=SignalHandlerOptions.NO)
    nodes = []
    try:
        for name in opts.nodes.split(","):
            mod = importlib.import_module(f"tinker.{name}")
            nodes.append(getattr(mod, CLASSES[name])())
        spin_until_signal(nodes)
    except NodeFatal as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 3
    except TinkerError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2
    finally:
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
