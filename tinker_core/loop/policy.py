"""`PolicyCycle`: features -> actor -> action chain, each cycle on its own state's measured pose (no ROS).

Features and joint states arrive separately, tagged with the robot's state stamp. A cycle runs when
both of one stamp are in (features that come first wait for their state). A new episode (the episode
tag of the features changes) or a new action chain restarts the chain from that cycle's measured pose; a new
episode also calls ``on_episode`` before the actor runs (a hierarchical actor starts it with a fresh decision).
A robot that sends on a channel (``outbox``, `tinker_core.multiagent.channel_edge.ChannelOutbox`) splits the
actor's output: the action part goes through the chain, the message (checked, clipped) is the step's
``message`` and never reaches the chain, safety or the robot.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tinker_core.action_chain import ActionChain


@dataclass(slots=True)
class PolicyStep:
    stamp_ns: int
    cycle: int
    raw: np.ndarray
    """the actor's output (what the learner learns from); dims after the joints (a task's extra actions, e.g.
    ArmSort's suction) are in here only, not in the joint target"""
    target: np.ndarray
    """the action chain's joint target (rad, manifest joint order)"""
    message: np.ndarray | None = None
    """what this cycle says on its channel (None: the robot sends on none)"""


class PolicyCycle:
    """``actor(features, perception_sha256) -> raw action``; ``chain``: the bundle's action chain; ``outbox``: the
    `ChannelOutbox` of the channel this robot sends on (None: none)."""

    def __init__(self, actor: Callable[[np.ndarray, str], np.ndarray], chain: ActionChain, keep: int = 8,
                 outbox: Any = None, on_episode: Callable[[], None] | None = None):
        self.actor, self.chain, self.keep, self.outbox = actor, chain, int(keep), outbox
        self.on_episode = on_episode
        self._q: OrderedDict[int, np.ndarray] = OrderedDict()
        self.q_latest: np.ndarray | None = None
        self._waiting: tuple | None = None
        self._episode: str | None = None

    def restart(self, chain: ActionChain | None = None) -> None:
        """The next cycle starts the chain (or ``chain``) afresh from its measured pose."""
        self.chain = chain or self.chain
        self._episode = None

    def on_state(self, stamp_ns: int, q: np.ndarray) -> PolicyStep | None:
        """Keep this state's pose; runs the cycle whose features were waiting for it."""
        self.q_latest = q
        self._q[stamp_ns] = q
        while len(self._q) > self.keep:
            self._q.popitem(last=False)
        if self._waiting is not None and self._waiting[0] == stamp_ns:
            args, self._waiting = self._waiting, None
            return self.on_features(*args)
        return None

    def on_features(self, stamp_ns: int, features: np.ndarray, cycle: int = 0, episode: str = "",
                    perception_sha256: str = "") -> PolicyStep | None:
        """The cycle's step, or None while its state has not come (the actor raises on bad features)."""
        q = self._q.get(stamp_ns)
        if q is None:  # the chain needs this cycle's measured pose: wait for its JointState
            self._waiting = (stamp_ns, features, cycle, episode, perception_sha256)
            return None
        if episode != self._episode and self.on_episode is not None:
            self.on_episode()  # before the actor: this episode's first action comes from a fresh start
        raw = self.actor(features, perception_sha256)
        message = None
        if self.outbox is not None:
            raw, message = self.outbox.split(raw)  # raises on a non-finite message: this cycle is held
        if episode != self._episode:
            self._episode = episode
            self.chain.reset(q)
        return PolicyStep(stamp_ns, cycle, raw, self.chain(raw[: self.chain.dof], q), message)
