"""`SafetyWrapper`: the last module before the actuators. Nothing unsafe reaches the robot.

Each call takes a joint position target (the output of `tinker_core.action_chain.ActionChain`) and
the measured joint state, and returns the command actually to send plus a `SafetyStatus`::

    guard = SafetyWrapper.from_urdf(default_urdf(), "safety/config/kuka_iiwa.yaml")
    guard.reset(q, qd)                                  # arm it with the measured state
    command, status = guard(target, q, qd, stamp=t)    # every control cycle (stamp optional)
    if command is not None: send(command)               # None: no valid state yet, send nothing
    if status.intervened: log(status.summary)

In order: the measured state is checked (`tinker_safety.state_check`: shape, finite, within the limits ±
tolerance, its stamp neither from the future nor too old, no jump the robot cannot make); a refused
state gives the hold command. Then an invalid action gives the hold command; the target is clipped
and its step limited (`tinker_safety.joint_limiter`); a step whose end effector would leave the workspace
box is shortened, and one that would come closer than the collision margin is replaced by the hold
command and latches the e-stop (`tinker_safety.geometry`). While the e-stop is latched every output is the
hold command; only `reset` with a valid state clears it.

The hold command is the measured position (zero velocity), or the last command sent when the measured
state is refused. Before the first valid state there is nothing to hold: the command is ``None`` ("send
nothing"; the status says why). It never raises into the control loop: otherwise the output is a
float64 array of the robot's DoF, inside the position limits minus margin, or between a pose already
beyond them and the limit (brought back at no more than the speed limit).

Safe start (`tinker_safety.start_ramp`): after construction, `reset` or e-stop release the first target must
lie within ``start_max_gap`` of the measured pose, and the command ramps toward it at
``start_velocity_scale`` of the velocity limit until it is reached.

The loop owner (the ROS 2 safety node) drives the watchdog (`tinker_safety.watchdog`, on the injected
monotonic ``clock``): `feed` stores each action as it arrives and `tick` runs every control period; a
tick without a fresh action holds, and ``watchdog_misses_to_estop`` stale ticks in a row latch the
e-stop. A direct call counts as a fresh action executed at once. Simulation training uses the same
object as the env's ``command_filter(q_target, q, qd) -> (command, status)``.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Mapping

import numpy as np

from tinker_safety.config import SafetyConfig
from tinker_safety.joint_limiter import JointLimiter
from tinker_safety.limits import JointLimits
from tinker_safety.start_ramp import RUN, StartRamp
from tinker_safety.state_check import StateCheck, nonfinite_problem, vector_problem
from tinker_safety.status import EstopCause, Outcome, SafetyStatus
from tinker_safety.watchdog import Watchdog, WatchdogVerdict
from tinker_core.config import load_config
from tinker_core.errors import ConfigError
from tinker_core.module import ModuleBase, config_to_dict
from tinker_core.spec import DictSpec, Spec

__all__ = ["SafetyWrapper", "SafetyStatus", "Outcome", "EstopCause"]

NO_STATE_REASON = "no valid measured state yet: no command sent"


class SafetyWrapper(ModuleBase[SafetyConfig]):
    """Guards joint position commands; see the module docstring for the rules."""

    config_class = SafetyConfig
    input_name = "request"
    output_name = "command"

    def __init__(self, limits: JointLimits, config: SafetyConfig | None = None, *,
                 clock: Callable[[], float] = time.monotonic, stamp_clock: Callable[[], float] | None = None):
        """``clock``: the monotonic time source of the watchdog and the jump check, s. ``stamp_clock``: the time
        the optional state stamps are compared with, s (default: ``clock``; a ROS node passes its ROS clock)."""
        super().__init__(config)
        self.name = "safety"
        c = self.config
        self.limits = limits
        self.clock = clock
        self.stamp_clock = clock if stamp_clock is None else stamp_clock
        n = self.dof = limits.dof
        self._shape = (n,)
        self._names, self._units = list(limits.names), limits.units
        lo, hi = limits.lower, limits.upper
        tight = np.flatnonzero(2 * c.position_margin >= hi - lo)
        if tight.size:
            i = int(tight[0])
            raise ConfigError(f"SafetyConfig.position_margin: {c.position_margin} leaves no range on joint "
                              f"{self._names[i]} (limits {lo[i]:g}..{hi[i]:g} {self._units[i]})")
        self.command_lower = _frozen(lo + c.position_margin)
        """lowest position commanded (URDF limit plus margin), unless the robot already is below it"""
        self.command_upper = _frozen(hi - c.position_margin)
        """highest position commanded (URDF limit minus margin), unless the robot already is above it"""
        self._vmax = _frozen(limits.velocity * c.velocity_scale)
        run_step = self._vmax * c.control_period  # rad: how far a command-stream command may lie from the measured pose
        self._near_bounds = list(zip(run_step.tolist(), self.command_lower.tolist(), self.command_upper.tolist()))
        """per joint (speed-limit step, lower, upper) as floats: `_near_measured` runs every cycle on 7 values, where
        list arithmetic costs a fraction of numpy's per-call overhead"""
        acc = np.array(math.inf if c.accel_limit is None else c.accel_limit, dtype=np.float64).reshape(-1)
        if acc.size not in (1, n):
            raise ConfigError(f"SafetyConfig.accel_limit: expected 1 or {n} values (one per joint), got {acc.size}")
        self._amax = _frozen(np.broadcast_to(acc, (n,)))
        self._limiter = JointLimiter(self.command_lower, self.command_upper, self._vmax,
                                     limits.velocity * c.start_velocity_scale, self._amax, c.control_period,
                                     self._names, self._units)
        self._state = StateCheck(limits, c, self.stamp_clock)
        self._ramp = StartRamp(c.start_max_gap, self._names, self._units, self.command_lower, self.command_upper)
        self.watchdog = Watchdog(c.watchdog_timeout, c.watchdog_misses_to_estop, clock,
                                 ticks_per_action=max(1, int(c.watchdog_timeout / c.control_period + 1e-9)))
        """the loop's watchdog (on ``clock``); `feed`, `tick` and every direct call drive it"""

        # a valid state may lie up to state_tolerance outside the URDF limits, and a command starts from there
        tol = c.state_tolerance
        self.input_spec = DictSpec({
            "action": Spec((n,), "float64", unit="rad"),
            "q": Spec((n,), "float64", lo - tol, hi + tol, unit="rad"),
            "qd": Spec((n,), "float64", unit="rad/s"),
        })
        self.output_spec = Spec((n,), "float64", lo - tol, hi + tol, unit="rad")

        self._geometry = None
        if c.workspace_enabled or c.collision_check:
            from tinker_safety.geometry import GeometryGuard

            self._geometry = GeometryGuard(limits, c)

        self._estopped = False
        self._estop_cause: EstopCause | None = None
        self._estop_detail = ""
        self._last_cmd: np.ndarray | None = None
        self._cmd_speed = np.zeros(n)  # the last command's step over the period (limit_from: command)
        self._invalid_streak = 0
        self._pending: Any = None
        self.last_status = SafetyStatus()
        self.last_reset_refusal = ""
        self.counters: dict[str, Any] = {
            "calls": 0, "passed": 0, "clipped": 0, "rate_limited": 0, "workspace": 0, "collision": 0,
            "held": 0, "invalid_inputs": 0, "refused_states": 0, "no_command": 0, "watchdog_misses": 0,
            "start_refusals": 0, "estops": {cause.value: 0 for cause in EstopCause},
        }

    @classmethod
    def from_urdf(cls, urdf_path: str | os.PathLike | None = None,
                  config: SafetyConfig | str | os.PathLike | Mapping[str, Any] | None = None, *,
                  joint_names: list[str] | None = None, clock: Callable[[], float] = time.monotonic,
                  stamp_clock: Callable[[], float] | None = None) -> "SafetyWrapper":
        """Limits from ``urdf_path`` (default: the kuka iiwa), the rest from ``config`` (object, YAML path or mapping)."""
        if not isinstance(config, SafetyConfig):
            config = load_config(SafetyConfig, config)
        return cls(JointLimits.from_urdf(urdf_path, joint_names), config, clock=clock, stamp_clock=stamp_clock)

    # -- public state ----------------------------------------------------------------------------
    @property
    def estopped(self) -> bool:
        return self._estopped

    @property
    def estop_cause(self) -> EstopCause | None:
        """Why the e-stop is latched (compares equal to its string value, e.g. ``"watchdog"``); None if not."""
        return self._estop_cause

    @property
    def phase(self) -> str:
        """``await_first_target``, ``start_ramp`` or ``running``."""
        return self._ramp.phase

    @property
    def has_state(self) -> bool:
        """Whether a valid state was ever seen (before that, every command is None: nothing to send)."""
        return self._last_cmd is not None

    def estop(self, reason: str = "external request") -> None:
        """Latch the e-stop on request (cause ``external``); only `reset` with a valid state clears it."""
        self._latch(EstopCause.EXTERNAL, str(reason))

    def reset(self, joint_positions: Any = None, joint_velocities: Any = None, *, stamp: float | None = None) -> bool:
        """Clear the e-stop and the miss and invalid-input streaks, and begin a new safe start.

        Refuses (returns False, nothing changed, reason in ``last_reset_refusal``) unless the state is valid:
        float arrays of the robot's DoF, finite, positions within the URDF limits (± tolerance), and ``stamp``
        (if given, s on ``stamp_clock``) neither from the future nor too old. No jump check: a reset says where
        the robot is, and later states are checked against it.
        """
        try:
            q, problems = self._state.check_for_reset(joint_positions, joint_velocities, stamp)
        except Exception as e:  # e.g. a failing stamp clock: refuse, never raise
            q, problems = None, [f"internal error {e!r}"]
        if q is None:
            self.last_reset_refusal = "reset refused: " + "; ".join(problems)
            return False
        self._estopped, self._estop_cause, self._estop_detail = False, None, ""
        self._invalid_streak = 0
        self.watchdog.reset()
        self._pending = None
        self._ramp.restart()
        self._state.rebase(q)
        self._last_cmd = np.array(q)
        self._cmd_speed = np.zeros(self.dof)
        self.last_reset_refusal = ""
        return True

    def rebase(self, joint_positions: Any, joint_velocities: Any, *, stamp: float | None = None) -> bool:
        """The robot was moved by something this wrapper does not command (a simulator's episode reset): take this
        valid state as the reference for the jump check and begin a new safe start from it.

        Unlike `reset` it leaves the e-stop, the watchdog and the invalid-input streak as they are. Refuses
        (returns False, reason in ``last_reset_refusal``) a state `reset` would refuse.
        """
        try:
            q, problems = self._state.check_for_reset(joint_positions, joint_velocities, stamp)
        except Exception as e:
            q, problems = None, [f"internal error {e!r}"]
        if q is None:
            self.last_reset_refusal = "rebase refused: " + "; ".join(problems)
            return False
        self._ramp.restart()
        self._state.rebase(q)
        self._last_cmd = np.array(q)
        self._cmd_speed = np.zeros(self.dof)
        self.last_reset_refusal = ""
        return True

    @property
    def last_command(self) -> np.ndarray | None:
        """A copy of the last command sent (a hold included; after `reset`: the reset pose), or None before any
        valid state. What to send when the loop must hold outside a call (deactivation, shutdown): the robot
        is at most one step from it, unlike a measured pose that was never checked."""
        return None if self._last_cmd is None else self._last_cmd.copy()

    def report(self) -> dict:
        """Counters, e-stop state and the limits in use, as plain JSON-able values."""
        return {
            "counters": {k: dict(v) if isinstance(v, dict) else v for k, v in self.counters.items()},
            "estopped": self._estopped,
            "estop_cause": None if self._estop_cause is None else self._estop_cause.value,
            "estop_detail": self._estop_detail,
            "phase": self.phase,
            "watchdog_misses_in_row": self.watchdog.misses,
            "last_status": self.last_status.to_dict(),
            "limits": self.limits.to_dict(),
            "command_lower": self.command_lower.tolist(),
            "command_upper": self.command_upper.tolist(),
            "max_speed": self._vmax.tolist(),
            "config": config_to_dict(self.config),
        }

    # -- calling ---------------------------------------------------------------------------------
    def __call__(self, action: Any, joint_positions: Any = None, joint_velocities: Any = None, *,
                 stamp: float | None = None) -> tuple[np.ndarray | None, SafetyStatus]:  # type: ignore[override]
        """Guard ``action`` for the measured state (stamped ``stamp`` s on ``stamp_clock``, if given):
        ``(command, status)``; command None before any valid state. Counts as a fresh action executed at once.

        Called with one mapping ``{"action", "q", "qd"}`` and nothing else, it is the `ModuleBase`
        form and returns the command only (see `forward`).
        """
        if joint_positions is None and joint_velocities is None and stamp is None and isinstance(action, Mapping):
            return self.forward(action)  # type: ignore[return-value]
        return self._call(action, joint_positions, joint_velocities, stamp)

    def forward(self, x: Mapping[str, Any]) -> np.ndarray | None:
        """ModuleBase form: ``{"action", "q", "qd"[, "stamp"]}`` → command (status in ``last_status``)."""
        if not isinstance(x, Mapping):
            return self._call(x, None, None, None)[0]
        return self._call(x.get("action"), x.get("q"), x.get("qd"), x.get("stamp"))[0]

    def _call(self, action: Any, joint_positions: Any, joint_velocities: Any, stamp: Any
              ) -> tuple[np.ndarray | None, SafetyStatus]:
        try:
            now = self.clock()
            self._pending = action
            self.watchdog.executed(now)
            return self._guard(action, joint_positions, joint_velocities, now, stamp)
        except Exception as e:  # a bug here must still give a safe command
            return self._internal_error(e, joint_positions)

    def feed(self, action: Any, now: float | None = None) -> None:
        """Store an action as it arrives; `tick` sends it. ``now``: its arrival on ``clock`` (default: read it);
        a time ahead of the clock makes it an action from the future, which is never executed."""
        self._pending = action
        self.watchdog.feed(now)

    def tick(self, now: float | None = None, joint_positions: Any = None, joint_velocities: Any = None, *,
             stamp: float | None = None) -> tuple[np.ndarray | None, SafetyStatus]:
        """One control cycle: guard the newest fed action if it is fresh, else hold (the watchdog).

        ``now`` is accepted for compatibility and not used: the watchdog reads the injected ``clock``, never a
        time handed in (which might be a message stamp). ``stamp`` is the state's, as in `__call__`.
        """
        try:
            verdict = self.watchdog.tick()
            t = self.clock()
            if verdict.fresh:
                return self._guard(self._pending, joint_positions, joint_velocities, t, stamp)
            return self._stale(verdict, joint_positions, joint_velocities, t, stamp)
        except Exception as e:
            return self._internal_error(e, joint_positions)

    # -- the rules -------------------------------------------------------------------------------
    def _guard(self, action: Any, joint_positions: Any, joint_velocities: Any, now: float, stamp: Any
               ) -> tuple[np.ndarray | None, SafetyStatus]:
        counters = self.counters
        counters["calls"] += 1
        q, qd, problems = self._state.check(joint_positions, joint_velocities, now, stamp)
        if q is None:
            counters["refused_states"] += 1
            return self._invalid(problems, None)
        if self._estopped:
            return self._hold(q, SafetyStatus(Outcome.ESTOPPED, [self._latched_reason()]))
        a = action
        if type(a) is not np.ndarray or a.shape != self._shape or a.dtype.kind != "f":
            return self._invalid([vector_problem("action", a, self.dof)], q)
        if a.dtype != np.float64:
            a = a.astype(np.float64)
        ramp = self._ramp
        refusal = ramp.refusal(a, q)
        if refusal:
            counters["start_refusals"] += 1
            return self._hold(q, SafetyStatus(Outcome.HELD, [refusal]))
        ramping = ramp.ramping
        target = a.tolist()
        # the limits act from the measured state, or (limit_from: command) on the command stream
        on_stream = self.config.limit_from == "command" and self._last_cmd is not None
        x, v = (self._last_cmd.tolist(), self._cmd_speed.tolist()) if on_stream else (q, qd)
        cmd, changed, moved = self._limiter.limit(target, x, v, ramping)
        if cmd is None:
            return self._invalid([nonfinite_problem("action", a, self._names)], q)
        self._invalid_streak = 0
        ramp.begin()
        status = SafetyStatus()
        if changed:
            clipped, rate = self._limiter.explain(target, x, v, cmd, ramping, status)
            counters["clipped"] += clipped
            counters["rate_limited"] += rate
        out, qa = np.array(cmd), np.array(q)
        if on_stream:
            out, near = self._near_measured(out, qa, status)
            counters["rate_limited"] += near and not (changed and rate)
            moved = bool(np.any(out != qa))

        geometry = self._geometry
        if moved and geometry is not None:
            out, shortened = geometry.keep_in_workspace(qa, out, status)
            counters["workspace"] += shortened
            hit = geometry.predict_collision(qa, out)
            if hit:
                counters["collision"] += 1
                self._latch(EstopCause.COLLISION, hit)
                status.add(Outcome.COLLISION, f"{hit}; e-stop latched, holding")
                return self._hold(q, status)

        if status.outcome <= Outcome.CLIPPED:
            ramp.reached()  # the target is reached: the start ramp is over
        if self._estopped:  # latched from another thread while this call ran
            return self._hold(q, SafetyStatus(Outcome.ESTOPPED, [self._latched_reason()]))
        if status.outcome is Outcome.PASSED:
            counters["passed"] += 1
        if self._last_cmd is not None:
            self._cmd_speed = (out - self._last_cmd) / self.config.control_period
        self._last_cmd = out
        self.last_status = status
        return out.copy(), status

    def _near_measured(self, out: np.ndarray, q: np.ndarray, status: SafetyStatus) -> tuple[np.ndarray, bool]:
        """A command from the command stream kept within one speed-limit step of the measured position ``q`` and
        inside the position limits (or between a pose beyond one and that limit), with a reason for each joint
        it changed: the bound a command from the measured state has."""
        kept, changed = out.tolist(), []
        for i, (x, qi, (step, lower, upper)) in enumerate(zip(kept, q.tolist(), self._near_bounds)):
            lo, hi = max(qi - step, min(lower, qi)), min(qi + step, max(upper, qi))  # lo <= hi always
            k = lo if x < lo else (hi if x > hi else x)
            if k != x:
                kept[i] = k
                changed.append(i)
                u = self._units[i]
                status.add(Outcome.RATE_LIMITED, f"joint {self._names[i]}: command {x:.3f} {u} from the command "
                                                 f"stream is beyond one speed-limit step ({step:.3f} {u}) of the "
                                                 f"measured {qi:.3f} {u} or the limits, kept at {k:.3f} {u}")
        return (np.array(kept) if changed else out), bool(changed)

    # -- holding ---------------------------------------------------------------------------------
    def _hold(self, q: list[float] | np.ndarray, status: SafetyStatus) -> tuple[np.ndarray, SafetyStatus]:
        self.counters["held"] += 1
        out = np.array(q, dtype=np.float64)
        self._last_cmd = out
        self._cmd_speed = np.zeros(self.dof)  # a hold stops the command stream
        self.last_status = status
        return out.copy(), status

    def _hold_without_state(self, status: SafetyStatus) -> tuple[np.ndarray | None, SafetyStatus]:
        """Hold when the measured state is refused: the last command, or no command if there never was a valid state."""
        if self._last_cmd is None:
            self.counters["held"] += 1
            self.counters["no_command"] += 1
            status.reasons.append(NO_STATE_REASON)
            self.last_status = status
            return None, status
        return self._hold(self._last_cmd, status)

    def _invalid(self, problems: list[str], q: list[float] | None) -> tuple[np.ndarray | None, SafetyStatus]:
        """Invalid action or refused state: hold, and latch the e-stop after too many in a row."""
        self.counters["invalid_inputs"] += 1
        self._invalid_streak += 1
        limit = self.config.invalid_inputs_to_estop
        if q is not None:
            reasons = [f"{p}; holding the current position" for p in problems]
        elif self._last_cmd is not None:
            reasons = [f"{p}; holding the last command" for p in problems]
        else:
            reasons = list(problems)
        status = SafetyStatus(Outcome.HELD, reasons)
        if self._estopped:
            status.add(Outcome.ESTOPPED, self._latched_reason())
        elif self._invalid_streak >= limit:
            self._latch(EstopCause.INVALID_INPUT, f"{self._invalid_streak} invalid inputs in a row")
            status.add(Outcome.ESTOPPED, f"{self._invalid_streak} invalid inputs in a row (limit {limit}): "
                                         "e-stop latched (cause invalid_input)")
        return self._hold(q, status) if q is not None else self._hold_without_state(status)

    def _stale(self, verdict: WatchdogVerdict, joint_positions: Any, joint_velocities: Any, now: float, stamp: Any
               ) -> tuple[np.ndarray | None, SafetyStatus]:
        """A tick without a fresh action: hold at the measured pose (if the state is valid), count the miss."""
        self.counters["calls"] += 1
        if not self.watchdog.has_action:
            status = SafetyStatus(Outcome.HELD, [f"watchdog: {verdict.reason}; holding"])
        else:
            self.counters["watchdog_misses"] += 1
            limit = self.config.watchdog_misses_to_estop
            status = SafetyStatus(Outcome.HELD, [f"watchdog: {verdict.reason}, stale tick {verdict.misses}/{limit}; "
                                                 "holding"])
            if verdict.latch and not self._estopped:
                self._latch(EstopCause.WATCHDOG, f"{verdict.misses} stale ticks in a row")
                status.add(Outcome.ESTOPPED, "watchdog: e-stop latched (cause watchdog)")
        if self._estopped and status.outcome is not Outcome.ESTOPPED:
            status.add(Outcome.ESTOPPED, self._latched_reason())
        q, _, problems = self._state.check(joint_positions, joint_velocities, now, stamp)
        if q is not None:
            return self._hold(q, status)
        self.counters["refused_states"] += 1
        status.reasons.extend(problems)
        return self._hold_without_state(status)

    def _internal_error(self, e: Exception, joint_positions: Any) -> tuple[np.ndarray | None, SafetyStatus]:
        """Hold whatever failed: the last command sent, else the measured pose if it is valid, else nothing."""
        self._latch(EstopCause.INTERNAL, repr(e))
        status = SafetyStatus(Outcome.ESTOPPED, [f"internal error {e!r}: e-stop latched, holding"])
        if self._last_cmd is not None:
            return self._hold(self._last_cmd, status)
        try:
            q = self._state.positions(joint_positions)
        except Exception:
            q = None
        return self._hold(q, status) if q is not None else self._hold_without_state(status)

    def _latch(self, cause: EstopCause, detail: str) -> None:
        if not self._estopped:
            self._estop_cause, self._estop_detail = cause, detail
            self._estopped = True
            self.counters["estops"][cause.value] += 1

    def _latched_reason(self) -> str:
        return f"e-stop latched (cause {self._estop_cause.value}: {self._estop_detail}); holding until reset"

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the private PyBullet client."""
        if self._geometry is not None:
            self._geometry.close()

    def __enter__(self) -> "SafetyWrapper":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        g, c = self._geometry, self.config
        return (f"SafetyWrapper({self.dof} joints, estopped={self._estopped}, phase={self.phase}, "
                f"workspace={'on' if g is not None and g.ws_min else 'off'}, "
                f"collision={'on' if c.collision_check else 'off'})")


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float64)
    a.setflags(write=False)
    return a
