"""What the SafetyWrapper did to one command, and why (with values and units)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Outcome(enum.IntEnum):
    """What happened to the command; a larger value is a stronger intervention."""

    PASSED = 0
    """sent as requested"""
    CLIPPED = 1
    """moved inside the position limits (minus margin)"""
    RATE_LIMITED = 2
    """shortened to the velocity or acceleration limit"""
    WORKSPACE = 3
    """shortened so the end effector stays inside the workspace box"""
    COLLISION = 4
    """a collision was predicted: held and e-stop latched"""
    HELD = 5
    """replaced by the hold command (invalid input, stale action, start gap too large)"""
    ESTOPPED = 6
    """the e-stop is latched: hold command until a reset with a valid state"""


class EstopCause(str, enum.Enum):
    """Why the e-stop latched."""

    COLLISION = "collision"
    EXTERNAL = "external"
    INVALID_INPUT = "invalid_input"
    WATCHDOG = "watchdog"
    INTERNAL = "internal_error"
    """the wrapper itself failed unexpectedly; it holds rather than guess"""


@dataclass(slots=True)
class SafetyStatus:
    """The outcome of one call and a reason per intervention (value, unit, what was done instead)."""

    outcome: Outcome = Outcome.PASSED
    reasons: list[str] = field(default_factory=list)
    lead: int = 0
    """index in ``reasons`` of the reason that set ``outcome``: `summary` names it first (a collision's stop before
    the speed limits that had shortened the same command)"""

    @property
    def intervened(self) -> bool:
        return self.outcome is not Outcome.PASSED

    @property
    def summary(self) -> str:
        """The outcome and every reason, the one that decided the outcome first."""
        name = self.outcome.name.lower()
        if not self.reasons:
            return name
        lead = self.lead if 0 <= self.lead < len(self.reasons) else 0
        return f"{name}: " + "; ".join([self.reasons[lead], *self.reasons[:lead], *self.reasons[lead + 1:]])

    def add(self, outcome: Outcome, reason: str) -> None:
        """Record ``reason``; the outcome becomes the strongest seen."""
        if outcome > self.outcome:
            self.outcome, self.lead = outcome, len(self.reasons)
        self.reasons.append(reason)

    def to_dict(self) -> dict:
        return {"outcome": self.outcome.name, "reasons": list(self.reasons)}
