"""`JointLimiter`: a target clipped to the position limits and its step limited by speed and acceleration.

Per joint, from the measured position ``x`` and velocity ``v``: the target is clipped to the URDF limits minus
``position_margin``, widened to include ``x`` (never command further outside than the robot already is: a pose
beyond a limit is brought back from where it is, at no more than the speed limit); then the step ``c - x`` is
bounded by the speed limit (``velocity_scale`` of the URDF limit, or ``start_velocity_scale`` during the start
ramp) and, for speeding up, by the acceleration limit from ``v``. Slowing to a stop is always allowed.

The hot path runs per joint on Python floats: for 7 joints that is several times faster than numpy.
"""

from __future__ import annotations

import numpy as np

from tinker_safety.status import Outcome, SafetyStatus

__all__ = ["JointLimiter"]


class JointLimiter:
    """Position, speed and acceleration limits of the commanded joints."""

    def __init__(self, command_lower: np.ndarray, command_upper: np.ndarray, max_speed: np.ndarray,
                 ramp_speed: np.ndarray, max_accel: np.ndarray, period: float, names: list[str], units: list[str]):
        self.period = period
        self.max_accel = max_accel
        self._names, self._units = names, units
        self.run_bounds, self.ramp_bounds = (
            list(zip(command_lower.tolist(), command_upper.tolist(), (vmax * period).tolist(),
                     (max_accel * period * period).tolist()))
            for vmax in (max_speed, ramp_speed))

    def limit(self, a: list[float], q: list[float], qd: list[float], ramp: bool
              ) -> tuple[list[float] | None, bool, bool]:
        """``(command, changed, moved)`` for target ``a``; command None if ``a`` holds NaN or inf."""
        bounds = self.ramp_bounds if ramp else self.run_bounds
        dt = self.period
        cmd: list[float] = []
        changed = moved = False
        for t, x, v, (lo, hi, step, acc) in zip(a, q, qd, bounds):
            if t - t != 0.0:  # NaN or inf
                return None, False, False
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
        return cmd, changed, moved

    def explain(self, a: list[float], q: list[float], qd: list[float], cmd: list[float], ramp: bool,
                status: SafetyStatus) -> tuple[bool, bool]:
        """Add the reasons for a command changed by the position or rate limits: ``(clipped, rate_limited)``."""
        clipped = rate = False
        dt = self.period
        bounds = self.ramp_bounds if ramp else self.run_bounds
        speed = "start ramp speed" if ramp else "speed limit"
        for i, (t, x, v, c, (lo, hi, step, _)) in enumerate(zip(a, q, qd, cmd, bounds)):
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
                                                     f"limit {self.max_accel[i]:.1f} {u}/s², limited to {got:.3f} {u}/s")
        return clipped, rate
