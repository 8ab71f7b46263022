"""The SafetyWrapper's safety property over sequences: a true robot, an injected clock, and everything going wrong.

Used by ``tests/safety/test_sequences.py`` (200,000 wrapper calls in CI) and ``benchmarks/safety.py``, so both
run exactly the same property. numpy only (a seeded ``numpy.random.Generator`` draws each sequence; hypothesis
per call would be far too slow for this many calls). Nothing at run time imports this module.

Each sequence starts a fresh wrapper on a `SequenceClock` and a true robot at a random pose (sometimes up to
0.095 rad past a limit: within ``state_tolerance``, so a valid state). Every step the clock advances normally,
stalls, runs backwards or jumps ahead; then the harness calls the wrapper (a direct call, feed then tick, a tick
alone, a feed alone, reset with a valid or an invalid state, an external e-stop, or a fresh wrapper). Actions are
near or far targets, NaN/inf, wrong shapes, wrong dtypes or not arrays, sometimes fed with a time from the future
or the past. The measured state is usually the truth, otherwise NaN/inf, a wrong shape or type, beyond the
tolerance, a jump the robot cannot make (larger than the wrapper's allowance for the time elapsed), or stamped
from the future or too long ago. The robot then moves toward each command (all the way or part of it).

Checked after every call (a violation is recorded with the sequence seed and step to replay it):

- the command is None exactly while no valid state was seen yet; otherwise a float64 array of the DoF, finite;
- inside the position limits minus margin, or between a true pose beyond them and the limit;
- its step from the TRUE pose is within the speed limit times the control period;
- a valid action that passed is sent unchanged; an invalid one never passes; every intervention has a reason;
- the e-stop is cleared only by `reset` with a valid state (and such a reset always succeeds);
- the watchdog latches only when its misses in a row reach the limit (and then always), counted by an
  independent model of the rules in `tinker_safety.watchdog`; a tick executes an action exactly when that model says
  it is fresh.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tinker_safety.config import SafetyConfig
from tinker_safety.limits import JointLimits
from tinker_safety.safety_wrapper import SafetyWrapper
from tinker_safety.status import EstopCause, Outcome

__all__ = ["CI_CALLS", "SequenceClock", "SequenceReport", "run_sequences"]

CI_CALLS = 200_000
"""checked wrapper calls (direct calls and ticks) of the sequence property in CI"""
STEPS_PER_SEQUENCE = 400
"""steps of one sequence before a fresh wrapper and robot (a fresh wrapper also appears inside sequences)"""


class SequenceClock:
    """The injected clock of a sequence: the harness moves it (normally, stalled, backwards, jumps)."""

    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class SequenceReport:
    """What a run did and every violation found."""

    calls: int = 0
    """checked wrapper calls: direct calls and ticks"""
    resets: int = 0
    feeds: int = 0
    sequences: int = 0
    violations: list[str] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=lambda: {o.name.lower(): 0 for o in Outcome})
    no_command: int = 0
    refused_states: int = 0
    estops: dict[str, int] = field(default_factory=lambda: {c.value: 0 for c in EstopCause})
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"calls": self.calls, "resets": self.resets, "feeds": self.feeds, "sequences": self.sequences,
                "violations": len(self.violations), "outcomes": dict(self.outcomes), "no_command": self.no_command,
                "refused_states": self.refused_states, "estops": dict(self.estops), "seconds": round(self.seconds, 2)}


def run_sequences(limits: JointLimits, config: SafetyConfig, calls: int, seed: int = 0, max_violations: int = 20,
                  wrapper_config: SafetyConfig | None = None) -> SequenceReport:
    """Run sequences until ``calls`` checked calls are done (or ``max_violations`` are found).

    ``config`` is what the checks expect; the wrapper is built with ``wrapper_config`` (default: the same), so a
    test can show that a wrapper weaker than its configuration is caught.
    """
    report = SequenceReport()
    t0 = time.perf_counter()
    seq = 0
    while report.calls < calls and len(report.violations) < max_violations:
        _Sequence(limits, config, wrapper_config or config, np.random.default_rng([seed, seq]),
                  f"seed [{seed}, {seq}]", report).run(calls, max_violations)
        seq += 1
    report.sequences = seq
    report.seconds = time.perf_counter() - t0
    return report


class _Sequence:
    """One sequence: the true robot, the clock, the oracle of the watchdog and of the e-stop, and the checks."""

    def __init__(self, limits: JointLimits, config: SafetyConfig, wrapper_config: SafetyConfig,
                 rng: np.random.Generator, name: str, report: SequenceReport):
        c = self.config = config
        self.wrapper_config = wrapper_config
        self.limits, self.rng, self.name, self.report = limits, rng, name, report
        self.dof = n = limits.dof
        self.period = c.control_period
        self.clock = SequenceClock(float(rng.uniform(0.0, 1e4)))
        self.lower, self.upper = limits.lower, limits.upper
        self.cmd_lower, self.cmd_upper = self.lower + c.position_margin, self.upper - c.position_margin
        self.valid_lo, self.valid_hi = self.lower - c.state_tolerance, self.upper + c.state_tolerance
        self.max_step = limits.velocity * c.velocity_scale * c.control_period * (1 + 1e-9) + 1e-12
        self._bounds = (self.cmd_lower.tolist(), self.cmd_upper.tolist(), self.max_step.tolist())
        self.jump_speed = limits.velocity * (c.state_jump_scale or math.inf)
        self.ticks_per_action = max(1, int(c.watchdog_timeout / c.control_period + 1e-9))
        # the true robot: a random pose, sometimes up to 0.095 rad past a limit
        q = rng.uniform(self.cmd_lower, self.cmd_upper)
        if rng.random() < 0.3:
            j = int(rng.integers(n))
            past = float(rng.uniform(0.0, min(0.095, 0.95 * c.state_tolerance)))
            q[j] = self.upper[j] + past if rng.random() < 0.5 else self.lower[j] - past
        self.q, self.qd = q, np.zeros(n)
        self.goal = rng.uniform(-4.0, 4.0, n)
        self._new_guard()

    # -- the wrapper and the oracle's view of it ----------------------------------------------------------
    def _new_guard(self) -> None:
        self.guard = SafetyWrapper(self.limits, self.wrapper_config, clock=self.clock)
        self.seen_valid = False  # a valid state accepted (or a reset) since this wrapper was built
        self.ref = None  # the last accepted pose (the wrapper's jump reference)
        self.last_check_t: float | None = None  # clock at the wrapper's last state check (None: a period)
        self.fed_at: float | None = None
        self.uses = 0
        self.misses = 0
        self.pending_action: Any = None
        self.pending_ok = False

    def run(self, calls: int, max_violations: int) -> None:
        rng, report = self.rng, self.report
        n_steps = STEPS_PER_SEQUENCE
        u = rng.random((n_steps, 8))
        for k in range(n_steps):
            if report.calls >= calls or len(report.violations) >= max_violations:
                return
            self._advance_clock(u[k, 0])
            op = u[k, 1]
            if op < 0.005:
                self._new_guard()
                continue
            if op < 0.055:
                self._reset(k, u[k, 2])
                continue
            if op < 0.06:
                was = self.guard.estopped
                self.guard.estop("sequence: external")
                if not self.guard.estopped or (not was and self.guard.estop_cause is not EstopCause.EXTERNAL):
                    self._violation(k, "estop() did not latch")
                report.estops["external"] += not was
                continue
            action, action_ok = self._action(u[k, 3])
            q, qd, stamp, state_ok = self._state(u[k, 4], u[k, 5])
            if op < 0.55:
                self._checked(k, "call", action, action_ok, q, qd, stamp, state_ok)
            elif op < 0.82:
                self._feed(action, u[k, 6])
                self._checked(k, "tick", action, action_ok, q, qd, stamp, state_ok)
            elif op < 0.97:
                self._checked(k, "tick", self.pending_action, self.pending_ok, q, qd, stamp, state_ok)
            else:
                self._feed(action, u[k, 6])

    # -- inputs --------------------------------------------------------------------------------------------
    def _advance_clock(self, r: float) -> None:
        p = self.period
        if r < 0.80:
            dt = p * (0.8 + 0.4 * self.rng.random())
        elif r < 0.87:
            dt = 0.0  # stalled
        elif r < 0.91:
            dt = -float(self.rng.uniform(0.0, 1.0))  # backwards
        elif r < 0.95:
            dt = float(self.rng.uniform(0.1, 2.0))  # jumps ahead
        else:
            dt = p * 0.1
        self.clock.t += dt

    def _action(self, r: float) -> tuple[Any, bool]:
        rng, n = self.rng, self.dof
        if r < 0.25:
            return self.q + rng.normal(0.0, 0.1, n), True
        if r < 0.55:  # a goal that stays for a while: the arm speeds up to the speed limit
            if rng.random() < 0.05:
                self.goal = rng.uniform(-4.0, 4.0, n)
            return self.goal.copy(), True
        if r < 0.70:
            return rng.uniform(-4.0, 4.0, n), True
        if r < 0.82:
            return self.q.copy(), True
        if r < 0.86:
            a = self.q + rng.normal(0.0, 0.1, n)
            a[int(rng.integers(n))] = (np.nan, np.inf, -np.inf)[int(rng.integers(3))]
            return a, False
        if r < 0.88:
            return np.zeros((n - 1, n + 1, (n, 1), 2 * n)[int(rng.integers(4))]), False
        if r < 0.90:
            return np.zeros(n, dtype=(np.int64, np.bool_, np.complex128)[int(rng.integers(3))]), False
        if r < 0.92:
            return (None, [0.0] * n, "target", 1.5)[int(rng.integers(4))], False
        a = (self.q + rng.normal(0.0, 0.1, n)).astype(np.float32)
        return a, True

    def _state(self, r: float, rs: float) -> tuple[Any, Any, float | None, bool]:
        """The measured state to hand in, its stamp, and whether the wrapper must accept it."""
        rng, n, c = self.rng, self.dof, self.config
        stamp: float | None = None
        stamp_ok = True
        t = self.clock.t
        if rs < 0.45:
            stamp = t - float(rng.uniform(0.0, 0.9 * c.state_max_age))
        elif rs < 0.50:
            stamp = t + float(rng.uniform(0.0, 0.9 * c.state_future_tolerance))
        elif rs < 0.52:
            stamp, stamp_ok = t + c.state_future_tolerance + float(rng.uniform(0.01, 3600.0)), False
        elif rs < 0.54:
            stamp, stamp_ok = t - c.state_max_age - float(rng.uniform(0.01, 60.0)), False
        q, qd = self.q.copy(), self.qd.copy()
        if r < 0.90:
            return q, qd, stamp, stamp_ok
        if r < 0.91:
            q[int(rng.integers(n))] = np.nan
        elif r < 0.92:
            qd[int(rng.integers(n))] = (np.inf, -np.inf, np.nan)[int(rng.integers(3))]
        elif r < 0.93:
            q = (None, q[:-1], q.reshape(1, n), list(q))[int(rng.integers(4))]
        elif r < 0.95:
            j = int(rng.integers(n))
            q[j] = self.valid_hi[j] + rng.uniform(0.001, 1.0) if rng.random() < 0.5 else \
                self.valid_lo[j] - rng.uniform(0.001, 1.0)
        else:
            spoofed = self._spoof()
            if spoofed is None:
                return q, qd, stamp, stamp_ok
            q = spoofed
        return q, qd, stamp, False

    def _spoof(self) -> np.ndarray | None:
        """A valid-looking pose one joint further from the wrapper's reference than it allows now, or None."""
        if self.ref is None or self.config.state_jump_scale is None:
            return None
        dt = self.period if self.last_check_t is None else self.clock.t - self.last_check_t
        dt = max(dt, self.period)
        j = int(self.rng.integers(self.dof))
        jump = self.jump_speed[j] * dt + self.config.state_jump_slack + float(self.rng.uniform(0.02, 1.0))
        for x in (self.ref[j] + jump, self.ref[j] - jump)[:: 1 if self.rng.random() < 0.5 else -1]:
            if self.valid_lo[j] + 1e-9 <= x <= self.valid_hi[j] - 1e-9:
                q = self.q.copy()
                q[j] = x
                return q
        return None

    # -- operations ----------------------------------------------------------------------------------------
    def _feed(self, action: Any, r: float) -> None:
        now = None
        t = self.clock.t
        if r < 0.1:
            now = t + float(self.rng.uniform(1e-6, 3600.0))  # from the future
        elif r < 0.2:
            now = t - float(self.rng.uniform(0.0, 0.2))  # arrived a while ago
        self.guard.feed(action, now=now)
        self.fed_at, self.uses = (t if now is None else now), 0
        self.pending_action = action
        self.pending_ok = type(action) is np.ndarray and action.shape == (self.dof,) and action.dtype.kind == "f" \
            and bool(np.isfinite(action.astype(np.float64)).all())
        self.report.feeds += 1

    def _reset(self, k: int, r: float) -> None:
        # a valid state, or one with a wrong shape, NaN or beyond the tolerance (a reset has no jump check)
        q, qd, stamp, ok = self._state(0.0 if r < 0.6 else 0.90 + 0.0499 * (r - 0.6) / 0.4, self.rng.random())
        was = self.guard.estopped
        done = self.guard.reset(q, qd, stamp=stamp)
        self.report.resets += 1
        if done != ok:
            self._violation(k, f"reset returned {done} for a state the oracle finds {'valid' if ok else 'invalid'}: "
                               f"{self.guard.last_reset_refusal}")
        if done:
            if self.guard.estopped:
                self._violation(k, "a successful reset left the e-stop latched")
            self.seen_valid = True
            self.ref = np.asarray(q, dtype=np.float64).copy()
            self.last_check_t = None
            self.fed_at, self.uses, self.misses = None, 0, 0
        elif self.guard.estopped != was:
            self._violation(k, "a refused reset changed the e-stop")

    def _checked(self, k: int, op: str, action: Any, action_ok: bool, q: Any, qd: Any, stamp: float | None,
                 state_ok: bool) -> None:
        g, report, t = self.guard, self.report, self.clock.t
        was_estopped = g.estopped
        refused_before = g.counters["refused_states"]
        if op == "call":
            cmd, status = g(action, q, qd, stamp=stamp)
            fresh = True
            self.fed_at, self.uses, self.misses = t, 1, 0
            self.pending_action, self.pending_ok = action, action_ok
        else:
            fresh = self._watchdog_tick(t)
            cmd, status = g.tick(t, q, qd, stamp=stamp)
        # the state check ran once: mirror the wrapper's reference
        self.last_check_t = t
        if state_ok:
            self.seen_valid = True
            self.ref = self.q.copy()
        report.calls += 1
        report.outcomes[status.outcome.name.lower()] += 1
        report.refused_states += not state_ok
        where = f"{op} k={k}"
        if (g.counters["refused_states"] > refused_before) == state_ok:
            self._violation(k, f"{where}: the state was {'refused' if state_ok else 'accepted'}, the oracle finds it "
                               f"{'valid' if state_ok else 'invalid'} ({status.summary})")

        if not self.seen_valid:
            report.no_command += cmd is None
            if cmd is not None:
                self._violation(k, f"{where}: a command {cmd} before any valid state")
        elif not (type(cmd) is np.ndarray and cmd.dtype == np.float64 and cmd.shape == (self.dof,)):
            self._violation(k, f"{where}: command {cmd!r} is not a float64 array of shape ({self.dof},)")
            cmd = None
        if cmd is not None:  # per joint on Python floats: several times faster than numpy for 7 joints
            for j, (c, x, lo, hi, m) in enumerate(zip(cmd.tolist(), self.q.tolist(), *self._bounds)):
                if not (lo if lo < x else x) <= c <= (hi if hi > x else x):  # also catches NaN and inf
                    self._violation(k, f"{where}: command {c} on joint {j} outside the limits minus margin "
                                       f"{lo:.6f}..{hi:.6f} and not toward them from the true pose {x:.6f}")
                elif not abs(c - x) <= m:
                    self._violation(k, f"{where}: step {abs(c - x):.6f} rad on joint {j} from the true pose is "
                                       f"above {m:.6f} ({status.summary})")
        if status.outcome is not Outcome.PASSED and not status.reasons:
            self._violation(k, f"{where}: {status.outcome.name} without a reason")
        executed = fresh and op == "tick"
        if op == "call" or executed:
            if not action_ok and status.outcome < Outcome.HELD:
                self._violation(k, f"{where}: invalid action {action!r} got {status.outcome.name}")
            if action_ok and status.outcome is Outcome.PASSED and cmd is not None \
                    and not np.array_equal(cmd, np.asarray(action, dtype=np.float64)):
                self._violation(k, f"{where}: passed but changed: {action} -> {cmd}")
        if op == "tick":
            watchdog_hold = bool(status.reasons) and status.reasons[0].startswith("watchdog:")
            if fresh == watchdog_hold:
                self._violation(k, f"{where}: the oracle finds the action {'fresh' if fresh else 'stale'}, the "
                                   f"wrapper says {status.summary!r}")
        # the e-stop: never cleared here; the watchdog latches exactly on enough misses in a row
        if was_estopped and not g.estopped:
            self._violation(k, f"{where}: the e-stop was cleared without a reset")
        latched_now = g.estopped and not was_estopped
        if latched_now:
            report.estops[g.estop_cause.value] += 1
        limit = self.config.watchdog_misses_to_estop
        if latched_now and g.estop_cause is EstopCause.WATCHDOG and not (op == "tick" and self.misses >= limit):
            self._violation(k, f"{where}: watchdog latched after {self.misses} misses in a row (limit {limit})")
        if op == "tick" and not fresh and self.misses >= limit and not g.estopped:
            self._violation(k, f"{where}: {self.misses} misses in a row and the watchdog did not latch")
        # the robot moves toward the command: all the way, or part of it
        if cmd is not None:
            f = 1.0 if self.rng.random() < 0.7 else float(self.rng.random())
            new = self.q + f * (cmd - self.q)
            self.qd = (new - self.q) / self.period
            self.q = new
        else:
            self.qd = np.zeros(self.dof)

    def _watchdog_tick(self, t: float) -> bool:
        """The oracle's watchdog (the rules of `tinker_safety.watchdog`, written again): is this tick's action fresh?"""
        if self.fed_at is None:
            return False
        age = t - self.fed_at
        if 0.0 <= age <= self.config.watchdog_timeout and self.uses < self.ticks_per_action:
            self.uses += 1
            self.misses = 0
            return True
        self.misses += 1
        return False

    def _violation(self, k: int, what: str) -> None:
        self.report.violations.append(f"{self.name} step {k}: {what}")


def sequence_config(config: SafetyConfig, **overrides: Any) -> SafetyConfig:
    """``config`` with the workspace box and the collision check off (the property is about the limits, the
    state checks, the watchdog and the e-stop; the geometry has its own tests), the jump check on (SafetyConfig's
    default scale if ``config`` has it off), plus ``overrides``."""
    jump = config.state_jump_scale or SafetyConfig.state_jump_scale
    return dataclasses.replace(config, **{"collision_check": False, "workspace_min": None, "workspace_max": None,
                                          "state_jump_scale": jump, **overrides})
