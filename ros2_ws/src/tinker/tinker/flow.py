"""The flow of a running ROS 2 graph, edge by edge: message rate, bytes and latency per topic.

A `FlowWatcher` is a plain rclpy node outside the loop (its own process: ``tinker flow``). It subscribes to every
topic `wire.TOPICS` declares, under the graph's namespace, with the type declared there (a command topic switched
to JointTrajectory is not seen), as serialized messages (the size on the wire is the byte count), and feeds `tinker_core.monitor.FlowMonitor`, the same monitor the in-process pipeline reports with.
An edge's latency is its arrival time minus the stamp of the robot state it derives from: ``header.stamp`` where
the message has a header, the ``stamp_ns`` metadata of the loop's MultiArrays otherwise. Both are the robot's
clock, so a driver on another machine needs synchronized clocks for the latency column (rate and bytes need none).
"""

from __future__ import annotations

import time
from typing import Any

from rclpy.node import Node
from rclpy.serialization import deserialize_message

from tinker import wire
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


class FlowWatcher:
    """Subscribes to the graph's topics and keeps a `FlowMonitor` of them (one edge per topic)."""

    def __init__(self, node: Node, namespace: str = "", window: int = 4096):
        self.node = node
        self.monitor = FlowMonitor(window)
        self.unstamped: dict[str, int] = {}
        ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
        self._subs = []
        for topic in wire.TOPICS.values():
            self._subs.append(node.create_subscription(topic.type, f"{ns}/{topic.name}",
                                                       self._callback(topic.name, topic.type), topic.qos, raw=True))

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
