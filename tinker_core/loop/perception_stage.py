"""`PerceptionStage`: the perception stage of the loop, on every runtime (no ROS).

Each input edge's value goes to the `tinker_core.loop.perception.PerceptionCycle` of the running model; a completed
cycle goes out as ``features`` stamped with the model's sha256, which the policy checks against its own.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tinker_core.loop.edges import (GOAL_TERM, Action, CommandLatency, Features, Frame, Goal, RobotState, SafeCommand,
                                   TaskReport)
from tinker_core.loop.input_ages import Level
from tinker_core.loop.perception import PerceivedCycle, PerceptionCycle
from tinker_core.loop.stage import LoopStage


class PerceptionStage(LoopStage):
    """``cycle``: the running model's cycle; ``sha256``: that model's (in every ``features``)."""

    name = "perception"

    def __init__(self, cycle: PerceptionCycle, sha256: str):
        super().__init__()
        self.cycle, self.sha256 = cycle, sha256

    def inputs(self) -> dict[str, Callable[[Any], Any]]:
        """The safe ``command`` only where the cycle compensates latency (it predicts the pose from it), and the
        ``command_latency`` safety measured where it follows that (``latency_auto``); the ``goal`` only where no
        simulator gives this state's task terms (``synced``: the simulated robot takes the goal, and its task terms
        carry it)."""
        comp = self.cycle.compensation
        return {"joint_states": self.on_state, "image": self.on_frame, "task": self.on_task,
                **({} if self.cycle.synced else {"goal": self.on_goal}), "raw_action": self.on_action,
                **({"command": self.on_command} if comp is not None else {}),
                **({"command_latency": self.on_latency} if comp is not None and comp.follows else {})}

    def swap(self, cycle: PerceptionCycle, sha256: str) -> None:
        """Run another model from the next input on; the inputs heard so far stay."""
        cycle.take_inputs(self.cycle)
        self.cycle, self.sha256 = cycle, sha256

    def on_state(self, s: RobotState) -> Features | None:
        return self._out(self.cycle.on_state(s.stamp_ns, s.q, s.qd, s.cycle))

    def on_frame(self, f: Frame) -> Features | None:
        return self._out(self.cycle.on_frame(f.stamp_ns, f.image))

    def on_task(self, t: TaskReport) -> Features | None:
        return self._out(self.cycle.on_task(t.stamp_ns, t.terms, t.episode))

    def on_goal(self, g: Goal) -> Features | None:
        return self._out(self.cycle.on_task(g.stamp_ns, {GOAL_TERM: g.point}))

    def on_action(self, a: Action) -> None:
        self.cycle.on_action(a.values)

    def on_command(self, c: SafeCommand) -> None:
        self.cycle.on_command(c.stamp_ns, c.q)

    def on_latency(self, c: CommandLatency) -> None:
        """The latency safety measured: compensated from the next cycle on, and said in each ``features``."""
        self.cycle.compensation.follow(c.periods)

    def _out(self, p: PerceivedCycle | None) -> Features | None:
        if p is None:
            return None
        comp = self.cycle.compensation
        f = Features(p.stamp_ns, p.cycle, p.episode, p.features, self.sha256, p.extra,
                     None if comp is None else comp.steps)
        self.emit("features", f)
        return f

    def values(self) -> dict[str, object]:
        hold = self.cycle.hold
        offset = None if hold is None else hold.camera_offset
        return {"perception_sha256": self.sha256, "frame_age_ms": f"{self.cycle.frame_age_ns / 1e6:.1f}",
                "refused_inputs": self.refusals.count, "last_error": self.refusals.last,
                **({} if offset is None else {"camera_offset_cm": f"{100 * float(np.linalg.norm(offset)):.1f}",
                                              "camera_corrected": hold.correction is not None}),
                **({} if self.cycle.compensation is None else
                   {"latency_compensation": self.cycle.compensation.steps,
                    "latency_auto": self.cycle.compensation.follows,
                    "pose_ahead_rad": f"{self.cycle.compensation.ahead_rad:.3f}"})}

    def level(self, crowded: str = "") -> tuple[Level, str]:
        """WARN while inputs are being refused or a second publisher is on a heard channel (``crowded``)."""
        level, message = self.refusals.level()
        if level:
            return level, message
        if crowded:
            return Level.WARN, crowded
        return Level.OK, "running"
