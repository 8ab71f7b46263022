"""A new participant joining a running graph, as ``ros2 topic echo`` or ``ros2 param get`` is: its own process.

    python participant.py NAMESPACE PUBLISHERS SECONDS
    python participant.py --quiet SECONDS

``--quiet``: one node and nothing else (no subscription, no call), staying SECONDS, as the ``ros2`` CLI's
daemon does after it starts; prints ``stayed=<s>``.

Starts rclpy in a fresh process (the CPU burst of a CLI tool starting), subscribes every topic of the
graph (`tinker.wire.TOPICS` under NAMESPACE, and /diagnostics) with RELIABLE QoS, as a default
subscriber does, and calls list_parameters and describe_parameters of every node of the graph (again
after RETRY_S without an answer: a response sent before the server has matched the client's reader is
lost, a trait of ROS 2 services under load). It spins until PUBLISHERS of its subscriptions have matched
and every node has answered (at most SECONDS), stays SECONDS_AFTER more, and prints one line
``matched=<subscriptions matched> answered=<nodes answered>/<nodes> calls=<calls made> joined_s=<s>``
so the test knows the join was real (discovery ran both ways).
"""

from __future__ import annotations

import os
import sys
import time

NODES = ("sim_robot", "perception", "policy", "safety")
SECONDS_AFTER = 0.5
RETRY_S = 2.0


def main(namespace: str, publishers: int, seconds: float) -> None:
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rcl_interfaces.srv import DescribeParameters, ListParameters
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    from tinker.wire import TOPICS

    rclpy.init()
    node = rclpy.create_node(f"tinker_test_participant_{os.getpid()}")
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
    subs = [node.create_subscription(t.type, f"/{namespace}/{t.name}", lambda m: None, qos) for t in TOPICS.values()]
    subs.append(node.create_subscription(DiagnosticArray, "/diagnostics", lambda m: None, qos))
    clients = {n: (node.create_client(ListParameters, f"/{namespace}/{n}/list_parameters"),
                   node.create_client(DescribeParameters, f"/{namespace}/{n}/describe_parameters")) for n in NODES}
    asked: dict[str, tuple[float, list]] = {}  # node -> (when asked, its calls' futures)
    answered: set[str] = set()
    calls, matched = 0, 0
    start = time.monotonic()
    end, joined = start + seconds, None
    while time.monotonic() < end:
        now = time.monotonic()
        for n, (ls, desc) in clients.items():
            if n in answered or not (ls.service_is_ready() and desc.service_is_ready()):
                continue
            if n in asked and all(f.done() for f in asked[n][1]):
                answered.add(n)
            elif n not in asked or now - asked[n][0] > RETRY_S:
                asked[n] = (now, [ls.call_async(ListParameters.Request()), desc.call_async(
                    DescribeParameters.Request(names=["control_period", "input_timeout"]))])
                calls += 2
        rclpy.spin_once(node, timeout_sec=0.02)
        matched = sum(s.get_publisher_count() > 0 for s in subs)
        if joined is None and matched >= publishers and len(answered) == len(NODES):
            joined = time.monotonic() - start
            end = min(end, time.monotonic() + SECONDS_AFTER)
    print(f"matched={matched} answered={len(answered)}/{len(NODES)} calls={calls} joined_s={joined}", flush=True)
    # The join is done and reported. Leave without rclpy's teardown: in one CI run (2026-12-04) a participant
    # printed this line and then did not return from destroy_node/shutdown within 58 s, failing the test on the
    # tool's exit rather than on anything the loop did. Like a killed `ros2 topic echo`, it just goes.
    os._exit(0)


def quiet(seconds: float) -> None:
    import rclpy

    rclpy.init()
    node = rclpy.create_node(f"tinker_test_quiet_{os.getpid()}", start_parameter_services=False)
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        rclpy.spin_once(node, timeout_sec=0.1)
    print(f"stayed={time.monotonic() - start:.1f}", flush=True)
    os._exit(0)  # as main: no rclpy teardown


if __name__ == "__main__":
    if sys.argv[1] == "--quiet":
        quiet(float(sys.argv[2]))
    else:
        main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
