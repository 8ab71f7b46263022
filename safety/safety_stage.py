"""`SafetyStage`: the safety stage of the loop, on every runtime (no ROS).

States, the policy's targets and a person's targets go into `tinker_safety.guard_session.GuardSession`'s cycle
(`tinker_safety.guard_cycle.GuardCycle`: trusted states, cycles and their deadline, misses in a row, the e-stop, a
takeover); what it sends goes out as edges: the safe ``command``, each cycle a person's target served
(``intervened``: target, then the measured pose), the latched ``estop_state`` and, with ``latency_auto``, each
``command_latency`` it measured and the loop now compensates. The stage is the cycle's `Ports`;
the rest of them (the deadline timer, the log, the input watch) are the host's (`SafetyHost`): a ROS node, or the
in-process loop. A policy target that cannot be a command (wrong length, not finite) is refused and still counts:
the cycle holds, and misses in a row latch the e-stop.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol

import numpy as np

from tinker_core.errors import ValidationError
from tinker_core.loop.edges import Action, EstopState, Intervened, RobotState, SafeCommand, joint_vector
from tinker_core.loop.input_ages import Level
from tinker_core.loop.latency_auto import LOOK_EVERY, STANDING, LatencyFollow
from tinker_core.loop.latency_compensation import check_steps
from tinker_core.loop.latency_estimate import LatencyEstimator
from tinker_core.loop.stage import LoopStage
from tinker_safety.guard_cycle import Command
from tinker_safety.guard_session import GuardSession

class SafetyHost(Protocol):
    """What the safety stage needs from its host beyond its edges."""

    def arm_deadline(self) -> None:
        """(Re)start the one-shot deadline; when it fires, the host calls ``stage.cycle.deadline()``."""

    def cancel_deadline(self) -> None: ...

    def log(self, level: str, message: str) -> None: ...

    def expect_commands(self, expected: bool, arrived: bool) -> None:
        """The policy's commands are an input that must flow only while it is active."""


