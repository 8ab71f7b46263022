"""`PolicyCycle`: features -> actor -> action chain, each cycle on its own state's measured pose (no ROS).

Features and joint states arrive separately, tagged with the robot's state stamp. A cycle runs when
both of one stamp are in (features that come first wait for their state). A new episode (the episode
tag of the features changes) or a new action chain restarts the chain from that cycle's measured pose; a new
episode also calls ``on_episode`` before the actor runs (a hierarchical actor starts it with a fresh decision).
A robot that sends on a channel (``outbox``, `tinker_core.multiagent.channel_edge.ChannelOutbox`) splits the
actor's output: the action part goes through the chain, the message (checked, clipped) is the step's
``message`` and never reaches the chain, safety or the robot. With ``latency_compensation`` periods (a robot whose
commands land late, `tinker_core.loop.latency_compensation`) the chain steps from the pose the newest safe command
of the episode (``on_command``) brings the arm to, and the task's extra actions are sent that many cycles late; the
features say which latency perception compensated them for, and the cycle follows that (``latency_auto``).
A reacher's ``goal_hold`` (`tinker_core.loop.goal_hold`) holds the pose reached at the goal instead of the actor's step.
`CommandGate`: whether a node's step goes out (active, within its budget) and the node's level.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tinker_core.action_chain import ActionChain
from tinker_core.errors import ConfigError
from tinker_core.loop.input_ages import Level, RecentFaults
from tinker_core.loop.latency_compensation import DelayedActions, NewestCommand, check_steps, predicted_pose


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
    extra: np.ndarray | None = None
    """the task's extra actions as sent to the robot (the raw dims after the joints; None: the task has none)"""
    held: bool = False
    """the reach's goal was reached: ``target`` is the pose held there, ``raw`` the action that maps to it
    (`tinker_core.loop.goal_hold.GoalHold`), not the actor's"""


class PolicyCycle:
    """``actor(features, perception_sha256) -> raw action``; ``chain``: the bundle's action chain; ``outbox``: the
    `ChannelOutbox` of the channel this robot sends on (None: none); ``goal_hold``: a reach's hold at its goal
    (`tinker_core.loop.goal_hold.GoalHold`; None: the actor acts every cycle)."""

    def __init__(self, actor: Callable[[np.ndarray, str], np.ndarray], chain: ActionChain, keep: int = 8,
                 outbox: Any = None, on_episode: Callable[[], None] | None = None, latency_compensation: int = 0,
                 goal_hold: Any = None, latency_auto: bool = False):
        self.actor, self.chain, self.keep, self.outbox = actor, chain, int(keep), outbox
        self.on_episode, self.goal_hold, self._held = on_episode, goal_hold, False
        self.latency_compensation = check_steps(latency_compensation, "policy.latency_compensation")
        self.latency_auto = bool(latency_auto)
        """the compensated latency may change to a measured one (it hears the safe command even at 0)"""
        self._commanded = NewestCommand(chain.dof, "policy")
        self._episode_start_ns = -1
        self._delayed: DelayedActions | None = None
        self._q: OrderedDict[int, np.ndarray] = OrderedDict()
        self.q_latest: np.ndarray | None = None
        self._waiting: tuple | None = None
        self._episode: str | None = None

    @property
    def compensates(self) -> bool:
        """Whether it compensates a command latency, now or once one is measured (it hears the safe command)."""
        return bool(self.latency_compensation or self.latency_auto)

    def restart(self, chain: ActionChain | None = None) -> None:
        """The next cycle starts the chain (or ``chain``) afresh from its measured pose."""
        self.chain = chain or self.chain
        self._episode = None

    def on_command(self, stamp_ns: int, q: np.ndarray) -> None:
        """The safe command answering state ``stamp_ns`` (joint targets, the bundle's order): with latency
        compensation, the newest one is the pose the chain steps from."""
        self._commanded.note(stamp_ns, q)

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
                    perception_sha256: str = "", compensated: int | None = None) -> PolicyStep | None:
        """The cycle's step, or None while its state has not come (the actor raises on bad features).
        ``compensated``: the latency perception compensated these features for (None: not said); with
        ``latency_auto`` the chain and the extra actions follow it from this cycle on."""
        q = self._q.get(stamp_ns)
        if q is None:  # the chain needs this cycle's measured pose: wait for its JointState
            self._waiting = (stamp_ns, features, cycle, episode, perception_sha256, compensated)
            return None
        if self.latency_auto and compensated is not None and compensated != self.latency_compensation:
            self.latency_compensation = check_steps(compensated, "policy.features.latency_compensation")
            if self._delayed is not None:
                self._delayed.resize(self.latency_compensation)
        if episode != self._episode:
            if self.on_episode is not None:
                self.on_episode()  # before the actor: this episode's first action comes from a fresh start
            self._episode, self._episode_start_ns, self._delayed = episode, int(stamp_ns), None
            self.chain.reset(q)
            if self.goal_hold is not None:
                self.goal_hold.reset()
        raw = self.actor(features, perception_sha256)  # every cycle, held or not: a swapped bundle goes live in step
        message = None
        if self.outbox is not None:
            raw, message = self.outbox.split(raw)  # raises on a non-finite message: this cycle is held
        hold = None if self.goal_hold is None else self.goal_hold.step(features, q)
        if hold is not None:
            self._held = True
            return PolicyStep(stamp_ns, cycle, self.chain.invert(hold, q), hold, message, held=True)
        if self._held:  # the hold ended: the chain steps from this cycle's measured pose again
            self._held = False
            self.chain.reset(q)
        dof = self.chain.dof
        extra = raw[dof:] if raw.shape[0] > dof else None
        if extra is not None:
            if self._delayed is None:
                self._delayed = DelayedActions(self.latency_compensation, raw.shape[0] - dof)
            extra = self._delayed(extra)
        base = predicted_pose(self._commanded.since(self._episode_start_ns), q, self.latency_compensation,
                              self.chain.config.max_step)  # the measured pose where nothing is compensated
        return PolicyStep(stamp_ns, cycle, raw, self.chain(raw[:dof], base), message, extra)


