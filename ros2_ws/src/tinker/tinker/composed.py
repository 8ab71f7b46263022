"""All tinker nodes in one process and one executor (``tinker bringup --composed``).

``python -m tinker.composed --nodes sim_robot,perception,policy,safety,experience_bridge --ros-args
--params-file config/bringup.yaml -r __ns:=/robot1``: the same nodes, parameters and lifecycle
services as separate processes, without the inter-process hops.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from tinker.runtime import run_nodes

CLASSES = {"sim_robot": "SimRobotNode", "perception": "PerceptionNode", "policy": "PolicyNode",
           "safety": "SafetyNode", "experience_bridge": "ExperienceBridgeNode"}


def main(args: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if args is None else args)
    ros_args = argv[argv.index("--ros-args"):] if "--ros-args" in argv else []
    own = argv[: len(argv) - len(ros_args)]
    ap = argparse.ArgumentParser(prog="python -m tinker.composed")
    ap.add_argument("--nodes", default=",".join(CLASSES), help="comma-separated node names")
    opts = ap.parse_args(own)
    names = opts.nodes.split(",")

    def make_nodes() -> list:
        return [getattr(importlib.import_module(f"tinker.{n}"), CLASSES[n])() for n in names]

    return run_nodes(make_nodes, ["tinker_composed", *ros_args])


if __name__ == "__main__":
    raise SystemExit(main())
