"""`PolicyStage`: the policy stage of the loop, on every runtime (no ROS).

Features and joint states go to the running bundle's `tinker_core.loop.policy.PolicyCycle`; a step goes out as
``raw_action`` and ``joint_target`` while the `tinker_core.loop.policy.CommandGate` is open. A step that took
longer than ``budget_ns`` (None: no budget, as in one process on virtual time) is not sent: safety holds that
cycle, and ``on_overrun`` says what follows (``hold``: just that cycle; ``stop``: no command until activated again).
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from tinker_core.errors import TinkerError
from tinker_core.loop.edges import Action, Features, RobotState, SafeCommand
from tinker_core.loop.input_ages import Level
from tinker_core.loop.policy import CommandGate, PolicyStep, check_on_overrun
from tinker_core.loop.stage import LoopStage


class PolicyStage(LoopStage):
    """``core``: the running bundle (``cycle``, a `PolicyCycle`, and ``version``; hot-swapped behind it);
    ``overran(step, dur_ns, on_overrun)``: the host's note of a step over its budget (logged, counted);
    ``say(step)``: sends a step's channel message (None: the robot sends on no channel)."""

    name = "policy"

    def __init__(self, core: Any, gate: CommandGate | None = None, budget_ns: int | None = None,
                 on_overrun: Callable[[], str] = lambda: "hold",
                 overran: Callable[[PolicyStep, int, str], None] | None = None,
                 say: Callable[[PolicyStep], None] | None = None):
        super().__init__()
        self.core, self.gate = core, gate or CommandGate()
        self.refusals = self.gate.refusals
        self.budget_ns, self.on_overrun, self.overran, self.say = budget_ns, on_overrun, overran, say

    def inputs(self) -> dict[str, Callable[[Any], Any]]:
        """The safe ``command`` only where the cycle compensates latency (the chain steps from it)."""
        compensates = self.core is not None and self.core.cycle.compensates
        return {"joint_states": self.on_state, "features": self.on_features,
                **({"command": self.on_command} if compensates else {})}

    def on_command(self, c: SafeCommand) -> None:
        self.core.cycle.on_command(c.stamp_ns, c.q)

    def on_state(self, s: RobotState) -> Action | None:
        t0 = time.perf_counter_ns()
        return self._send(self.core.cycle.on_state(s.stamp_ns, s.q), t0)  # features that waited for it

    def on_features(self, f: Features) -> Action | None:
        if not self.gate.active:
            return None
        t0 = time.perf_counter_ns()
        return self._send(self.core.cycle.on_features(f.stamp_ns, f.features, f.cycle, f.episode,
                                                      f.perception_sha256, f.latency_compensation), t0)

    def _send(self, step: PolicyStep | None, t0: int) -> Action | None:
        if step is None or not self.gate.active:
            return None
        if self.budget_ns is not None:
            dur = time.perf_counter_ns() - t0
            if dur > self.budget_ns:  # a late command is not sent: safety holds this cycle
                how = self.on_overrun()
                if self.overran is not None:
                    self.overran(step, dur, how)
                self.gate.overran(how)
                return None
        v = self.core.version
        target = Action(step.stamp_ns, step.cycle, step.target, v)
        self.emit("joint_target", target)  # first: safety's input is the one the cycle waits for
        self.emit("raw_action", Action(step.stamp_ns, step.cycle, step.raw, v))
        if step.extra is not None:
            self.emit("tool_command", Action(step.stamp_ns, step.cycle, step.extra, v))
        if step.message is not None and self.say is not None:
            self.say(step)
        return target

    # --- its life (`LoopStage`) ------------------------------------------------------------------
    def configure_failed(self, why: str) -> None:
        self.gate.last_error = why

    def activate(self) -> None:
        """Commands go out; the first starts from the first cycle's measured pose."""
        self.core.cycle.restart(self.core.new_chain())
        self.gate.activate()

    def deactivate(self) -> None:
        self.gate.deactivate()

    def release(self) -> None:
        """No command after it; the running bundle is closed."""
        self.gate.deactivate()
        if self.core is not None:
            self.core.runner.close()
        self.core = None

    def set_param(self, name: str, value: Any) -> str:
        """A parameter set at run time; '' = taken. ``bundle`` hot-reloads the running model (validated before it
        goes live; a TinkerError where there is none of the running kind), ``on_overrun`` is checked."""
        if name == "bundle" and self.core is not None:
            self.core.reload(str(value))
        elif name == "on_overrun":
            check_on_overrun(value)
        return ""

    def reload(self, path: str) -> tuple[bool, str]:
        """``~/reload``: (requested, message for the operator)."""
        try:
            self.core.reload(str(path))
        except TinkerError as e:
            return False, str(e)
        return True, "reload requested; the new bundle is validated first"

    def stop(self) -> tuple[np.ndarray, dict[str, object]] | None:
        """Stop: the hold at the newest measured pose and its metadata while commands were going out (a command
        the safety node passes through its guard), else None; no command goes out after it."""
        q = self.core.cycle.q_latest if self.core is not None else None  # None before any state
        hold = (q, self.gate.stop_meta(self.core.version)) if self.gate.active and q is not None else None
        self.gate.deactivate()
        return hold

    def values(self, channel: dict[str, object] | None = None) -> dict[str, object]:
        """/diagnostics values: the running bundle, its reloads, refused inputs (``channel``: the channel's own)."""
        c, g = self.core, self.gate
        r = c.runner if c is not None else None
        cycle = getattr(c, "cycle", None)
        hold = getattr(cycle, "goal_hold", None)
        compensates = cycle is not None and cycle.compensates
        return {"active": g.active, "model_version": c.version if c else None,
                **({} if hold is None else {"at_goal": hold.pose is not None, "goal_holds": hold.holds}),
                **({"latency_compensation": cycle.latency_compensation} if compensates else {}),
                "actor_sha256": r.actor_sha256 if r else "", "perception_sha256": r.perception_sha256 if r else "",
                "reloads": c.reloads if c else 0, "reload_rejections": r.rejected_reloads if r else 0,
                "refused_inputs": g.refusals.count, "last_error": g.last_error or g.refusals.last,
                **(channel or {}), **(r.diagnostic_values() if hasattr(r, "diagnostic_values") else {})}

    def level(self, crowded: str = "") -> tuple[Level, str]:
        return self.gate.level(self.core.version if self.core is not None else None, crowded)