class SafetyStage(LoopStage):
    """``host``: the deadline, log and input watch; ``command_type``: the command message the host sends;
    ``clock``: monotonic s (the wrapper's watchdog); ``wall_ns`` / ``mono_ns``: the stamp clock and the receiver's
    monotonic clock in ns. ``state_publishers`` / ``teleop_publishers``: how many publish on those topics now (the
    host's graph; 1 where there is no graph)."""

    name = "safety"

    def __init__(self, host: SafetyHost, command_type: str = "float64_array", clock: Callable[[], float] = time.monotonic,
                 wall_ns: Callable[[], int] = time.time_ns, mono_ns: Callable[[], int] = time.monotonic_ns):
        super().__init__()
        self.host, self.wall_ns, self.mono_ns = host, wall_ns, mono_ns
        self.session = GuardSession(self, command_type, clock)
        self.cycle = self.session.cycle
        self.state_publishers: Callable[[], int] = lambda: 1
        self.teleop_publishers: Callable[[], int] = lambda: 1
        self.last_command: Command | None = None
        self.on_estop: Callable[[str], None] | None = None
        """the host's note of each change of the latched e-stop ('' = cleared)"""
        self.latency: LatencyEstimator | None = None
        """the robot's command latency, from the states heard and the commands sent (`command_latency` values)"""
        self._latency_episode: int | None = None
        self._latency_last: tuple[int | None, int] | None = None  # the last trusted state's (cycle, stamp)
        self.compensated = 0
        """the latency perception and the policy compensate (the graph's ``latency_compensation``)"""
        self.follow: LatencyFollow | None = None
        """with ``latency_auto``: when a measured latency is taken as the compensated one (then sent as
        ``command_latency``)"""
        self.latency_taken: list[str] = []
        """what was said of each measured latency taken (``latency_auto``), as logged"""

    def compensate(self, periods: int, auto: bool = False) -> None:
        """The latency perception and the policy compensate from the start (``latency_compensation``), and whether
        the loop follows what this stage measures (``latency_auto``)."""
        self.compensated = check_steps(periods, "safety.latency_compensation")
        self.follow = LatencyFollow() if auto else None

    def inputs(self) -> dict[str, Callable[[Any], Any]]:
        return {"joint_states": self.on_state, "joint_target": self.on_target, "intervention": self.on_teleop}

    # --- edges in ---------------------------------------------------------------------------------
    def on_state(self, s: RobotState) -> None:
        trusted = self.cycle.states_trusted
        self.cycle.state(s.q, s.qd, s.stamp_ns, s.cycle, s.episode, self.state_publishers(), self.wall_ns(),
                         self.mono_ns())
        if self.cycle.states_trusted != trusted:  # a refused state (a second publisher, a stale stamp) tells nothing
            self._measure_latency(s)

    def _measure_latency(self, s: RobotState) -> None:
        """Feed a trusted state to the latency estimate. A new episode: the reset moved the arm and holds it there.
        States that went unheard (the cycle counter skipped, or the stamps are more than 1.5 periods apart) are
        skipped: the model is one period's motion. A counter that went back starts a new sequence."""
        if self.latency is None:
            self.latency = LatencyEstimator(len(self.session.names), where="safety.command_latency")
        last, self._latency_last = self._latency_last, (s.cycle, int(s.stamp_ns))
        if s.episode != self._latency_episode:
            self._latency_episode = s.episode
            self.latency.break_sequence(rest=s.q)
        elif last is not None:
            if s.cycle is not None and last[0] is not None:
                periods = s.cycle - last[0]
            else:
                periods = round((s.stamp_ns - last[1]) / (self.cycle.guard.config.control_period * 1e9))
            if periods < 1:
                self.latency.break_sequence()
            elif periods > 1:
                self.latency.skip(periods - 1)
        self.latency.state(s.q)
        adopted = self.follow.state(self.latency.estimate, self.compensated) if self.follow is not None else None
        if adopted is not None:
            was, self.compensated = self.compensated, adopted.periods
            self.latency_taken.append(f"command latency measured {adopted.periods} control periods (R² "
                                      f"{adopted.fit:.3f}, next lag {adopted.runner_up:.3f}; {self.follow.states} "
                                      f"states heard): compensated from now on, was {was} (latency_auto)")
            self.host.log("info", self.latency_taken[-1])
            self.emit("command_latency", adopted)

    def latency_values(self) -> dict[str, object]:
        """The command latency the robot's own data shows, for /diagnostics."""
        auto = {"latency_auto": self.follow is not None}
        if self.latency is None:
            return {"command_latency_periods": "unknown: no state yet", "latency_compensation": self.compensated,
                    **auto}
        est = self.latency.estimate()
        return {"command_latency_periods": est.periods if est.periods is not None else f"unknown: {est.why}",
                "command_latency_fit": f"{est.fit:.3f} (next {est.runner_up:.3f})",
                "latency_compensation": self.compensated, **auto}

    def latency_mismatch(self) -> str:
        """Why the compensated latency is not the measured one ('' when it is, or nothing is measured yet)."""
        est = self.latency.estimate() if self.latency is not None else None
        if est is None or est.periods is None or est.periods == self.compensated:
            return ""
        if self.follow is not None:
            return (f"command latency measured {est.periods} control periods, compensated {self.compensated}: "
                    f"latency_auto takes it once it has stood {STANDING * LOOK_EVERY} states")
        return (f"command latency measured {est.periods} control periods, compensated {self.compensated}: set "
                f"latency_compensation: {est.periods} in the launch YAML's /** section (or latency_auto: true)")

    def level(self, namesake: str = "") -> tuple[Level, str]:
        """The node's level and why: the session's, or a warning that the compensated latency is not the robot's."""
        level, why = self.session.level(namesake)
        if level == Level.OK:
            mismatch = self.latency_mismatch()
            if mismatch:
                return Level.WARN, mismatch
        return level, why

    def on_target(self, a: Action) -> Action | None:
        """The policy's target for a state: the cycle's command (a target that cannot be one is held and counted).
        Returns it when it answered a cycle."""
        valid = self.session.takes_commands  # (a command that cannot go on is not checked)
        target = np.asarray(a.values, dtype=np.float64).reshape(-1)
        if valid:
            try:
                joint_vector(target, len(self.session.names), "safety.policy_command")
            except ValidationError as err:
                self.refuse(err)
                self.host.log("warning", f"input refused, holding: {err}")
                valid = False
        meta = {"stamp_ns": str(a.stamp_ns), "cycle": str(a.cycle), "version": str(a.version)}
        if a.stop:
            meta["stop"] = "1"
        return a if self.cycle.command(target, valid, meta, self.wall_ns()) else None

    def on_teleop(self, t: RobotState) -> None:
        """A person's joint targets (``q``, the robot's joint order) stamped ``stamp_ns``."""
        if self.cycle.takeover is not None:
            self.cycle.takeover.offer(t.q, t.stamp_ns, self.teleop_publishers(), self.wall_ns())

    def refuse(self, err: Exception, port: str = "") -> None:
        super().refuse(err, port)
        if port == "intervention" and self.cycle.takeover is not None:
            self.cycle.takeover.refuse("shape", str(err))  # a person's target: the takeover counts it
            return
        self.session.refuse(err)

    def internal_error(self, where: str, err: Exception) -> None:
        """A host's callback failed (``where``: its topic): the guard's state is in doubt, so the e-stop latches
        (a hold at the measured pose), once."""
        if self.cycle.guard is not None and not self.cycle.guard.estopped:
            try:
                self.cycle.estop(f"internal error in the callback on {where}: {err!r}")
            except Exception as e2:  # the hold itself failed: nothing more can be done here; logged
                self.host.log("error", f"e-stop after a failed callback failed too: {e2!r}")

    # --- its life (`LoopStage`) ------------------------------------------------------------------
    def configured(self) -> None:
        self.session.last_error = ""
        self.estop_changed()

    def configure_failed(self, why: str) -> None:
        self.session.last_error = why

    def activate(self) -> None:
        self.cycle.activate()
        self.estop_changed()

    def deactivate(self) -> None:
        self.cycle.deactivate()

    def release(self) -> None:
        """Cleanup: wrapper, gate and state go; a latched e-stop is carried to the next configure."""
        self.session.release()

    def shutdown(self, hold: bool = True) -> None:
        """The node stops: the last command is the hold at the measured pose (``hold``), and no more follow."""
        if hold:
            self.cycle.hold("shutdown")
        self.cycle.active = False

    # --- GuardCycle's ports -------------------------------------------------------------------------
    def send(self, command: Command) -> None:
        self.last_command = command
        if self.latency is not None:  # the newest command sent since the newest state is what the motors hold
            self.latency.command(command.q)
        recorded = self.session.intervened(command)
        if recorded is not None:  # served from a person's target: recorded for the learner
            self.emit("intervened", Intervened(command.stamp, command.cycle, recorded))
        self.emit("command", SafeCommand(command.stamp, command.cycle, command.q, command.status, command.version,
                                         command.teleop is not None, command.why))

    def estop_changed(self) -> None:
        reason = self.session.estop_reason()
        self.emit("estop_state", EstopState(bool(reason), reason))
        if self.on_estop is not None:
            self.on_estop(reason)

    def arm_deadline(self) -> None:
        self.host.arm_deadline()

    def cancel_deadline(self) -> None:
        self.host.cancel_deadline()

    def log(self, level: str, message: str) -> None:
        self.host.log(level, message)

    def expect_commands(self, expected: bool, arrived: bool) -> None:
        self.host.expect_commands(expected, arrived)
