"""`LatencyFollow`: when the loop takes a measured command latency as the one it compensates (``latency_auto``; no ROS).

The safety stage measures the robot's command latency from the commands it sends and the states it hears
(`tinker_core.loop.latency_estimate.LatencyEstimator`). With ``latency_auto`` the loop compensates what was measured
instead of a fixed ``latency_compensation``, which is then only the value it starts from. A measurement is taken
only once it has stood: the same number of periods at `STANDING` looks in a row, `LOOK_EVERY` states apart
(1 s at 50 ms), so no single stretch of motion switches it. Where the estimate cannot tell (a still arm, two lags
alike), what is compensated stays.
"""

from __future__ import annotations

from typing import Callable

from tinker_core.loop.edges import CommandLatency
from tinker_core.loop.latency_compensation import check_steps
from tinker_core.loop.latency_estimate import LatencyEstimate

LOOK_EVERY = 5
"""states heard between two looks at the estimate (a fit costs ~20 us: not every cycle)"""
STANDING = 4
"""looks in a row that must give the same new latency before it is compensated"""


class LatencyFollow:
    """``state(estimate, compensated)`` once per state the safety stage trusted (fed to the estimate), with the
    latency compensated now; returns the `CommandLatency` to compensate from now on when a new measurement has
    stood, else None."""

    def __init__(self, look_every: int = LOOK_EVERY, standing: int = STANDING):
        self.look_every, self.standing = max(1, int(look_every)), max(1, int(standing))
        self.adopted = 0
        """how many times a measurement was taken"""
        self.states = self._count = 0
        """states seen"""
        self._candidate: int | None = None

    def state(self, estimate: Callable[[], LatencyEstimate], compensated: int) -> CommandLatency | None:
        self.states += 1
        if self.states % self.look_every:
            return None
        est = estimate()
        if est.periods is None or est.periods == compensated:
            self._candidate, self._count = None, 0
            return None
        if est.periods != self._candidate:
            self._candidate, self._count = est.periods, 0
        self._count += 1
        if self._count < self.standing:
            return None
        self._candidate, self._count = None, 0
        self.adopted += 1
        return CommandLatency(check_steps(est.periods, "command_latency"), est.fit, est.runner_up)