ON_OVERRUN = ("hold", "stop")
"""what a policy node does with a cycle over its budget: drop that command, or stop commanding"""


def check_on_overrun(value: object) -> str:
    """``value`` as an ``on_overrun`` setting; raises ConfigError naming the choices."""
    if value not in ON_OVERRUN:
        raise ConfigError(f"policy.on_overrun: expected 'hold' or 'stop', got {value!r}")
    return str(value)


class CommandGate:
    """Whether a policy node's step goes out, and the node's level (no ROS).

    The node commands only while active (its lifecycle: `activate`, `deactivate`). A step over the cycle's budget
    is never sent (safety holds that cycle): ``on_overrun`` ``hold`` drops just that command, ``stop`` also stops
    commanding until the next activation, an ERROR until then. Refused inputs are a WARN while they go on.
    """

    def __init__(self) -> None:
        self.active = False
        self.stopped_by_overrun = False
        self.refusals = RecentFaults()
        self.last_error = ""
        """why the last configure failed ('' = it did not)"""

    def activate(self) -> None:
        self.active, self.stopped_by_overrun = True, False

    def deactivate(self) -> None:
        self.active = False

    def overran(self, on_overrun: str) -> None:
        """A step took longer than its budget: it is not sent; ``stop`` stops commanding."""
        if on_overrun == "stop":
            self.active, self.stopped_by_overrun = False, True

    def level(self, version: object | None, crowded: str = "") -> tuple[Level, str]:
        """``version``: the running bundle's (None: unconfigured); ``crowded``: a second publisher on this robot's
        channel, named ('' = none)."""
        if self.stopped_by_overrun:
            return Level.ERROR, "stopped after an overrun (on_overrun: stop)"
        if version is None or not self.active:
            return Level.WARN, "unconfigured" if version is None else "inactive: not commanding"
        level, message = self.refusals.level()  # WARN while inputs are being refused, OK once they stop
        if level:
            return Level.WARN, message
        if crowded:
            return Level.WARN, f"a second publisher on this robot's channel: {crowded}"
        return Level.OK, f"commanding with bundle v{version}"

    @staticmethod
    def stop_meta(version: object) -> dict[str, object]:
        """The metadata of the stop: a hold at the measured pose, which the safety node passes through its guard."""
        return {"stamp_ns": 0, "cycle": 0, "version": version, "stop": 1}
