"""How old each input of a node is, and whether that makes the node stale (ROS-free; the nodes' /diagnostics).

A node declares each input it subscribes (by topic name) once, where it makes the subscription, and
notes every message's arrival on its own monotonic clock (never the message's stamp: a publisher's clock
or a spoofed stamp must not make a dead input look alive). `InputAges.level` then says what the ages
mean, the message naming the topic, its age and the limit:

- an input never seen yet is WARN ``waiting for TOPIC`` for ``startup_grace_s`` after it was declared
  (a graph coming up), ERROR afterwards;
- an input whose newest message is older than ``timeout_s`` is its ``stale`` level (ERROR for what the
  node cannot work without, WARN for what it can, None for an input published only on change, e.g. a
  goal: its age is reported, never judged);
- the level clears back to OK as soon as a message arrives again.

`RecentFaults` is the same idea for refused inputs: WARN while the last refusal is recent, OK again once
refusals stop, the totals kept for the record.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass
from typing import Callable

from tinker_core.errors import ConfigError


class Level(enum.IntEnum):
    """A diagnostic level, ordered by severity (diagnostic_msgs/DiagnosticStatus's numbers)."""

    OK = 0
    WARN = 1
    ERROR = 2


@dataclass
class _Input:
    stale: Level | None
    declared_ns: int
    last_ns: int | None = None
    count: int = 0


class InputAges:
    """The newest arrival per input topic on an injected monotonic clock (ns), judged against a timeout.

    ``timeout_s``: an input silent for longer is stale. ``startup_grace_s``: how long an input may stay
    unseen after its declaration before that is an error. ``clock``: monotonic ns (a test injects its own).
    """

    def __init__(self, timeout_s: float = 0.5, startup_grace_s: float = 20.0,
                 clock: Callable[[], int] = time.monotonic_ns):
        self._clock = clock
        self._inputs: dict[str, _Input] = {}
        self.timeout_s = self.startup_grace_s = 0.0
        self.configure(timeout_s, startup_grace_s)

    def configure(self, timeout_s: float, startup_grace_s: float) -> None:
        """New limits; they apply from the next `level` call."""
        if not timeout_s > 0:
            raise ConfigError(f"input_timeout: expected > 0 s, got {timeout_s!r}")
        if not startup_grace_s >= 0:
            raise ConfigError(f"input_startup_grace: expected >= 0 s, got {startup_grace_s!r}")
        self.timeout_s, self.startup_grace_s = float(timeout_s), float(startup_grace_s)

    def declare(self, topic: str, stale: Level | None = Level.ERROR) -> None:
        """Watch ``topic`` from now on; ``stale``: the level when it goes quiet (None: age only, never judged).
        Declaring it again (a re-made subscription) starts its grace period again."""
        self._inputs[topic] = _Input(None if stale is None else Level(stale), self._clock())

    def set_stale_level(self, topic: str, stale: Level | None) -> None:
        """What a quiet ``topic`` means from now on (an input the running model needs, or no longer needs)."""
        self._inputs[topic].stale = None if stale is None else Level(stale)

    def expect(self, topic: str, flowing: bool, arrived: bool) -> None:
        """An input that must flow only at times (a policy's commands while it is active): ``flowing`` makes a
        quiet ``topic`` an ERROR, else its age is only reported; ``flowing`` without a message ``arrived``
        waits for it again (its grace starts now)."""
        if flowing and not arrived:
            self.declare(topic, Level.ERROR)
        else:
            self.set_stale_level(topic, Level.ERROR if flowing else None)

    def forget(self, topic: str) -> None:
        """Stop watching ``topic`` (its subscription is gone)."""
        self._inputs.pop(topic, None)

    def restart_grace(self) -> None:
        """Every input unseen since now waits its grace period again (e.g. a lifecycle node activated)."""
        now = self._clock()
        for inp in self._inputs.values():
            inp.declared_ns, inp.last_ns = now, None

    def seen(self, topic: str) -> None:
        """A message on ``topic`` arrived now."""
        inp = self._inputs.get(topic)
        if inp is not None:
            inp.last_ns = self._clock()
            inp.count += 1

    @property
    def topics(self) -> list[str]:
        return list(self._inputs)

    def age_s(self, topic: str) -> float | None:
        """Seconds since ``topic``'s newest message (None: never seen)."""
        inp = self._inputs[topic]
        return None if inp.last_ns is None else (self._clock() - inp.last_ns) / 1e9

    def level(self) -> tuple[Level, str]:
        """The worst input's level and a message naming each input at that level, its age and the limit."""
        now = self._clock()
        worst, notes = Level.OK, []
        for topic, inp in self._inputs.items():
            if inp.stale is None:
                continue
            if inp.last_ns is None:
                waited = (now - inp.declared_ns) / 1e9
                if waited <= self.startup_grace_s:
                    lvl, note = Level.WARN, f"waiting for {topic} ({waited:.1f} s)"
                else:
                    lvl, note = Level.ERROR, (f"{topic}: no message in {waited:.1f} s since subscribed "
                                              f"(grace {self.startup_grace_s:g} s)")
            else:
                age = (now - inp.last_ns) / 1e9
                if age <= self.timeout_s:
                    continue
                lvl, note = inp.stale, f"{topic}: last message {age:.2f} s ago (limit {self.timeout_s:g} s)"
            if lvl > worst:
                worst, notes = lvl, [note]
            elif lvl == worst:
                notes.append(note)
        return worst, "; ".join(notes) if worst > Level.OK else "inputs fresh"

    def values(self) -> dict[str, str]:
        """``input_age_s.TOPIC`` per input (seconds, or ``never``) and ``input_timeout_s``, for /diagnostics."""
        out = {}
        for topic, inp in self._inputs.items():
            age = self.age_s(topic)
            out[f"input_age_s.{topic}"] = "never" if age is None else f"{age:.3f}"
        out["input_timeout_s"] = f"{self.timeout_s:g}"
        return out


class RecentFaults:
    """Refused inputs: WARN while the last one is younger than ``memory_s``, OK again once they stop.

    The totals (``count``, ``last``) stay for the record; only the level forgets.
    """

    def __init__(self, memory_s: float = 5.0, clock: Callable[[], int] = time.monotonic_ns):
        if not memory_s > 0:
            raise ConfigError(f"RecentFaults.memory_s: expected > 0 s, got {memory_s!r}")
        self.memory_s, self._clock = float(memory_s), clock
        self.count, self.last, self._last_ns, self._window_start = 0, "", None, 0

    def note(self, why: str) -> None:
        """One refused input, ``why`` naming what was wrong and where."""
        now = self._clock()
        if self._last_ns is None or (now - self._last_ns) / 1e9 > self.memory_s:
            self._window_start = self.count  # a new run of refusals
        self.count, self.last, self._last_ns = self.count + 1, str(why), now

    def level(self, what: str = "refused", noun: str = "input") -> tuple[Level, str]:
        """WARN ``{what} N {noun}(s), last S s ago: LAST`` while the last refusal is recent, else OK (N: this run's)."""
        if self._last_ns is None:
            return Level.OK, ""
        ago = (self._clock() - self._last_ns) / 1e9
        if ago > self.memory_s:
            return Level.OK, ""
        return Level.WARN, f"{what} {self.count - self._window_start} {noun}(s), last {ago:.1f} s ago: {self.last}"
