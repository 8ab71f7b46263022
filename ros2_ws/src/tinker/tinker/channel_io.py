"""Declared channels on the ROS 2 graph: the nodes' parameters, the wire format, the publisher watch.

The logic is ROS-free (`tinker_core.multiagent.channel_edge`: the sender's `ChannelOutbox` in the policy
cycle, the receiver's `ChannelInbox` in the perception cycle); this module only converts. A channel is the
topic ``/tinker/channels/NAME`` (`tinker_core.multiagent.channels.topic`: one shared absolute name, outside
every robot's namespace), std_msgs/Float32MultiArray, reliable, newest only; ``layout.dim[0]`` holds the
message's size and its label ``from=SENDER;stamp_ns=...;cycle=...`` (`tinker.wire`'s label encoding), the
sender's state stamp and cycle it was said in. `PublisherWatch` notices a second publisher on a channel topic
(another process speaking for the sender): counted, logged with the publishing nodes, shown in /diagnostics.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Callable

import numpy as np
from std_msgs.msg import Float32MultiArray

from tinker.runtime import Param
from tinker.wire import COMMAND_QOS, array_msg, meta_of
from tinker_core.multiagent.channel_edge import ChannelInbox, agent_channels
from tinker_core.multiagent.channels import ChannelSpec, channels_from_json, topic

CHANNEL_QOS = COMMAND_QOS
"""a channel's QoS: delivered, newest only (a receiver reads the newest message, never a queue)"""

CHANNEL_PARAMS = {
    "channels": Param("", "the agents file's channels section as JSON (tinker.fleet sets it from the file); empty: "
                          "this robot sends and hears nothing", read_only=True),
    "agent": Param("", "this robot's agent name in the channels (empty: its namespace without the '/')", read_only=True),
}
"""parameters of the perception (receiver) and policy (sender) nodes"""


def declared(node) -> tuple[str, ChannelSpec | None, tuple[ChannelSpec, ...]]:
    """(this robot's agent name, the channel it sends on or None, the channels it hears) from its parameters."""
    agent = str(node.get_parameter("agent").value) or node.get_namespace().strip("/")
    says, heard = agent_channels(channels_from_json(str(node.get_parameter("channels").value),
                                                    f"{node.get_name()}.channels"), agent)
    return agent, says, heard


def channel_msg(message: np.ndarray, sender: str, stamp_ns: int, cycle: int) -> Float32MultiArray:
    return array_msg(message, {"from": sender, "stamp_ns": stamp_ns, "cycle": cycle}, double=False)


def read_channel_msg(msg: Float32MultiArray) -> tuple[np.ndarray, str | None]:
    """(values, who it says it is from); unchecked: the receiver's inbox checks it against the channel's spec."""
    meta = meta_of(msg)
    return np.array(msg.data, dtype=np.float64), meta.get("from")


class PublisherWatch:
    """Counts the publishers of each channel topic (``check`` from a timer): more than ``expected`` is noticed,
    once per change, with the publishing nodes named."""

    def __init__(self, node, topics: list[str], expected: int = 1):
        self.node, self.topics, self.expected = node, list(topics), int(expected)
        self.counts = {t: 0 for t in self.topics}
        self.extra_seen = 0
        """checks that found more publishers than expected on a channel topic"""
        self.last = ""

    def check(self) -> None:
        for t in self.topics:
            infos = self.node.get_publishers_info_by_topic(t)
            n = len(infos)
            if n > self.expected:
                self.extra_seen += 1
                if n != self.counts[t]:
                    who = sorted(f"{i.node_namespace.rstrip('/')}/{i.node_name}" for i in infos)
                    self.last = f"{t}: {n} publishers {who}, expected {self.expected}"
                    self.node.get_logger().warning(f"channel topic with a second publisher: {self.last}")
            self.counts[t] = n

    @property
    def crowded(self) -> list[str]:
        return [t for t, n in self.counts.items() if n > self.expected]


class ChannelListener:
    """The receiving node's side: a subscription per heard channel (`tinker.runtime.NodeRuntime.watch_subscription`,
    its age reported, never judged) handing ``(name, values, sender)`` to ``on_message``, and the publisher watch."""

    def __init__(self, node, inbox: ChannelInbox, on_message: Callable[[str, np.ndarray, str | None], None]):
        self.inbox = inbox
        for ch in inbox.heard:
            node.watch_subscription(Float32MultiArray, topic(ch), partial(self._on, on_message, ch.name),
                                    CHANNEL_QOS, stale=None)
        self.watch = PublisherWatch(node, [topic(ch) for ch in inbox.heard])
        node.create_timer(1.0, self.watch.check)

    @staticmethod
    def _on(on_message, name: str, msg: Float32MultiArray) -> None:
        on_message(name, *read_channel_msg(msg))

    def values(self) -> dict[str, object]:
        w = self.watch
        return self.inbox.values(time.time_ns(), {ch.name: w.counts[topic(ch)] for ch in self.inbox.heard},
                                 w.extra_seen)

    def crowded(self) -> str:
        """Why the channels are crowded ('' = they are not): a second publisher, named."""
        return f"a second publisher on {self.watch.crowded}: {self.watch.last}" if self.watch.crowded else ""


class ChannelSpeaker:
    """The sending node's side: the publisher of the channel ``says`` (messages from ``agent``) and its watch.
    ``entities``: for `tinker.runtime.NodeRuntime.destroy_entities`."""

    def __init__(self, node, says: ChannelSpec, agent: str):
        self.says, self.agent = says, agent
        self.pub = node.create_publisher(Float32MultiArray, topic(says), CHANNEL_QOS)
        self.watch = PublisherWatch(node, [topic(says)])
        self.entities = [self.pub, node.create_timer(1.0, self.watch.check)]

    def say(self, message: np.ndarray, stamp_ns: int, cycle: int) -> None:
        self.pub.publish(channel_msg(message, self.agent, stamp_ns, cycle))

    def values(self, clipped: int) -> dict[str, object]:
        return {"channels.says": self.says.name, "channels.clipped": clipped,
                "channels.publishers": self.watch.counts[topic(self.says)],
                "channels.extra_publishers_seen": self.watch.extra_seen}

    def crowded(self) -> str:
        return self.watch.last if self.watch.crowded else ""


__all__ = ["CHANNEL_PARAMS", "CHANNEL_QOS", "ChannelListener", "ChannelSpeaker", "PublisherWatch", "channel_msg",
           "declared", "read_channel_msg", "topic"]
