"""`SafetyWrapper`: the last module before the actuators. Nothing unsafe reaches the robot.

Each call takes a joint position target (the output of `tinker_core.action_chain.ActionChain`) and
the measured joint state, and returns the command actually to send plus a `SafetyStatus`::

    guard = SafetyWrapper.from_urdf(default_urdf(), "safety/config/kuka_iiwa.yaml")
    guard.reset(q, qd)                         # arm it with the measured state
    command, status = guard(target, q, qd)     # every control cycle
    if status.intervened: log(status.summary)

In order: invalid input gives the hold command; the target is clipped to the URDF position limits
minus a margin; the step from the measured position is limited by the velocity limit and by the
acceleration limit from the measured velocity (slowing to a stop is always allowed); a step whose
end effector would leave the workspace box is shortened to the edge; a step that would bring two
links, or a link and the known scene, closer than the collision margin is replaced by the hold
command and latches the e-stop. While the e-stop is latched every output is the hold command (the
measured position, i.e. zero velocity); only `reset` with a valid state clears it.

It never raises into the control loop: whatever comes in, the output is a float64 array of the
robot's DoF inside the position limits. The hold command is the measured position, or the last
command sent when the measured state itself is invalid.

Safe start: after construction, `reset` or e-stop release the first target must lie within
``start_max_gap`` of the measured pose (otherwise: hold and say why), and the command ramps toward
it at ``start_velocity_scale`` of the velocity limit until it is reached.

The loop owner (the ROS 2 safety node) drives the watchdog: `feed` stores each action as it
arrives and `tick` runs every control period; a tick without a fresh action holds, and
``watchdog_misses_to_estop`` stale ticks in a row latch the e-stop. Simulation training uses the
same object as the env's ``command_filter(q_target, q, qd) -> (command, status)``.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Mapping

import numpy as np

from safety.config import SafetyConfig
from safety.limits import JointLimits
from safety.status import EstopCause, Outcome, SafetyStatus
from tinker_core.config import load_config
from tinker_core.errors import ConfigError
from tinker_core.module import ModuleBase, config_to_dict
from tinker_core.spec import DictSpec, Spec

__all__ = ["SafetyWrapper", "SafetyStatus", "Outcome", "EstopCause"]

_AWAIT_FIRST, _RAMP, _RUN = "await_first_target", "start_ramp", "running"
_BISECTION_STEPS = 10


class SafetyWrapper(ModuleBase[SafetyConfig]):
    """Guards joint position commands; see the module docstring for the rules."""

    config_class = SafetyConfig
    input_name = "request"
    output_name = "command"

    def __init__(self, limits: JointLimits, config: SafetyConfig | None = None, *,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(config)
        self.name = "safety"
        c = self.config
        self.limits = limits
        self.clock = clock
        n = self.dof = limits.dof
        self._shape = (n,)
        self._names, self._units = list(limits.names), limits.units
        lo, hi = limits.lower, limits.upper
        tight = np.flatnonzero(2 * c.position_margin >= hi - lo)
        if tight.size:
            i = int(tight[0])
            raise ConfigError(f"SafetyConfig.position_margin: {c.position_margin} leaves no range on joint "
                              f"{self._names[i]} (limits {lo[i]:g}..{hi[i]:g} {self._units[i]})")
        self._lo_hard, self._hi_hard = lo, hi
        self.command_lower = _frozen(lo + c.position_margin)
        """lowest position commanded (URDF limit plus margin), unless the robot already is below it"""
        self.command_upper = _frozen(hi - c.position_margin)
        """highest position commanded (URDF limit minus margin), unless the robot already is above it"""
        dt = self._dt = c.control_period
        self._vmax = _frozen(limits.velocity * c.velocity_scale)
        acc = np.array(math.inf if c.accel_limit is None else c.accel_limit, dtype=np.float64).reshape(-1)
        if acc.size not in (1, n):
            raise ConfigError(f"SafetyConfig.accel_limit: expected 1 or {n} values (one per joint), got {acc.size}")
        self._amax = _frozen(np.broadcast_to(acc, (n,)))
        # the hot path runs per joint on Python floats: for 7 joints that is several times faster than numpy
        self._state_bounds = list(zip(lo.tolist(), hi.tolist(), (lo - c.state_tolerance).tolist(),
                                      (hi + c.state_tolerance).tolist()))
        ramp_vmax = limits.velocity * c.start_velocity_scale
        self._run_bounds, self._ramp_bounds = (
            list(zip(self.command_lower.tolist(), self.command_upper.tolist(), (vmax * dt).tolist(),
                     (self._amax * dt * dt).tolist()))
            for vmax in (self._vmax, ramp_vmax))

        self.input_spec = DictSpec({
            "action": Spec((n,), "float64", unit="rad"),
            "q": Spec((n,), "float64", lo, hi, unit="rad"),
            "qd": Spec((n,), "float64", unit="rad/s"),
        })
        self.output_spec = Spec((n,), "float64", lo, hi, unit="rad")

        self._model = None
        self._ws_min = self._ws_max = None
        if c.workspace_enabled or c.collision_check:
            if not limits.urdf_path:
                raise ConfigError("SafetyWrapper: the workspace box and the collision check need the robot's URDF; "
                                  "build with SafetyWrapper.from_urdf(path) or disable both in the SafetyConfig")
            from safety.kinematics import RobotModel

            self._model = RobotModel(limits.urdf_path, limits.names, c.ee_link, c.scene if c.collision_check else (),
                                     c.self_collision_ignore)
        if c.workspace_enabled:
            self._ws_min, self._ws_max = tuple(c.workspace_min), tuple(c.workspace_max)

        self._estopped = False
        self._estop_cause: EstopCause | None = None
        self._estop_detail = ""
        self._phase = _AWAIT_FIRST
        self._last_cmd: np.ndarray | None = None
        self._invalid_streak = 0
        self._misses = 0
        self._pending: tuple[Any, float] | None = None
        self.last_status = SafetyStatus()
        self.last_reset_refusal = ""
        self.counters: dict[str, Any] = {
            "calls": 0, "passed": 0, "clipped": 0, "rate_limited": 0, "workspace": 0, "collision": 0,
            "held": 0, "invalid_inputs": 0, "watchdog_misses": 0, "start_refusals": 0,
            "estops": {cause.value: 0 for cause in EstopCause},
        }

    @classmethod
    def from_urdf(cls, urdf_path: str | os.PathLike | None = None,
                  config: SafetyConfig | str | os.PathLike | Mapping[str, Any] | None = None, *,
                  joint_names: list[str] | None = None,
                  clock: Callable[[], float] = time.monotonic) -> "SafetyWrapper":
        """Limits from ``urdf_path`` (default: the kuka iiwa), the rest from ``config`` (object, YAML path or mapping)."""
        if not isinstance(config, SafetyConfig):
            config = load_config(SafetyConfig, config)
        return cls(JointLimits.from_urdf(urdf_path, joint_names), config, clock=clock)

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
        return self._phase

    def estop(self, reason: str = "external request") -> None:
        """Latch the e-stop on request (cause ``external``); only `reset` with a valid state clears it."""
        self._latch(EstopCause.EXTERNAL, str(reason))

    def reset(self, joint_positions: Any = None, joint_velocities: Any = None) -> bool:
        """Clear the e-stop and the miss and invalid-input streaks, and begin a new safe start.

        Refuses (returns False, e-stop unchanged, reason in ``last_reset_refusal``) unless both are
        valid: float arrays of the robot's DoF, finite, positions within the URDF limits (± tolerance).
        """
        q = self._positions(joint_positions)
        if q is None or self._velocities(joint_velocities) is None:
            problems = self._state_problems(joint_positions, joint_velocities)
            self.last_reset_refusal = "reset refused: " + "; ".join(problems)
            return False
        self._estopped, self._estop_cause, self._estop_detail = False, None, ""
        self._invalid_streak = self._misses = 0
        self._pending = None
        self._phase = _AWAIT_FIRST
        self._last_cmd = np.array(q)
        self.last_reset_refusal = ""
        return True

    def report(self) -> dict:
        """Counters, e-stop state and the limits in use, as plain JSON-able values."""
        return {
            "counters": {k: dict(v) if isinstance(v, dict) else v for k, v in self.counters.items()},
            "estopped": self._estopped,
            "estop_cause": None if self._estop_cause is None else self._estop_cause.value,
            "estop_detail": self._estop_detail,
            "phase": self._phase,
            "last_status": self.last_status.to_dict(),
            "limits": self.limits.to_dict(),
            "command_lower": self.command_lower.tolist(),
            "command_upper": self.command_upper.tolist(),
            "max_speed": self._vmax.tolist(),
            "config": config_to_dict(self.config),
        }

    # -- calling ---------------------------------------------------------------------------------
    def __call__(self, action: Any, joint_positions: Any = None, joint_velocities: Any = None
                 ) -> tuple[np.ndarray, SafetyStatus]:  # type: ignore[override]
        """Guard ``action`` for the measured state: ``(command, status)``. Also counts as a fresh action.

        Called with one mapping ``{"action", "q", "qd"}`` and nothing else, it is the `ModuleBase`
        form and returns the command only (see `forward`).
        """
        if joint_positions is None and joint_velocities is None and isinstance(action, Mapping):
            return self.forward(action)  # type: ignore[return-value]
        return self._call(action, joint_positions, joint_velocities)

    def forward(self, x: Mapping[str, Any]) -> np.ndarray:
        """ModuleBase form: ``{"action", "q", "qd"}`` → command (status in ``last_status``)."""
        if not isinstance(x, Mapping):
            return self._call(x, None, None)[0]
        return self._call(x.get("action"), x.get("q"), x.get("qd"))[0]

    def _call(self, action: Any, joint_positions: Any, joint_velocities: Any) -> tuple[np.ndarray, SafetyStatus]:
        try:
            self._pending = (action, self.clock())
            return self._guard(action, joint_positions, joint_velocities)
        except Exception as e:  # a bug here must still give a safe command
            return self._internal_error(e, joint_positions)

    def feed(self, action: Any, now: float | None = None) -> None:
        """Store an action as it arrives (time ``now``, default the clock); `tick` sends it."""
        self._pending = (action, self.clock() if now is None else now)

    def tick(self, now: float, joint_positions: Any, joint_velocities: Any) -> tuple[np.ndarray, SafetyStatus]:
        """One control cycle: guard the newest fed action if it is fresh, else hold (the watchdog)."""
        try:
            pending = self._pending
            if pending is not None and now - pending[1] <= self.config.watchdog_timeout:
                self._misses = 0
                return self._guard(pending[0], joint_positions, joint_velocities)
            return self._stale(now, pending, joint_positions)
        except Exception as e:
            return self._internal_error(e, joint_positions)

    # -- the rules -------------------------------------------------------------------------------
    def _guard(self, action: Any, joint_positions: Any, joint_velocities: Any) -> tuple[np.ndarray, SafetyStatus]:
        counters = self.counters
        counters["calls"] += 1
        q = self._positions(joint_positions)
        qd = self._velocities(joint_velocities)
        if q is None or qd is None:
            return self._invalid(self._state_problems(joint_positions, joint_velocities), None)
        if self._estopped:
            return self._hold(q, SafetyStatus(Outcome.ESTOPPED, [self._latched_reason()]))
        a = action
        if type(a) is not np.ndarray or a.shape != self._shape or a.dtype.kind != "f":
            return self._invalid([_vector_problem("action", a, self.dof)], q)
        if a.dtype != np.float64:
            a = a.astype(np.float64)
        if self._phase == _AWAIT_FIRST:
            refusal = self._start_refusal(a, q)
            if refusal:
                counters["start_refusals"] += 1
                return self._hold(q, SafetyStatus(Outcome.HELD, [refusal]))

        bounds = self._run_bounds if self._phase == _RUN else self._ramp_bounds
        dt = self._dt
        cmd: list[float] = []
        changed = moved = False
        for t, x, v, (lo, hi, step, acc) in zip(a.tolist(), q, qd, bounds):
            if t - t != 0.0:  # NaN or inf
                return self._invalid([_nonfinite("action", a, self._names)], q)
            # never command further outside the margin than the robot already is
            if x < lo:
                lo = x
            elif x > hi:
                hi = x
            p = lo if t < lo else (hi if t > hi else t)
            # step bounds from the speed limit and, for speeding up, the acceleration limit
            s = v * dt
            s_lo, s_hi = s - acc, s + acc
            s_lo = -step if s_lo < -step else (0.0 if s_lo > 0.0 else s_lo)
            s_hi = step if s_hi > step else (0.0 if s_hi < 0.0 else s_hi)
            c = x + s_lo if p < x + s_lo else (x + s_hi if p > x + s_hi else p)
            cmd.append(c)
            changed = changed or c != t
            moved = moved or c != x
        self._invalid_streak = 0
        if self._phase == _AWAIT_FIRST:
            self._phase = _RAMP
        status = SafetyStatus()
        if changed:
            self._explain_limits(a, q, qd, cmd, bounds, status)
        out = np.array(cmd)

        if moved and self._model is not None:
            qa = np.array(q)
            if self._ws_min is not None:
                out = self._keep_in_workspace(qa, out, status)
            if self.config.collision_check:
                hit = self._predict_collision(qa, out)
                if hit:
                    counters["collision"] += 1
                    self._latch(EstopCause.COLLISION, hit)
                    status.add(Outcome.COLLISION, f"{hit}; e-stop latched, holding")
                    return self._hold(q, status)

        if self._phase == _RAMP and status.outcome <= Outcome.CLIPPED:
            self._phase = _RUN  # the target is reached: the start ramp is over
        if self._estopped:  # latched from another thread while this call ran
            return self._hold(q, SafetyStatus(Outcome.ESTOPPED, [self._latched_reason()]))
        if status.outcome is Outcome.PASSED:
            counters["passed"] += 1
        self._last_cmd = out
        self.last_status = status
        return out.copy(), status

    def _start_refusal(self, a: np.ndarray, q: list[float]) -> str:
        """Why the first target after a start is refused (too far from the measured pose), or ''."""
        if not np.isfinite(a).all():
            return ""  # invalid input: reported by the main path
        qa = np.array(q)
        target = np.minimum(np.maximum(a, np.minimum(self.command_lower, qa)), np.maximum(self.command_upper, qa))
        gap = np.abs(target - qa)
        j = int(gap.argmax())
        limit = self.config.start_max_gap
        if gap[j] <= limit:
            return ""
        u = self._units[j]
        return (f"start: first target is {gap[j]:.3f} {u} from the measured pose on joint {self._names[j]}, "
                f"above start_max_gap {limit:.3f} {u}; refusing to move, holding")

    def _explain_limits(self, a: np.ndarray, q: list[float], qd: list[float], cmd: list[float],
                        bounds: list[tuple[float, float, float, float]], status: SafetyStatus) -> None:
        """Reasons for a command changed by the position or rate limits (slow path only)."""
        clipped = rate = False
        dt = self._dt
        speed = "start ramp speed" if self._phase == _RAMP else "speed limit"
        for i, (t, x, v, c, (lo, hi, step, _)) in enumerate(zip(a.tolist(), q, qd, cmd, bounds)):
            if c == t:
                continue
            name, u = self._names[i], self._units[i]
            lo, hi = min(lo, x), max(hi, x)
            p = min(max(t, lo), hi)
            if p != t:
                clipped = True
                side, lim = ("above", hi) if t > hi else ("below", lo)
                status.add(Outcome.CLIPPED, f"joint {name}: target {t:.3f} {u} {side} limit {lim:.3f} {u}, clipped")
            if c != p:
                rate = True
                want, got = (p - x) / dt, (c - x) / dt
                if abs(c - x) >= step * (1 - 1e-9):
                    status.add(Outcome.RATE_LIMITED, f"joint {name}: requested {want:.3f} {u}/s above {speed} "
                                                     f"{step / dt:.3f} {u}/s, limited to {got:.3f} {u}/s")
                else:
                    status.add(Outcome.RATE_LIMITED, f"joint {name}: changing speed from {v:.3f} to {want:.3f} {u}/s "
                                                     f"needs {abs(want - v) / dt:.1f} {u}/s², above the acceleration "
                                                     f"limit {self._amax[i]:.1f} {u}/s², limited to {got:.3f} {u}/s")
        self.counters["clipped"] += clipped
        self.counters["rate_limited"] += rate

    def _keep_in_workspace(self, q: np.ndarray, cmd: np.ndarray, status: SafetyStatus) -> np.ndarray:
        """Shorten the step along its segment until the end effector is inside the box (bisection).

        If the robot is already outside, a step may not take the end effector further out.
        """
        model = self._model
        end = model.ee_position(cmd)
        out = self._outside(end)
        if out == 0.0:
            return cmd
        allowed = self._outside(model.ee_position(q)) + 1e-9
        if out <= allowed:
            return cmd
        delta = cmd - q
        ok, bad = 0.0, 1.0
        for _ in range(_BISECTION_STEPS):
            mid = 0.5 * (ok + bad)
            if self._outside(model.ee_position(q + mid * delta)) <= allowed:
                ok = mid
            else:
                bad = mid
        self.counters["workspace"] += 1
        status.add(Outcome.WORKSPACE, f"end effector would reach ({end[0]:.3f}, {end[1]:.3f}, {end[2]:.3f}) m, "
                                      f"{out:.3f} m outside the workspace box {list(self._ws_min)}..{list(self._ws_max)} m; "
                                      f"step shortened to {ok:.3f} of its length")
        # between q and cmd on every joint, so every limit cmd met still holds (rounding included)
        return np.clip(q + ok * delta, np.minimum(q, cmd), np.maximum(q, cmd))

    def _outside(self, p: np.ndarray) -> float:
        """Distance from point ``p`` to the workspace box, m (0 inside)."""
        s = 0.0
        for x, lo, hi in zip(p.tolist(), self._ws_min, self._ws_max):
            d = lo - x if x < lo else (x - hi if x > hi else 0.0)
            s += d * d
        return math.sqrt(s)

    def _predict_collision(self, q: np.ndarray, cmd: np.ndarray) -> str:
        """A reason if the step from ``q`` to ``cmd`` comes closer than the margin to contact, else ''.

        Checks the end of the step first, then points along it no more than ``collision_step`` apart.
        Where the robot already is within the margin, a step that does not reduce its clearance is allowed,
        so it can move away.
        """
        c = self.config
        model = self._model
        delta = cmd - q
        n = max(1, math.ceil(float(np.abs(delta).max()) / c.collision_step))
        now, now_known = None, False  # clearance at q, computed only if needed
        for k in range(n, 0, -1):
            hit = model.closest(q + (k / n) * delta if k < n else cmd, c.collision_margin)
            if hit is None:
                continue
            if not now_known:
                now, now_known = model.closest(q, c.collision_margin), True
            if now is None or hit.distance < now.distance - 1e-6:
                return (f"collision predicted: {hit.between} would be {hit.distance * 1000:.1f} mm apart "
                        f"(margin {c.collision_margin * 1000:.1f} mm) at {k}/{n} of the step")
        return ""

    # -- holding ---------------------------------------------------------------------------------
    def _hold(self, q: list[float] | np.ndarray, status: SafetyStatus) -> tuple[np.ndarray, SafetyStatus]:
        self.counters["held"] += 1
        out = np.array(q, dtype=np.float64)
        self._last_cmd = out
        self.last_status = status
        return out.copy(), status

    def _hold_without_state(self, status: SafetyStatus) -> tuple[np.ndarray, SafetyStatus]:
        """Hold when the measured state is unusable: the last command, or mid-range if none was ever sent."""
        if self._last_cmd is None:
            status.reasons.append("no valid state seen yet: commanding the middle of the joint ranges")
            return self._hold((self.command_lower + self.command_upper) / 2, status)
        return self._hold(self._last_cmd, status)

    def _invalid(self, problems: list[str], q: list[float] | None) -> tuple[np.ndarray, SafetyStatus]:
        """Invalid action or state: hold, and latch the e-stop after too many in a row."""
        self.counters["invalid_inputs"] += 1
        self._invalid_streak += 1
        limit = self.config.invalid_inputs_to_estop
        what = "holding the current position" if q is not None else "holding the last command"
        status = SafetyStatus(Outcome.HELD, [f"{p}; {what}" for p in problems])
        if self._estopped:
            status.add(Outcome.ESTOPPED, self._latched_reason())
        elif self._invalid_streak >= limit:
            self._latch(EstopCause.INVALID_INPUT, f"{self._invalid_streak} invalid inputs in a row")
            status.add(Outcome.ESTOPPED, f"{self._invalid_streak} invalid inputs in a row (limit {limit}): "
                                         "e-stop latched (cause invalid_input)")
        return self._hold(q, status) if q is not None else self._hold_without_state(status)

    def _stale(self, now: float, pending: tuple[Any, float] | None,
               joint_positions: Any) -> tuple[np.ndarray, SafetyStatus]:
        self.counters["calls"] += 1
        if pending is None:
            status = SafetyStatus(Outcome.HELD, ["watchdog: no action received yet; holding"])
        else:
            self._misses += 1
            self.counters["watchdog_misses"] += 1
            limit = self.config.watchdog_misses_to_estop
            status = SafetyStatus(Outcome.HELD, [
                f"watchdog: newest action is {(now - pending[1]) * 1000:.1f} ms old "
                f"(timeout {self.config.watchdog_timeout * 1000:.1f} ms), stale tick {self._misses}/{limit}; holding"])
            if self._misses >= limit and not self._estopped:
                self._latch(EstopCause.WATCHDOG, f"{self._misses} stale ticks in a row")
                status.add(Outcome.ESTOPPED, "watchdog: e-stop latched (cause watchdog)")
        if self._estopped and status.outcome is not Outcome.ESTOPPED:
            status.add(Outcome.ESTOPPED, self._latched_reason())
        q = self._positions(joint_positions)
        return self._hold(q, status) if q is not None else self._hold_without_state(status)

    def _internal_error(self, e: Exception, joint_positions: Any) -> tuple[np.ndarray, SafetyStatus]:
        self._latch(EstopCause.INTERNAL, repr(e))
        status = SafetyStatus(Outcome.ESTOPPED, [f"internal error {e!r}: e-stop latched, holding"])
        try:
            q = self._positions(joint_positions)
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

    # -- input checks ----------------------------------------------------------------------------
    def _positions(self, x: Any) -> list[float] | None:
        """A valid measured position vector, clipped to the URDF limits, as floats; else None."""
        if type(x) is not np.ndarray or x.shape != self._shape or x.dtype.kind != "f":
            return None
        out = []
        for v, (lo, hi, tol_lo, tol_hi) in zip(x.astype(np.float64, copy=False).tolist(), self._state_bounds):
            if not tol_lo <= v <= tol_hi:  # also False for NaN
                return None
            out.append(lo if v < lo else (hi if v > hi else v))
        return out

    def _velocities(self, x: Any) -> list[float] | None:
        if type(x) is not np.ndarray or x.shape != self._shape or x.dtype.kind != "f":
            return None
        out = x.astype(np.float64, copy=False).tolist()
        for v in out:
            if v - v != 0.0:
                return None
        return out

    def _state_problems(self, q: Any, qd: Any) -> list[str]:
        """What is wrong with the measured state (slow path, for reasons)."""
        problems = []
        if self._positions(q) is None:
            p = _vector_problem("joint_positions", q, self.dof)
            if not p:
                x = q.astype(np.float64)
                if not np.isfinite(x).all():
                    p = _nonfinite("joint_positions", x, self._names)
                else:
                    i = int(np.argmax(np.maximum(self.limits.lower - x, x - self.limits.upper)))
                    u = self._units[i]
                    p = (f"joint_positions: joint {self._names[i]} measured {x[i]:.3f} {u}, more than "
                         f"{self.config.state_tolerance:.3f} {u} outside its limits "
                         f"{self.limits.lower[i]:.3f}..{self.limits.upper[i]:.3f} {u}")
            problems.append(p)
        if self._velocities(qd) is None:
            problems.append(_vector_problem("joint_velocities", qd, self.dof)
                            or _nonfinite("joint_velocities", qd, self._names))
        return problems

    # -- lifecycle -------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the private PyBullet client."""
        if self._model is not None:
            self._model.close()

    def __enter__(self) -> "SafetyWrapper":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"SafetyWrapper({self.dof} joints, estopped={self._estopped}, phase={self._phase}, "
                f"workspace={'on' if self._ws_min else 'off'}, collision={'on' if self.config.collision_check else 'off'})")


def _vector_problem(what: str, x: Any, dof: int) -> str:
    """Why ``x`` is not a float array of shape (dof,), or '' if it is one."""
    if x is None:
        return f"{what}: missing (None)"
    if type(x) is not np.ndarray:
        return f"{what}: expected a numpy float array of shape ({dof},), got {type(x).__name__}"
    if x.shape != (dof,):
        return f"{what}: expected shape ({dof},), got {x.shape}"
    if x.dtype.kind != "f":
        return f"{what}: expected a floating-point dtype, got {x.dtype}"
    return ""


def _nonfinite(what: str, x: np.ndarray, names: list[str]) -> str:
    i = int(np.flatnonzero(~np.isfinite(x.astype(np.float64)))[0])
    return f"{what}: {x[i]} at joint {names[i]} (expected finite values)"


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a, dtype=np.float64)
    a.setflags(write=False)
    return a

