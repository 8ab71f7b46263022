"""``tinker flow``: rate, bytes and latency of each edge of a running ROS 2 graph."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

ORDER = 43


def register(sub: Any) -> None:
    p = sub.add_parser(
        "flow", help="watch a running ROS 2 graph: rate, bytes and latency of each edge",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Subscribes to every topic of the graph (its own node, outside the loop) and prints each "
                    "edge's message rate, bytes per second and latency from the robot state's stamp (p50/p99), "
                    "the same figures the in-process pipeline's flow monitor gives. Run it beside "
                    "'tinker bringup' or 'ros2 launch tinker bringup.launch.py', on the same ROS_DOMAIN_ID.",
        epilog="examples:\n  tinker flow                      every second until Ctrl-C\n"
               "  tinker flow --namespace robot1 --duration 10 --json\n"
               "  tinker flow --learner tcp://127.0.0.1:5557   also the learner's ZeroMQ edges (its control endpoint)")
    p.add_argument("--namespace", default="", help="the graph's namespace (default: none)")
    p.add_argument("--duration", type=float, default=0.0, help="stop after this many seconds (0: until Ctrl-C)")
    p.add_argument("--every", type=float, default=1.0, help="seconds between two printed tables (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON snapshot at the end instead of tables")
    p.add_argument("--wait", type=float, default=10.0,
                   help="seconds to wait, before the window starts, until every edge of the loop (joint_states, "
                        "features, joint target, command) has a matched publisher: discovery takes seconds on a "
                        "loaded machine, and a window that starts before it counts too few messages (default 10; "
                        "0: start at once)")
    p.add_argument("--learner", metavar="ENDPOINT", default="",
                   help="a running learner's control endpoint (tinker learner's default: tcp://127.0.0.1:5557): its "
                        "ZeroMQ edges (transitions in; bundles and params out) are measured by the learner's own flow "
                        "monitor, asked each time a table is printed, and shown below the topics (default: they are "
                        "only named)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinker.flow import FlowWatcher
    from tinker_cli._ros import ros_node

    with ros_node("tinker_flow") as (node, ex):
        watcher = FlowWatcher(node, args.namespace)
        learner = LearnerFlow(args.learner) if args.learner else None
        _wait_for_discovery(ex, watcher, args.wait)
        end = time.monotonic() + args.duration if args.duration > 0 else float("inf")
        next_print = time.monotonic() + args.every
        try:
            while time.monotonic() < end:
                ex.spin_once(timeout_sec=0.05)
                if not args.json and time.monotonic() >= next_print:
                    next_print += args.every
                    print(_table(watcher, learner), "\n", flush=True)
        except KeyboardInterrupt:
            pass
        finally:
            snap, silent = watcher.snapshot(), watcher.silent()
            watcher.close()
    zmq = learner.poll() if learner is not None else {}
    if learner is not None:
        learner.close()
    if args.json:
        print(json.dumps({"namespace": args.namespace, "edges": snap, "silent": silent, "ends": watcher.ends,
                          "unstamped": watcher.unstamped, "over_zeromq": _zmq_edges(),
                          **({"learner": {"endpoint": args.learner, "edges": zmq, "error": learner.error}}
                             if learner is not None else {})}, indent=1))
    if learner is not None and learner.error:
        print(f"tinker flow: the learner at {args.learner}: {learner.error}", file=sys.stderr)
    if not snap and not zmq:
        print("tinker flow: no message on any of the graph's topics (is it running, on this ROS_DOMAIN_ID "
              f"and namespace {args.namespace!r}?)")
        return 1
    return 0


class LearnerFlow:
    """The learner's own flow monitor, asked over its control endpoint (``ctl status``'s ``flow``)."""

    def __init__(self, endpoint: str, timeout_ms: int = 1000):
        from tinker_core.transport import ControlClient

        self.client, self.timeout_ms, self.error = ControlClient(endpoint, timeout_ms=timeout_ms), timeout_ms, ""

    def poll(self) -> dict[str, dict]:
        """Each learner edge's figures and ends; {} with ``error`` set when the learner did not answer."""
        from tinker_core.errors import TransportError

        try:
            rep = self.client.request({"cmd": "status", "timeout_s": self.timeout_ms / 1e3})
        except TransportError as e:
            self.error = str(e)
            return {}
        self.error = "" if rep.get("ok") else str(rep.get("error"))
        return dict(rep.get("flow") or {})

    def close(self) -> None:
        self.client.close()


def _table(watcher: Any, learner: LearnerFlow | None = None) -> str:
    """The flow monitor's table, each edge followed by its ends in the loop's graph; the learner's edges below."""
    from tinker_core.monitor import format_flow

    rows = watcher.monitor.format().splitlines()
    out = [rows[0] + "  from -> to"] + [r + "  " + watcher.ends.get(r.split()[0], "") for r in rows[1:]]
    silent = watcher.silent()
    if silent:
        out.append("no message in this window: " + "; ".join(f"{t} ({watcher.ends[t]})" for t in silent))
    if learner is None:
        return "\n".join(out + [f"over ZeroMQ, not measured here (tinker flow --learner ENDPOINT, or tinker learner "
                                f"ctl status): {'; '.join(_zmq_edges())}"])
    zmq = learner.poll()
    if not zmq:
        return "\n".join(out + [f"over ZeroMQ: the learner did not answer ({learner.error or 'nothing counted yet'})"])
    lines = format_flow(zmq).splitlines()[1:]
    return "\n".join(out + [f"{ln}  {zmq[name]['ends']} (zmq)" for ln, name in zip(lines, zmq)])


def _zmq_edges() -> list[str]:
    """The loop's edges between processes over ZeroMQ (the learner's), which this ROS observer cannot see."""
    from tinker_core.loop.graph import ROBOT_LOOP

    return [str(e) for e in ROBOT_LOOP.edges if e.transport == "zmq"]


def _wait_for_discovery(ex: Any, watcher: Any, wait_s: float) -> None:
    """Spin until every loop edge has a matched publisher (at most ``wait_s``), then start the window; the edges
    still unmatched then are named on stderr (a graph without them, or another ROS_DOMAIN_ID)."""
    deadline = time.monotonic() + max(0.0, wait_s)
    missing = watcher.unmatched()
    while missing and time.monotonic() < deadline:
        ex.spin_once(timeout_sec=0.05)
        missing = watcher.unmatched()
    if missing and wait_s > 0:
        print(f"tinker flow: no publisher matched on {', '.join(missing)} after {wait_s:g} s; measuring anyway",
              file=sys.stderr, flush=True)
    watcher.restart()
