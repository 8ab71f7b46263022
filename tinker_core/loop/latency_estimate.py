"""`LatencyEstimator`: a robot's command latency, in control periods, from its own commands and joint states (no ROS).

`tinker_core.loop.latency_compensation` needs to know how many periods pass between a command and the motors. A
robot's data tells: a position-controlled joint moves each period a fraction of the way from where it is to the
target its motors hold, and with ``k`` periods of dead time that target is the command sent ``k`` states ago. So the
estimator fits, for every candidate ``k`` (0..`MAX_STEPS`), the first-order model with dead time

    q[t+1] - q[t] = a_j * (c[t-k] - q[t])      (per joint j; c[s] the command that answered state s)

by least squares, and the ``k`` whose model explains most of the measured motion (its R²) is the latency. Only the
two streams every arm has go in (the commands the safety stage sent, the joint states it received), so the same
class runs in the safety stage on the robot, in ``tinker eval`` and in the sim-to-real protocol.

A period with no state or no command breaks the sequence (nothing across it is fitted), as does an episode's start
(the arm may have been moved home by something else). Old cycles fade with ``window``, so a latency that changes
(a loaded network) is followed. There is no estimate until the arm has moved enough for one lag to stand out:
`LatencyEstimate.periods` is None and ``why`` says what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinker_core.errors import ConfigError
from tinker_core.loop.edges import joint_vector
from tinker_core.loop.latency_compensation import MAX_STEPS

MIN_CYCLES = 40
"""fitted periods before an estimate is given (2 s at 50 ms)"""
MIN_FIT = 0.5
"""the best lag's model must explain at least this share of the measured motion (R²)"""
MIN_RESIDUAL_RATIO = 2.0
"""... and every other lag's must leave at least this many times as much of it unexplained (1 - R²): a smooth
command stream makes neighbouring lags explain nearly as much, so the unexplained part is what tells them apart"""
MIN_MOTION_RAD = 1e-3
"""RMS joint motion per period below which the arm is taken as still (nothing to fit)"""


@dataclass(frozen=True)
class LatencyEstimate:
    """``periods``: control periods from a command to the motors (None: cannot tell yet, ``why``); ``fit``: R² of
    that lag's model; ``runner_up``: the best R² of any other lag; ``cycles``: periods fitted (faded weight)."""

    periods: int | None
    fit: float
    runner_up: float
    cycles: float
    why: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"periods": self.periods, "fit": round(self.fit, 4), "runner_up": round(self.runner_up, 4),
                "cycles": round(self.cycles, 1), "why": self.why}


