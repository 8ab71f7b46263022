"""`CycleJoiner`: the live loop's messages joined by the robot's state stamp into cycles and transitions.

Five streams describe one control cycle k, each tagged with the stamp of the state it derives from: the
robot's outcome of reaching state k (reward, terminated, truncated, with the cycle and episode counters),
the features, the raw action, the policy's joint target and the safe command. The experience bridge hands
each message here as it comes; ``tinker replay import`` joins recorded cycles with the same rule,
`transition`.

The rule: cycle k and cycle k+1 make ``Transition(features_k, raw_action_k, reward_{k+1},
terminated_{k+1}, truncated_{k+1}, next_obs=features_{k+1})`` only when both are of the same episode,
k+1 directly follows k (no cycle lost in between), k has a raw action (a held cycle has none) and both
have features, the robot ran k's command (not the safety guard's hold: ``safety_status`` held or estopped, the
action had no effect), and k did not end its episode (a robot left at the goal without a reset reports the end on every
later state: none of those starts a transition until one no longer reports it; a recording marks them
``after_end``). An episode's last state is never joined to the next episode's first (the robot reset in
between), and a reward is always the one of the state that ``next_obs`` shows.

The cycle whose command the safety guard stopped, latching the e-stop on a collision it predicted (``safety_status``
collision), gives its transition with ``estop_reward`` added to the reward and ``info["safety_stop"] = True``: a
cost the learner pays for steering there (bootstrapped: the robot goes on after a reset, so a stop is not an
absorbing state, and a task whose rewards are negative must not see one as an escape). The held cycles after it give
none: without both, a fine-tuned policy learns nothing from the stops it causes, and learns from actions the robot
never ran as if it had.

A cycle a person took over (``intervention``: the safety node served it from a teleop target) gives a transition
whose action is ``intervention_action`` (the raw action that maps to the person's target; the policy's raw action
fills any dims after it, e.g. a suction) and ``info["intervention"] = True``, as human-in-the-loop learners (HIL-SERL)
use them; a flagged cycle without that action (a recording made by the view, which never sees it) gives none.
Every transition's ``info["stamp_ns"]`` is the stamp of the state it ends in (the robot's clock), from which the
learner measures the edge's latency (`tinker_core.transport.TransitionReceiver`'s flow monitor).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from tinker_core.transition import Transition

FIELDS = ("cycle", "episode", "state_stamp_ns", "features_recv_ns", "action_recv_ns", "command_recv_ns",
          "policy_input", "raw_action", "joint_target", "safe_command", "reward", "terminated", "truncated",
          "policy_version", "safety_status", "intervention", "intervention_action")
"""the fields of one cycle record (the MCAP recording's ``CycleRecord`` schema has the same)"""


HELD_STATUSES = ("held", "estopped")
"""safety statuses of a cycle whose command the robot never got (the guard sent its hold instead)"""
STOP_STATUS = "collision"
"""the safety status of the cycle whose command the guard stopped, latching the e-stop"""
ESTOP_REWARD = -5.0
"""the default cost of a stop: the sort task's success bonus (`tinker_sim.tasks.sort.SUCCESS_BONUS`), five times the
reach's"""


def new_cycle(stamp_ns: int = 0) -> dict[str, Any]:
    """An empty cycle record for the state stamped ``stamp_ns``."""
    return {"cycle": 0, "episode": 0, "state_stamp_ns": int(stamp_ns), "features_recv_ns": 0, "action_recv_ns": 0,
            "command_recv_ns": 0, "policy_input": [], "raw_action": [], "joint_target": [], "safe_command": [],
            "reward": 0.0, "terminated": False, "truncated": False, "policy_version": "", "safety_status": "",
            "intervention": False, "intervention_action": []}


def no_transition(cur: Mapping[str, Any], nxt: Mapping[str, Any] | None) -> str | None:
    """Why the rule above gives no transition from cycle record ``cur`` to ``nxt`` (None: it gives one; ``nxt`` None:
    the next cycle's outcome never came, ``no_next``)."""
    if len(cur["raw_action"]) == 0:
        return "no_action"
    if cur.get("safety_status", "") in HELD_STATUSES:
        return "not_executed"
    if nxt is None:
        return "no_next"
    if len(cur["policy_input"]) == 0 or len(nxt["policy_input"]) == 0:
        return "no_features"
    if int(nxt["episode"]) != int(cur["episode"]):
        return "episode_changed"
    if int(nxt["cycle"]) != int(cur["cycle"]) + 1:
        return "cycle_lost"
    if cur["terminated"] or cur["truncated"] or cur.get("after_end") or nxt.get("after_end"):
        return "episode_ended"  # no transition starts where the episode ended (a robot at the goal, not reset, says so again)
    if cur.get("intervention") and len(cur.get("intervention_action", [])) == 0:
        return "no_person_action"  # a person took this cycle over and their action is unknown: none is better
    return None


def transition(cur: Mapping[str, Any], nxt: Mapping[str, Any], info: Mapping[str, Any] | None = None,
               estop_reward: float = ESTOP_REWARD) -> Transition | None:
    """The transition from cycle record ``cur`` to ``nxt`` (both with their outcome), or None when the rule
    above gives none; ``estop_reward`` is added where ``cur``'s command was stopped."""
    return None if no_transition(cur, nxt) is not None else _joined(cur, nxt, info, estop_reward)


def _joined(cur: Mapping[str, Any], nxt: Mapping[str, Any], info: Mapping[str, Any] | None,
            estop_reward: float) -> Transition:
    action, extra, reward = np.asarray(cur["raw_action"], dtype=np.float32), {}, float(nxt["reward"])
    if cur.get("safety_status", "") == STOP_STATUS:
        reward, extra = reward + float(estop_reward), {"safety_stop": True}
    if cur.get("intervention"):
        person = np.asarray(cur["intervention_action"], dtype=np.float32).reshape(-1)
        action, extra = np.concatenate([person, action[person.shape[0]:]]), {**extra, "intervention": True}
    return Transition(obs=np.asarray(cur["policy_input"], dtype=np.float32), action=action,
                      reward=reward, terminated=bool(nxt["terminated"]), truncated=bool(nxt["truncated"]),
                      info={"policy_version": cur["policy_version"], "safety_status": cur["safety_status"],
                            "cycle": int(cur["cycle"]), "stamp_ns": int(nxt.get("state_stamp_ns", 0)), **(info or {}),
                            **extra},
                      next_obs=np.asarray(nxt["policy_input"], dtype=np.float32))


def transitions(records: Iterable[Mapping[str, Any]], info: Mapping[str, Any] | None = None,
                estop_reward: float = ESTOP_REWARD) -> list[Transition]:
    """The transitions of consecutive recorded cycles (each record holds its outcome)."""
    recs = list(records)
    return [t for t in (transition(a, b, info, estop_reward) for a, b in zip(recs, recs[1:])) if t is not None]


@dataclass
class Closed:
    """A cycle no more messages will change: its record, and the transition it starts (if any)."""

    record: dict[str, Any]
    transition: Transition | None


EARLY_KEPT = 8
"""cycles whose command or intervention came before the cycle opened, kept for it (`CycleJoiner._attach`)"""


class CycleJoiner:
    """Open cycles by state stamp; a cycle closes once ``window`` later cycles are open (cycle k is final
    once k+1's features and k+2's outcome are in), or on `flush`. Messages of a closed cycle are ignored."""

    def __init__(self, window: int = 3, info: Mapping[str, Any] | None = None, estop_reward: float = ESTOP_REWARD):
        self.window = int(window)
        self.info = dict(info or {})
        self.estop_reward = float(estop_reward)
        """added to the reward of the transition whose command the guard stopped (`transition`)"""
        self.not_executed = self.stops = 0
        """cycles with an action the guard held instead of running (no transition); transitions of a stop"""
        self.stops_lost: dict[str, int] = {}
        """cycles the guard stopped that gave no transition (the learner never paid for them), by `no_transition`'s
        reason"""
        self._open: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._outcome: set[int] = set()
        self._closed_upto = -1
        self.incomplete = 0
        """cycles closed without their outcome (the robot's message for that state never came)"""
        self.interventions_without_action = 0
        """cycles flagged as a person's that closed before the person's action came (they give no transition)"""
        self.interventions_lost: dict[str, int] = {}
        """a person's cycles that gave no transition, by `no_transition`'s reason (``no_next``: the next cycle's
        outcome never came)"""
        self._early: OrderedDict[int, dict[str, Any]] = OrderedDict()
        """command and intervention fields that came before their cycle opened (a subscriber's executor takes ready
        topics in its own order, not in the order they were sent): applied when it opens, the oldest dropped
        beyond ``EARLY_KEPT`` (a stop's command never opens a cycle and ages out here)"""

    def _rec(self, stamp: int) -> dict[str, Any] | None:
        if stamp <= self._closed_upto:
            return None  # late: that cycle is written already
        rec = self._open.get(stamp)
        if rec is None:
            rec = self._open[stamp] = new_cycle(stamp)
            rec.update(self._early.pop(stamp, {}))
        return rec

    def _attach(self, stamp: int, **fields: Any) -> None:
        """Fields that never open a cycle: onto the open cycle of ``stamp``, or kept for when it opens (none if it is
        written already)."""
        rec = self._open.get(stamp)
        if rec is not None:
            rec.update(fields)
        elif stamp > self._closed_upto:
            self._early.setdefault(stamp, {}).update(fields)
            while len(self._early) > EARLY_KEPT:
                self._early.popitem(last=False)

    def outcome(self, stamp: int, cycle: int, episode: int, reward: float, terminated: bool,
                truncated: bool) -> list[Closed]:
        """The robot reached the state stamped ``stamp``; returns the cycles this closes."""
        rec = self._rec(stamp)
        if rec is None:
            return []
        rec.update(cycle=int(cycle), episode=int(episode), reward=float(reward), terminated=bool(terminated),
                   truncated=bool(truncated))
        self._outcome.add(stamp)
        out = []
        while len(self._open) > self.window:
            out += self._close()
        return out

    def features(self, stamp: int, values: np.ndarray, recv_ns: int = 0) -> None:
        rec = self._rec(stamp)
        if rec is not None:
            rec["policy_input"], rec["features_recv_ns"] = values, recv_ns

    def action(self, stamp: int, raw: np.ndarray, version: str = "", recv_ns: int = 0) -> None:
        rec = self._rec(stamp)
        if rec is not None:
            rec["raw_action"], rec["action_recv_ns"], rec["policy_version"] = raw, recv_ns, version

    def target(self, stamp: int, values: np.ndarray) -> None:
        rec = self._rec(stamp)
        if rec is not None:
            rec["joint_target"] = values

    def command(self, stamp: int, values: np.ndarray, status: str = "", recv_ns: int = 0) -> None:
        # never opens a cycle: a stop, or a command for a cycle written already
        self._attach(stamp, safe_command=values, command_recv_ns=recv_ns, safety_status=status)

    def intervention(self, stamp: int, action: np.ndarray | None = None) -> None:
        """The cycle of ``stamp`` was served from a person's target; ``action``: the raw action that maps to it
        (None: only the flag, from the command; the action may come later)."""
        fields: dict[str, Any] = {"intervention": True}
        if action is not None:
            fields["intervention_action"] = np.asarray(action, dtype=np.float64)
        self._attach(stamp, **fields)  # never opens a cycle, as a command does not

    @property
    def newest_cycle(self) -> int | None:
        """The robot's cycle counter of the newest state whose outcome has come (None before any)."""
        cycles = [int(self._open[s]["cycle"]) for s in self._outcome if s in self._open]
        return max(cycles) if cycles else None

    def flush(self) -> list[Closed]:
        """Close every open cycle (at shutdown)."""
        out = []
        while self._open:
            out += self._close()
        return out

    def _close(self) -> list[Closed]:
        stamp, rec = self._open.popitem(last=False)
        self._closed_upto = max(self._closed_upto, stamp)
        if stamp not in self._outcome:
            self.incomplete += 1
            return []  # fragments of a cycle whose outcome never came: no record, no transition
        self._outcome.discard(stamp)
        if rec["intervention"] and len(rec["intervention_action"]) == 0:
            self.interventions_without_action += 1
        nxt_stamp = next(iter(self._open), None)
        nxt = self._open.get(nxt_stamp) if nxt_stamp in self._outcome else None
        why = no_transition(rec, nxt)
        if why is None and nxt is not None:
            self.stops += rec["safety_status"] == STOP_STATUS
            return [Closed(rec, _joined(rec, nxt, self.info, self.estop_reward))]
        self.not_executed += why == "not_executed"
        for flagged, lost in ((rec["safety_status"] == STOP_STATUS, self.stops_lost),
                              (rec["intervention"], self.interventions_lost)):
            if flagged:
                lost[why] = lost.get(why, 0) + 1
        return [Closed(rec, None)]
