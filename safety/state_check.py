"""`StateCheck`: whether a measured joint state can be trusted, and why not, with values and units.

A state is refused when:

- it is not a float array of the robot's DoF, or holds NaN or inf;
- a position lies more than ``state_tolerance`` outside the URDF limits;
- its optional ``stamp`` (s, on ``stamp_clock``) is more than ``state_future_tolerance`` ahead of that clock,
  or older than ``state_max_age``;
- a joint moved further since the last accepted state than the robot can: ``state_jump_scale`` times its URDF
  velocity limit times the time elapsed, plus ``state_jump_slack``. The time is read on the injected monotonic
  clock since the previous check (of any state, refused ones too), and counts as at least one
  ``control_period``: a stalled or backward clock never refuses a normal step, and refused states do not
  widen the allowance (a state that stays far away is refused every time and latches the e-stop).

Positions are kept as measured (not clipped): a pose beyond a limit is where the robot is, and commands
start from there.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import numpy as np

from tinker_safety.config import SafetyConfig
from tinker_safety.limits import JointLimits

__all__ = ["StateCheck", "vector_problem", "nonfinite_problem"]

_NO_PROBLEMS: list[str] = []


class StateCheck:
    """Validates measured states for one robot; keeps the last accepted pose for the jump check."""

    def __init__(self, limits: JointLimits, config: SafetyConfig, stamp_clock: Callable[[], float]):
        c = config
        self.limits = limits
        self.dof = limits.dof
        self._shape = (self.dof,)
        self._names, self._units = list(limits.names), limits.units
        self._tol = c.state_tolerance
        self._bounds = list(zip((limits.lower - c.state_tolerance).tolist(), (limits.upper + c.state_tolerance).tolist()))
        self._period = c.control_period
        self._max_age, self._future = c.state_max_age, c.state_future_tolerance
        self._jump_scale, self._slack = c.state_jump_scale, c.state_jump_slack
        self._jump_speed = None if c.state_jump_scale is None else (limits.velocity * c.state_jump_scale).tolist()
        self.stamp_clock = stamp_clock
        self._ref: list[float] | None = None
        self._ref_t: float | None = None

    # -- the reference pose --------------------------------------------------------------------------
    def rebase(self, q: list[float]) -> None:
        """Take ``q`` as the last accepted pose (a reset): the next state is checked against it over one period."""
        self._ref, self._ref_t = q, None

    def forget(self) -> None:
        self._ref = self._ref_t = None

    # -- checks ----------------------------------------------------------------------------------------
    def check(self, joint_positions: Any, joint_velocities: Any, now: float, stamp: float | None = None
              ) -> tuple[list[float] | None, list[float] | None, list[str]]:
        """``(q, qd, [])`` for a state to trust (it becomes the reference), else ``(None, None, problems)``.

        ``now`` is a reading of the injected monotonic clock (for the jump check).
        """
        last, self._ref_t = self._ref_t, now  # every check advances the time base, refused ones too
        q = self.positions(joint_positions)
        qd = self.velocities(joint_velocities)
        if q is None or qd is None:
            return None, None, self.problems(joint_positions, joint_velocities)
        if stamp is not None:
            problem = self.stamp_problem(stamp)
            if problem:
                return None, None, [problem]
        ref = self._ref
        if ref is not None and self._jump_speed is not None:
            dt = self._period if last is None else now - last
            if not dt > self._period:  # also NaN: a stalled or backward clock counts one period
                dt = self._period
            slack = self._slack
            for x, r, v in zip(q, ref, self._jump_speed):
                if abs(x - r) > v * dt + slack:
                    return None, None, [self._jump_problem(q, ref, dt)]
        self._ref = q
        return q, qd, _NO_PROBLEMS

    def check_for_reset(self, joint_positions: Any, joint_velocities: Any, stamp: float | None = None
                        ) -> tuple[list[float] | None, list[str]]:
        """``(q, [])`` if the state may arm a reset (no jump check: a reset says where the robot is), else problems."""
        q = self.positions(joint_positions)
        if q is None or self.velocities(joint_velocities) is None:
            return None, self.problems(joint_positions, joint_velocities)
        if stamp is not None:
            problem = self.stamp_problem(stamp)
            if problem:
                return None, [problem]
        return q, _NO_PROBLEMS

    def positions(self, x: Any) -> list[float] | None:
        """A valid measured position vector as floats (as measured, within the limits ± tolerance); else None."""
        if type(x) is not np.ndarray or x.shape != self._shape or x.dtype.kind != "f":
            return None
        out = x.astype(np.float64, copy=False).tolist()
        for v, (lo, hi) in zip(out, self._bounds):
            if not lo <= v <= hi:  # also False for NaN
                return None
        return out

    def velocities(self, x: Any) -> list[float] | None:
        if type(x) is not np.ndarray or x.shape != self._shape or x.dtype.kind != "f":
            return None
        out = x.astype(np.float64, copy=False).tolist()
        for v in out:
            if v - v != 0.0:
                return None
        return out

    def stamp_problem(self, stamp: Any) -> str:
        """Why the state's stamp is refused (future beyond tolerance, too old, not a time), or ''."""
        if isinstance(stamp, (bool, np.bool_)) or not isinstance(stamp, numbers.Real) or not math.isfinite(stamp):
            return f"joint_state.stamp: expected a finite time in s, got {stamp!r}"
        age = self.stamp_clock() - stamp
        if age < -self._future:
            return (f"joint_state.stamp: {-age * 1000:.1f} ms ahead of the clock "
                    f"(tolerance {self._future * 1000:.1f} ms)")
        if not age <= self._max_age:
            return f"joint_state.stamp: {age * 1000:.1f} ms old (max age {self._max_age * 1000:.1f} ms)"
        return ""

    def problems(self, q: Any, qd: Any) -> list[str]:
        """What is wrong with the measured state's shape or values (slow path, for reasons)."""
        problems = []
        if self.positions(q) is None:
            p = vector_problem("joint_positions", q, self.dof)
            if not p:
                x = q.astype(np.float64)
                if not np.isfinite(x).all():
                    p = nonfinite_problem("joint_positions", x, self._names)
                else:
                    lim = self.limits
                    i = int(np.argmax(np.maximum(lim.lower - x, x - lim.upper)))
                    u = self._units[i]
                    p = (f"joint_positions: joint {self._names[i]} measured {x[i]:.3f} {u}, more than "
                         f"{self._tol:.3f} {u} outside its limits {lim.lower[i]:.3f}..{lim.upper[i]:.3f} {u}")
            problems.append(p)
        if self.velocities(qd) is None:
            problems.append(vector_problem("joint_velocities", qd, self.dof)
                            or nonfinite_problem("joint_velocities", qd, self._names))
        return problems

    def _jump_problem(self, q: list[float], ref: list[float], dt: float) -> str:
        moved = [abs(x - r) - (v * dt + self._slack) for x, r, v in zip(q, ref, self._jump_speed)]
        i = int(np.argmax(moved))
        u = self._units[i]
        return (f"joint_positions: joint {self._names[i]} moved {abs(q[i] - ref[i]):.3f} {u} in {dt * 1000:.1f} ms "
                f"since the last accepted state, more than the {self._jump_speed[i] * dt + self._slack:.3f} {u} it "
                f"can move ({self._jump_scale:g} x its velocity limit {self.limits.velocity[i]:.3f} {u}/s, plus "
                f"{self._slack:.3f} {u}); implausible")


def vector_problem(what: str, x: Any, dof: int) -> str:
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


def nonfinite_problem(what: str, x: np.ndarray, names: list[str]) -> str:
    i = int(np.flatnonzero(~np.isfinite(x.astype(np.float64)))[0])
    return f"{what}: {x[i]} at joint {names[i]} (expected finite values)"
