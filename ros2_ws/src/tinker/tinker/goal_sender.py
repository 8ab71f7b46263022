"""`send_goal`: one goal to a running graph, and what became of it (``tinker goal``: ``ros2 topic pub`` for an install
without ros2cli).

It publishes a geometry_msgs/PointStamped on the graph's ``goal`` topic (the wire format of `tinker.wire.TOPICS`,
stamped now), once something subscribes, and then reads the simulated robot's /diagnostics: its ``goal`` taken, or
its ``refused_goals`` counted with the reason (`tinker_sim.robot_loop.SimRobotLoop.set_goal`). A real robot's graph
has no simulated robot; there the goal is reported sent to the subscribers it had.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from tinker_core.errors import ConfigError


@dataclass
class GoalResult:
    outcome: str
    """'taken', 'refused', 'sent' (no simulated robot reported on it) or 'unheard' (nothing subscribed)"""
    message: str
    subscribers: int = 0


def send_goal(node, executor, namespace: str, point: Sequence[float], frame: str = "", timeout: float = 10.0
              ) -> GoalResult:
    """Publish ``point`` (base frame, m; ``frame``: header.frame_id) on ``namespace``'s goal topic from ``node``
    (spun by ``executor``) and wait up to ``timeout`` s for the simulated robot to take or refuse it."""
    import math

    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import PointStamped

    from tinker.wire import TOPICS, set_stamp

    if len(point) != 3 or not all(math.isfinite(float(v)) for v in point):
        raise ConfigError(f"tinker goal: expected three finite numbers X Y Z (m, base frame), got {list(point)}")
    ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
    topic, robot = f"{ns}/{TOPICS['goal'].name}", f"{ns}/sim_robot"
    seen: list[dict[str, str]] = []

    def on_diag(msg) -> None:
        seen.extend({"t": str(time.monotonic()), **{kv.key: kv.value for kv in s.values}, "_message": s.message}
                    for s in msg.status if s.name == robot)

    sub = node.create_subscription(DiagnosticArray, "/diagnostics", on_diag, 50)
    pub = node.create_publisher(PointStamped, topic, TOPICS["goal"].qos)
    end = time.monotonic() + timeout
    try:
        while pub.get_subscription_count() == 0 and time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
        n = pub.get_subscription_count()
        if n == 0:
            return GoalResult("unheard", f"nothing subscribes to {topic} (is the graph running, on this "
                                         f"ROS_DOMAIN_ID, in namespace {namespace or '(none)'}?)")
        while not seen and time.monotonic() < end and node.count_publishers("/diagnostics"):
            executor.spin_once(timeout_sec=0.05)  # the robot's counters before the goal
        before = seen[-1] if seen else {}
        msg = PointStamped()
        msg.point.x, msg.point.y, msg.point.z = (float(v) for v in point)
        msg.header.frame_id = frame
        sent = time.monotonic()
        set_stamp(msg.header, time.time_ns())
        pub.publish(msg)
        if not before:  # no simulated robot reports here: a real robot's graph
            return GoalResult("sent", f"sent to {n} subscriber(s) of {topic}", n)
        while time.monotonic() < end:
            executor.spin_once(timeout_sec=0.05)
            after = [s for s in seen if float(s["t"]) > sent]
            if not after:
                continue
            s = after[-1]
            if int(s.get("refused_goals", 0)) > int(before.get("refused_goals", 0)):
                return GoalResult("refused", f"{robot} refused it: {s.get('last_goal_error', '')}", n)
            if int(s.get("goals", 0)) > int(before.get("goals", 0)):
                return GoalResult("taken", f"{robot} took it: goal {s.get('goal')} m, episode {s.get('episode')}", n)
        return GoalResult("sent", f"sent to {n} subscriber(s) of {topic}; {robot} did not report on it within "
                                  f"{timeout:g} s", n)
    finally:
        node.destroy_publisher(pub)
        node.destroy_subscription(sub)
