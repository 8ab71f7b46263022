"""`StartRamp`: the safe start after construction, `reset` or e-stop release.

The first target must lie within ``start_max_gap`` of the measured pose (otherwise: hold and say why); the
command then ramps toward it at ``start_velocity_scale`` of the URDF velocity limit until it is reached,
and from there on the normal speed limit applies. Phases: ``await_first_target`` → ``start_ramp`` → ``running``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["StartRamp", "AWAIT_FIRST", "RAMP", "RUN"]

AWAIT_FIRST, RAMP, RUN = "await_first_target", "start_ramp", "running"


class StartRamp:
    """The start phase and the first-target check."""

    def __init__(self, max_gap: float, names: list[str], units: list[str], command_lower: np.ndarray,
                 command_upper: np.ndarray):
        self.max_gap = max_gap
        self._names, self._units = names, units
        self._lower, self._upper = command_lower, command_upper
        self.phase = AWAIT_FIRST

    @property
    def ramping(self) -> bool:
        """Whether the slower start speed applies (awaiting the first target or ramping toward it)."""
        return self.phase != RUN

    def restart(self) -> None:
        self.phase = AWAIT_FIRST

    def refusal(self, a: np.ndarray, q: list[float]) -> str:
        """Why the first target ``a`` is refused (too far from the measured pose ``q``), or ''; only while awaiting."""
        if self.phase != AWAIT_FIRST or not np.isfinite(a).all():
            return ""  # invalid input: reported by the main path
        qa = np.array(q)
        target = np.minimum(np.maximum(a, np.minimum(self._lower, qa)), np.maximum(self._upper, qa))
        gap = np.abs(target - qa)
        j = int(gap.argmax())
        if gap[j] <= self.max_gap:
            return ""
        u = self._units[j]
        return (f"start: first target is {gap[j]:.3f} {u} from the measured pose on joint {self._names[j]}, "
                f"above start_max_gap {self.max_gap:.3f} {u}; refusing to move, holding")

    def begin(self) -> None:
        """A first command left the safe-start check: the ramp runs."""
        if self.phase == AWAIT_FIRST:
            self.phase = RAMP

    def reached(self) -> None:
        """A command equal to its (clipped) target was sent: the ramp is over."""
        if self.phase == RAMP:
            self.phase = RUN