class LatencyEstimator:
    """Feed it in order: `state` (each measured joint position vector), then `command` (the joint target sent in
    answer to that state, if any); `estimate` at any time. ``dof`` joints; lags 0..``max_steps``; ``window``:
    periods after which an old cycle's weight has faded to 1/e; ``where`` names the stage in errors."""

    def __init__(self, dof: int, max_steps: int = MAX_STEPS, window: float = 2000.0, where: str = "latency_estimate"):
        if not 0 <= int(max_steps) <= MAX_STEPS:
            raise ConfigError(f"{where}: max_steps must be 0..{MAX_STEPS}, got {max_steps}")
        if not window >= 1:
            raise ConfigError(f"{where}: window must be >= 1 period, got {window}")
        self.dof, self.where, self.lags = int(dof), where, int(max_steps) + 1
        self.keep = 1.0 - 1.0 / float(window)
        self.sxx = np.zeros((self.lags, self.dof))
        self.sxy = np.zeros((self.lags, self.dof))
        self.syy = np.zeros((self.lags, self.dof))
        self.n = np.zeros(self.lags)
        self._estimate: LatencyEstimate | None = None  # `estimate` of the sums as they are (None: not yet made)
        self.break_sequence()

    def break_sequence(self, rest: np.ndarray | None = None) -> None:
        """Nothing before this is joined to what follows (a gap); the fit so far is kept. ``rest``: the arm rested
        at this pose, commanded there, for longer than any lag (an episode's start after a reset), so the commands
        before the next state are known: all ``rest``."""
        self._q: np.ndarray | None = None
        self._sent = np.zeros((self.lags, self.dof))  # row k: the command that answered the state k states back
        self._known = np.zeros(self.lags, dtype=bool)
        if rest is not None:
            self._sent[:] = joint_vector(rest, self.dof, f"{self.where}.rest", "finite joint positions (rad)")
            self._known[:] = True

    def state(self, q: np.ndarray) -> None:
        """A measured joint position vector (rad), one control period after the previous one."""
        q = joint_vector(q, self.dof, f"{self.where}.state", "finite joint positions (rad)")
        if self._q is not None and self._known.any():
            ok = self._known
            x = self._sent[ok] - self._q
            y = q - self._q
            for acc in (self.sxx, self.sxy, self.syy, self.n):
                acc *= self.keep
            self.sxx[ok] += x * x
            self.sxy[ok] += x * y
            self.syy[ok] += y * y
            self.n[ok] += 1.0
            self._estimate = None  # only a fitted period changes the sums
        self._q = q
        self._sent[1:] = self._sent[:-1]  # every command is one state older now
        self._known[1:] = self._known[:-1]
        self._known[0] = False  # the command answering this state is yet to come

    def skip(self, periods: int) -> None:
        """``periods`` states went unheard (dropped on the way): no command answered them, so the motors kept the
        newest one through them; no motion is fitted across the gap."""
        for _ in range(min(int(periods), self.lags)):
            self._sent[1:] = self._sent[:-1]
            self._known[1:] = self._known[:-1]  # row 0 keeps the newest command: what the motors still hold
        self._q = None

    def command(self, c: np.ndarray) -> None:
        """The joint target (rad) sent in answer to the newest state (a second one for the same state replaces it)."""
        c = joint_vector(c, self.dof, f"{self.where}.command", "finite joint targets (rad)")
        if self._q is not None:  # no state heard since a break or a gap: nothing for it to answer
            self._sent[0] = c
            self._known[0] = True

    def estimate(self) -> LatencyEstimate:
        """The lag whose model explains most of the motion, when it stands out (else ``periods`` None, and why);
        made once per fitted period (a node's /diagnostics reads it twice a tick)."""
        if self._estimate is None:
            self._estimate = self._fit()
        return self._estimate

    def _fit(self) -> LatencyEstimate:
        if not (self.n >= MIN_CYCLES).all():  # fewer samples than that fit any lag (a gain per joint)
            if (self.n >= MIN_CYCLES).any():  # a lag not yet tried cannot be ruled out
                k = int(np.argmin(self.n))
                why = f"lag {k} has {self.n[k]:.0f} of {MIN_CYCLES} periods with the commands before it"
            else:
                why = f"{self.n.max():.0f} of {MIN_CYCLES} periods with a state and the commands before it"
            return LatencyEstimate(None, 0.0, 0.0, float(self.n.max()), why)
        res = self.syy - np.divide(self.sxy ** 2, self.sxx, out=np.zeros_like(self.sxx), where=self.sxx > 0)
        total = self.syy.sum(axis=1)
        fits = 1.0 - res.sum(axis=1) / np.maximum(total, 1e-300)
        best = int(np.argmax(fits))
        fit = float(fits[best])
        runner_up = float(np.delete(fits, best).max()) if self.lags > 1 else 0.0
        cycles = float(self.n[best])
        if np.sqrt(total[best] / cycles / self.dof) < MIN_MOTION_RAD:
            why = f"the arm has hardly moved (RMS under {MIN_MOTION_RAD * 1e3:.0f} mrad a period)"
        elif fit < MIN_FIT:
            why = f"no lag explains the motion (best R² {fit:.2f} < {MIN_FIT})"
        elif 1.0 - runner_up < MIN_RESIDUAL_RATIO * max(1.0 - fit, 0.0):
            why = f"two lags explain it about as well (R² {fit:.4f} and {runner_up:.4f})"
        else:
            return LatencyEstimate(best, fit, runner_up, cycles)
        return LatencyEstimate(None, fit, runner_up, cycles, why)
