"""``tinker bringup``: the ROS 2 node graph from the launch YAML, on hosts without ``ros2 launch``."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 40
SUPERVISE_EVERY_S = 0.5
"""how often the node processes are looked after (`tinker.bringup.Graph.supervise`)"""

EPILOG = """\
examples:
  tinker bringup --bundle runs/arm_reach/bundle
  tinker bringup --bundle pretrained/arm_reach_vision --set sim_robot.episode_cycles=60   # the target from the
                                 # camera: sim_robot renders the views and size the bundle's model takes
  tinker bringup --namespace robot1 --bundle B --record run1.mcap
  tinker bringup --view          # then open http://127.0.0.1:8766/ or connect Foxglove to ws://127.0.0.1:8765
  tinker bringup --no-sim --set /**.command_type=joint_trajectory   # on your robot: its driver, your goal topic
  tinker bringup --composed --set policy.on_overrun=stop --set /**.trace_dir=/tmp/trace
  tinker bringup --set /**.realtime_priority=0   # normal scheduling: no SCHED_FIFO (see tinker doctor)
  tinker bringup --no-sim --set /**.latency_auto=true   # act on the pose in flight, at the command latency the
                                 # safety node measures from its commands and your joint_states
  tinker bringup --agents configs/fleet_reach.yaml   # three robots, /robot1 /robot2 /robot3, each its own safety

The parameter file is the package's config/bringup.yaml (the one ros2 launch loads) unless --params
is given. Ctrl-C or SIGTERM stops every node: commanding nodes publish a hold first.

A node that dies: perception, the policy and the experience bridge are started again (at most 5 times each);
safety's e-stop, latched by its watchdog meanwhile, holds the robot until a person resets it (the safety/reset
service). The robot (sim_robot) or safety dying stops the graph, with its log's end (exit code 1); with --agents,
that robot alone.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("bringup", help="run the ROS 2 control graph from the launch YAML (no ros2 launch needed)",
                       description="Start sim_robot, perception, policy, safety and experience_bridge from the same "
                                   "YAML as launch/bringup.launch.py, each as its own process (or composed in one), "
                                   "drive the lifecycle nodes to active, and stop everything cleanly on Ctrl-C.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_graph_arguments(p)
    p.add_argument("--agents", metavar="FILE",
                   help="several robots: one namespace per agent of this agents file (its 'bundle' each), each with "
                        "its own simulated robot, perception, policy, safety and lifecycle; composed per robot unless "
                        "--separate names nodes that get processes of their own")
    p.add_argument("--separate", default="", metavar="NODES",
                   help="with --composed or --agents: comma-separated nodes that still run as processes of their own")
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: until Ctrl-C)")
    p.set_defaults(func=run)


def add_graph_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--params", metavar="FILE", help="parameter file (default: the package's config/bringup.yaml)")
    p.add_argument("--namespace", default="", help="robot namespace, e.g. robot1 (topics become /robot1/...)")
    p.add_argument("--composed", action="store_true", help="all nodes in one process and one executor")
    p.add_argument("--record", metavar="RUN.mcap", help="record the standard topics, /tf and every cycle to this MCAP "
                   "file (with --agents: a folder, one ROBOT.mcap per robot, frames prefixed 'ROBOT/')")
    p.add_argument("--view", action="store_true",
                   help="live view: Foxglove WebSocket on ws://127.0.0.1:8765 and a page on http://127.0.0.1:8766/ "
                        "(ports: --set view.port=P, view.http_port=P)")
    p.add_argument("--bundle", metavar="DIR", help="deploy bundle for perception and policy (overrides the YAML)")
    p.add_argument("--no-sim", dest="sim", action="store_false",
                   help="no simulated robot: a real driver publishes joint_states and takes the commands, and a goal "
                        "(geometry_msgs/PointStamped) comes on 'goal' (the launch file's sim:=false)")
    p.add_argument("--set", action="append", default=[], metavar="NODE.PARAM=VALUE",
                   help="override one parameter (YAML value syntax); NODE may be /** for all nodes")
    p.add_argument("--run-dir", metavar="DIR", help="where node logs go (default: a temp dir)")


def parse_overrides(items: list[str], bundle: str | None) -> dict[str, dict[str, Any]]:
    import yaml

    from tinker_core.errors import ConfigError

    out: dict[str, dict[str, Any]] = {}
    if bundle:
        for n in ("perception", "policy"):
            out.setdefault(n, {})["bundle"] = bundle
    for item in items:
        key, sep, value = item.partition("=")
        node, dot, param = key.rpartition(".")
        if not sep or not dot or not node or not param:
            raise ConfigError(f"--set {item!r}: expected NODE.PARAM=VALUE, e.g. policy.on_overrun=stop")
        out.setdefault(node, {})[param] = yaml.safe_load(value)
    return out


def graph_from_args(args: argparse.Namespace):
    from pathlib import Path

    from tinker.bringup import Graph

    bundle = str(Path(args.bundle).resolve()) if args.bundle else None
    separate = [n for n in getattr(args, "separate", "").split(",") if n]
    if getattr(args, "agents", None):
        from tinker_core.errors import ConfigError
        from tinker.fleet import Fleet

        for flag, value in (("--namespace", args.namespace), ("--bundle", args.bundle),
                            ("--view", getattr(args, "view", False))):
            if value:
                raise ConfigError(f"bringup --agents: {flag} is per robot; the agents file names each robot (its "
                                  f"namespace) and its bundle")
        return Fleet(args.agents, params_file=args.params, separate=separate, sim=getattr(args, "sim", True),
                     overrides=parse_overrides(args.set, None), run_dir=args.run_dir,
                     record_dir=args.record)  # with --agents, --record names a folder: one NAME.mcap per robot
    return Graph(params_file=args.params, namespace=args.namespace, composed=args.composed, record=args.record,
                 overrides=parse_overrides(args.set, bundle), run_dir=args.run_dir, view=getattr(args, "view", False),
                 sim=getattr(args, "sim", True), separate=separate)


def run(args: argparse.Namespace) -> int:
    import signal
    import sys
    import threading
    import time

    from tinker.bringup import BringupError

    graph = graph_from_args(args)
    stop = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: stop.set())
    if hasattr(graph, "graphs"):
        print(f"tinker bringup: starting {len(graph.graphs)} robots: {', '.join('/' + n for n in graph.graphs)}")
    else:
        print(f"tinker bringup: starting {len(graph.nodes)} nodes in /{graph.namespace} (logs in {graph.run_dir})")
    failed = None
    try:
        graph.start()
        print("tinker bringup: policy and safety are active; Ctrl-C to stop", flush=True)
        end = time.monotonic() + args.duration if args.duration > 0 else float("inf")
        while not stop.wait(min(SUPERVISE_EVERY_S, max(0.0, end - time.monotonic()))) and time.monotonic() < end:
            for line in graph.supervise():  # a dead node: restarted, or the graph stops (tinker.bringup.RESTARTED)
                print(f"tinker bringup: {line}", flush=True)
    except BringupError as e:
        failed = e
        print(f"tinker bringup: {e}", file=sys.stderr, flush=True)
    finally:
        codes = graph.stop()
        print(f"tinker bringup: stopped; exit codes {codes}")
    return 0 if failed is None and all(c in (0, None) for c in _flat(codes)) else 1


def _flat(codes: dict) -> list:
    """Exit codes by process, or by robot then process (--agents)."""
    return [c for v in codes.values() for c in (v.values() if isinstance(v, dict) else [v])]
