"""The flow of a running ROS 2 graph, edge by edge: message rate, bytes and latency per topic.

A `FlowWatcher` is a plain rclpy node outside the loop (its own process: ``tinker flow``). It subscribes to every
edge of the loop's graph (`tinker_core.loop.graph.ROBOT_LOOP`), on the topic `wire.TOPICS` declares for it, under
the graph's namespace, with the type declared there (a command topic switched to JointTrajectory is not seen), as
serialized messages (the size on the wire is the byte count), and feeds `tinker_core.monitor.FlowMonitor`, the same
monitor the in-process pipeline reports with.
An edge's latency is its arrival time minus the stamp of the robot state it derives from: ``header.stamp`` where
the message has a header, the ``stamp_ns`` metadata of the loop's MultiArrays otherwise. Both are the robot's
clock, so a driver on another machine needs synchronized clocks for the latency column (rate and bytes need none).

A new participant needs discovery before any message reaches it, and each node of the graph is matched on its own:
on a loaded machine 0.4-2.9 s apart (issue 22: a 4 s window counted 34 joint targets and 4 commands, the safety
node's writer matched 3.6 s late). So a window is measured from `restart`, once `unmatched` is empty: every edge of
the loop (`LOOP_EDGES`) has a matched publisher.
"""

from __future__ import annotations

import time
from typing import Any

from rclpy.node import Node
from rclpy.serialization import deserialize_message

from tinker import wire
from tinker_core.loop.graph import ROBOT_LOOP
from tinker_core.monitor import FlowMonitor


def _stamp_ns(msg: Any) -> int | None:
    header = getattr(msg, "header", None)
    if header is not None:
        ns = wire.stamp_ns(header)
        return ns or None
    if hasattr(msg, "layout"):
        v = wire.meta_of(msg).get("stamp_ns")
        return int(v) if v and v.lstrip("-").isdigit() else None
    return None


LOOP_EDGES = tuple(e.port for e in ROBOT_LOOP.edges if e.every_cycle)
"""The edges every running loop publishes each cycle (`tinker_core.loop.graph.ROBOT_LOOP`): state, features, the
policy's target, the safe command."""


class FlowWatcher:
    """Subscribes to the graph's topics and keeps a `FlowMonitor` of them (one edge per topic)."""

    def __init__(self, node: Node, namespace: str = "", window: int = 4096):
        self.node = node
        self.window = window
        self.monitor = FlowMonitor(window)
        self.unstamped: dict[str, int] = {}
        ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
        self._subs = []
        self._loop_subs = {}
        self.ends: dict[str, str] = {}
        """topic -> the edge's ends in the loop's graph ("perception -> policy, experience_bridge")"""
        for edge in ROBOT_LOOP.topics:  # the ZeroMQ edges: `tinker learner ctl status`
            topic = wire.TOPICS[edge.port]
            sub = node.create_subscription(topic.type, f"{ns}/{topic.name}", self._callback(topic.name, topic.type),
                                           topic.qos, raw=True)
            self._subs.append(sub)
            self.ends[topic.name] = edge.ends
            if edge.every_cycle:
                self._loop_subs[topic.name] = sub

    def unmatched(self) -> list[str]:
        """The loop's edges (`LOOP_EDGES`) this node has no matched publisher on yet (discovery still under way)."""
        return [name for name, sub in self._loop_subs.items() if sub.get_publisher_count() == 0]

    def silent(self) -> list[str]:
        """The graph's topics no message came on in the window (an edge that only carries events, such as the
        sensor's episode ends or an e-stop, or a node that is not there)."""
        counted = set(self.monitor.names())
        return [name for name in self.ends if name not in counted]

    def restart(self) -> None:
        """Forget what was counted so far: the window starts now."""
        self.monitor = FlowMonitor(self.window)
        self.unstamped = {}

    def _callback(self, name: str, msg_type: type):
        def cb(raw: bytes) -> None:
            now = time.time_ns()
            stamp = _stamp_ns(deserialize_message(raw, msg_type))
            if stamp is None:
                self.unstamped[name] = self.unstamped.get(name, 0) + 1
                latency = float("nan")
            else:
                latency = (now - stamp) / 1e9
            self.monitor.record(name, len(raw), latency, now / 1e9)
        return cb

    def snapshot(self) -> dict[str, dict[str, float]]:
        return self.monitor.snapshot()

    def close(self) -> None:
        for s in self._subs:
            self.node.destroy_subscription(s)
        self._subs.clear()
