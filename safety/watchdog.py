"""`Watchdog`: is there a fresh action for this control cycle? ROS-free, on an injected monotonic clock.

The one watchdog of the control loop: the SafetyWrapper uses it (`feed` / `tick`), and a ROS node or the
simulated robot can use the same class::

    wd = Watchdog(timeout=0.05, misses_to_latch=3, clock=time.monotonic)
    wd.feed()                       # an action arrived (or wd.executed() if it was executed at once)
    verdict = wd.tick()             # every control cycle
    if not verdict.fresh: hold(verdict.reason)
    if verdict.latch: estop()

Rules, all on the injected clock (never on a message stamp or a time the caller hands to `tick`):

- an action is fresh for at most ``timeout`` seconds after it arrived and for at most ``ticks_per_action``
  ticks (a direct execution counts as one), so a clock that stalls cannot keep a dead policy's last action
  alive and no action is executed again as if it were new;
- an action that arrived "later" than the clock now reads (fed with a future time, or the clock ran
  backwards) is never fresh;
- a tick without a fresh action is a miss; misses count only in a row: a fresh action restarts the count;
  ``misses_to_latch`` misses in a row latch (the caller's e-stop);
- before the first action no miss is counted (the policy may not be up yet).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from tinker_core.errors import ConfigError

__all__ = ["Watchdog", "WatchdogVerdict"]


@dataclass(frozen=True, slots=True)
class WatchdogVerdict:
    """What one tick found."""

    fresh: bool
    """execute the newest action this tick"""
    misses: int
    """stale ticks in a row, this one included (0 when fresh)"""
    latch: bool
    """the misses in a row reached ``misses_to_latch`` (true on every miss from then on until a fresh action)"""
    reason: str
    """why the tick is not fresh, with values and units ('' when fresh)"""


class Watchdog:
    """Counts control ticks without a fresh action; see the module docstring for the rules."""

    def __init__(self, timeout: float, misses_to_latch: int, clock: Callable[[], float] = time.monotonic,
                 ticks_per_action: int = 1):
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) \
                or timeout <= 0:
            raise ConfigError(f"Watchdog.timeout: expected a finite number > 0 s, got {timeout!r}")
        for name, v in (("misses_to_latch", misses_to_latch), ("ticks_per_action", ticks_per_action)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"Watchdog.{name}: expected an integer >= 1, got {v!r}")
        self.timeout = float(timeout)
        self.misses_to_latch = misses_to_latch
        self.ticks_per_action = ticks_per_action
        self.clock = clock
        self._fed_at: float | None = None
        self._uses = 0
        self._misses = 0

    @property
    def misses(self) -> int:
        """Stale ticks in a row so far."""
        return self._misses

    @property
    def has_action(self) -> bool:
        """Whether an action arrived since construction or the last `reset`."""
        return self._fed_at is not None

    def feed(self, now: float | None = None) -> None:
        """A new action arrived at ``now`` (a reading of this watchdog's clock; default: read it now).

        A ``now`` later than the clock reads at the next tick makes the action one from the future: never fresh.
        """
        self._fed_at = self.clock() if now is None else float(now)
        self._uses = 0

    def executed(self, now: float | None = None) -> None:
        """A new action arrived and was executed at once: it counts as one tick's use, and the misses restart."""
        self.feed(now)
        self._uses = 1
        self._misses = 0

    def tick(self) -> WatchdogVerdict:
        """One control cycle: is the newest action fresh (then it is used once), or is this a miss?"""
        if self._fed_at is None:
            return WatchdogVerdict(False, self._misses, False, "no action received yet")
        age = self.clock() - self._fed_at
        if not age >= 0.0:  # also NaN
            reason = f"newest action is stamped {-age * 1000:.1f} ms in the future"
        elif age > self.timeout:
            reason = f"newest action is {age * 1000:.1f} ms old (timeout {self.timeout * 1000:.1f} ms)"
        elif self._uses >= self.ticks_per_action:
            reason = (f"no new action since the last one was executed (newest is {age * 1000:.1f} ms old, "
                      f"used {self._uses} of {self.ticks_per_action} tick(s))")
        else:
            self._uses += 1
            self._misses = 0
            return WatchdogVerdict(True, 0, False, "")
        self._misses += 1
        return WatchdogVerdict(False, self._misses, self._misses >= self.misses_to_latch, reason)

    def reset(self) -> None:
        """Forget the newest action and the misses (a new start)."""
        self._fed_at = None
        self._uses = self._misses = 0
