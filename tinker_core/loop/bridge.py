"""`ExperienceBridge`: the experience bridge's work without ROS: a cycle's streams in, transitions to the learner out.

The ``experience_bridge`` node turns each message into one call here and nothing more. Per stream: the state's
outcome (`task`: the simulator's reward and episode end; with a success sensor, `tinker_core.loop.sensor_reward`,
only its cycle and episode counters, the reward coming from the sensor on the state's features), the features, the
raw action, the joint target and the safe command go into `tinker_core.loop.cycle_join.CycleJoiner`; each cycle it
closes goes to the recording (``recorder.write``), each transition waits in `tinker_core.loop.episode_label.
EpisodeLabels` while it is its episode's newest (a person may label the episode), then goes to the learner
(``sender.send``: `tinker_core.transport.TransitionSender`, drop-on-full, never blocking).

A person in the loop: a cycle the safety node served from a teleop target (``intervened``: target, then measured
pose) gets the raw action that maps to that target through the running bundle's action chain (``chain``, which the
host keeps current: `tinker_core.action_chain.ActionChain.invert`).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from tinker_core.errors import TinkerError, ValidationError
from tinker_core.loop.cycle_join import ESTOP_REWARD, CycleJoiner
from tinker_core.loop.episode_label import EpisodeLabels, Labelled, LabelRecord
from tinker_core.loop.sensor_reward import Outcome, SensorOutcome


class ExperienceBridge:
    """The bridge's state and rules; ``sender`` (``send(t)``, ``sent``, ``dropped``), ``recorder`` (``write(record,
    t_ns)``, ``write_label(label, t_ns)``, ``count``) and ``sensed`` (a `SensorOutcome`, None: the simulator's
    rewards) are optional. ``wall_ns``: receive times for the records. ``estop_reward``: the cost of a stop the
    policy's command caused (`tinker_core.loop.cycle_join`; cycles the guard held give no transition)."""

    def __init__(self, labels: EpisodeLabels, sender: Any = None, recorder: Any = None,
                 sensed: SensorOutcome | None = None, info: dict[str, Any] | None = None,
                 wall_ns: Callable[[], int] | None = None, estop_reward: float = ESTOP_REWARD):
        self.join = CycleJoiner(info={**(info or {}), **({"reward_source": "sensors"} if sensed is not None else {})},
                                estop_reward=estop_reward)
        self.labels, self.sender, self.recorder, self.sensed = labels, sender, recorder, sensed
        self.wall_ns = wall_ns or time.time_ns
        self.chain: Any = None
        """the running bundle's action chain (``invert(target, q)``); None: a person's cycle gives no transition"""
        self.chain_bundle = ""
        self.transitions = self.intervention_transitions = self.interventions = 0
        self.last_error = ""
        self.last_labelled = None
        """the transition the newest label applied to (None: that label found no episode)"""
        self.on_success: Callable[[int, int], None] | None = None
        """called with (state stamp, episode) at the state where the success sensor ended an episode done, once per
        episode (`tinker_core.loop.bridge_stage.BridgeStage` ends it on the robot: the ``episode_end`` edge)"""

    # --- the streams ------------------------------------------------------------------------------
    def task(self, stamp: int, cycle: int, episode: int, reward: float, success: bool, done: bool, now: float) -> None:
        """The robot's state counters and its outcome (reward, success, end) from the ``task`` terms."""
        if self.sensed is not None:  # the simulator's reward and success never reach the learner: counters only
            return self._sensed(self.sensed.counters(stamp, cycle, episode), now)
        self._emit(self.join.outcome(stamp, cycle, episode, reward, terminated=success,
                                     truncated=done and not success), now)

    def features(self, stamp: int, values: np.ndarray, now: float) -> None:
        values = np.asarray(values, dtype=np.float32)
        self.join.features(stamp, values, self.wall_ns())
        if self.sensed is not None:
            self._sensed(self.sensed.features(stamp, values), now)

    def action(self, stamp: int, raw: np.ndarray, version: str = "") -> None:
        self.join.action(stamp, np.asarray(raw), version, self.wall_ns())

    def target(self, stamp: int, values: np.ndarray) -> None:
        self.join.target(stamp, np.asarray(values))

    def command(self, stamp: int, values: np.ndarray, status: str = "", intervention: bool = False) -> None:
        """The safe command; ``intervention``: the safety node served it from a person's target (flagged even
        should that target never come: no transition then)."""
        self.join.command(stamp, np.asarray(values), status, self.wall_ns())
        if intervention:
            self.join.intervention(stamp)

    def intervened(self, stamp: int, target_and_pose: np.ndarray) -> None:
        """A cycle served from a person's target: ``[target..., measured pose...]``. Raises `ValidationError`
        while no action chain is known."""
        if self.chain is None:
            raise ValidationError("experience_bridge.intervened", "the running bundle's action chain",
                                  "none known yet (the policy node's bundle parameter not read)")
        v = np.asarray(target_and_pose, dtype=np.float64)
        n = v.shape[0] // 2
        self.join.intervention(stamp, self.chain.invert(v[:n], v[n:]))
        self.interventions += 1

    # --- labels and time --------------------------------------------------------------------------
    def label(self, success: bool, now: float) -> Labelled:
        """A person's label of an episode (`EpisodeLabels.label`); the labelled transition goes out at once and
        into the recording (`tinker replay import` applies it too)."""
        done, released = self.labels.label(bool(success), now)
        if done.episode is not None and self.recorder is not None and released:
            t_ns = self.wall_ns()
            self.recorder.write_label(LabelRecord.of(done.episode, released[0], t_ns), t_ns)
        self._send(released)
        self.last_labelled = released[0] if done.episode is not None and released else None
        return done

    def tick(self, now: float) -> None:
        """Send what waited its label window out."""
        self._send(self.labels.release(now))

    def flush(self, now: float) -> None:
        """At shutdown: close every open cycle and send everything held."""
        self._emit(self.join.flush(), now)
        self._send(self.labels.flush())

    # --- out ----------------------------------------------------------------------------------------
    def _sensed(self, o: Outcome | None, now: float) -> None:
        if o is not None:
            if o.ends_here and o.terminated and self.on_success is not None:
                self.on_success(o.stamp, o.episode)
            self._emit(self.join.outcome(o.stamp, o.cycle, o.episode, o.reward, o.terminated, o.truncated), now)

    def _emit(self, closed, now: float) -> None:
        out = []
        for c in closed:
            if self.recorder is not None:
                self.recorder.write(c.record, self.wall_ns())
            if c.transition is not None:  # each episode's newest waits for a label (EpisodeLabels)
                out += self.labels.add(c.transition, int(c.record["episode"]), now)
        self._send(out)

    def _send(self, transitions) -> None:
        for t in transitions:
            if self.sender is not None:
                try:
                    self.sender.send(t)
                    self.transitions += 1
                    self.intervention_transitions += bool((t.info or {}).get("intervention"))
                except TinkerError as e:
                    self.last_error = str(e)

    def values(self) -> dict[str, object]:
        """The counters, as the node's /diagnostics shows them."""
        s, j, lab = self.sender, self.join, self.labels
        return {"transitions": self.transitions, "sent": s.sent if s else 0, "dropped": s.dropped if s else 0,
                "incomplete_cycles": j.incomplete, "held_cycles_skipped": j.not_executed, "stop_transitions": j.stops,
                "recorded_cycles": self.recorder.count if self.recorder else 0,
                "last_error": self.last_error, "interventions": self.interventions,
                "intervention_transitions": self.intervention_transitions,
                "interventions_without_action": j.interventions_without_action,
                "labels": lab.labels, "after_label": lab.after_label,
                "after_label_interventions": lab.after_label_interventions,
                **{f"interventions_lost.{k}": v for k, v in j.interventions_lost.items()},
                **{f"stops_lost.{k}": v for k, v in j.stops_lost.items()},
                "chain_bundle": self.chain_bundle,
                "reward_source": "sensors" if self.sensed is not None else "sim",
                **({"sensor": self.sensed.sensor.config.name, "sensor_successes": self.sensed.successes}
                   if self.sensed is not None else {})}
