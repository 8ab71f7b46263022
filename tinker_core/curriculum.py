"""Curriculum: change environment parameters as the success rate rises (or falls).

``Curriculum(CurriculumConfig(param="target_distance", levels=[0.1, 0.2, 0.4]))`` starts every env at
the first level; once the success rate over the last ``window`` episodes reaches ``promote_at`` it
moves to the next level (and back one level below ``demote_at``). Each change is logged and kept in
``history``. Pass it as ``callback`` to ``algo.learn`` (it reads the finished episodes' success
flags, ``info["is_success"]``), or call ``record(success)`` yourself.

How a level reaches the env: ``env.unwrapped.set_curriculum(param, value)`` when the env has it,
else ``setattr(env.unwrapped, param, value)``. An algorithm whose envs live elsewhere (IMPALA's
actors) takes it through its ``set_env_param(param, value)``, which the callback uses when present.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Sequence

from tinker_core.errors import ConfigError

log = logging.getLogger("tinker.curriculum")


@dataclass
class CurriculumConfig:
    param: str = "target_distance"
    """Name of the env parameter the curriculum sets."""
    levels: list[float] = field(default_factory=lambda: [0.1, 0.2, 0.3, 0.4])
    """Values of the parameter, easiest first."""
    promote_at: float = 0.8
    """Success rate over the window that moves to the next level."""
    demote_at: float | None = None
    """Success rate under which it moves back one level (None: never)."""
    window: int = 20
    """Episodes in the success-rate window (cleared on every level change)."""

    def __post_init__(self) -> None:
        if not self.levels:
            raise ConfigError("curriculum.levels: expected at least one level, got []")
        if not 0.0 < self.promote_at <= 1.0:
            raise ConfigError(f"curriculum.promote_at: expected 0 < x <= 1, got {self.promote_at}")
        if self.demote_at is not None and not 0.0 <= self.demote_at < self.promote_at:
            raise ConfigError(f"curriculum.demote_at: expected 0 <= x < promote_at={self.promote_at}, got {self.demote_at}")
        if self.window < 1:
            raise ConfigError(f"curriculum.window: expected >= 1, got {self.window}")


class Curriculum:
    """Success-rate-driven level scheduler for one env parameter."""

    def __init__(self, config: CurriculumConfig | None = None, envs: Sequence[Any] = ()):
        self.config = config or CurriculumConfig()
        self.level = 0
        self.envs = list(envs)
        self.recent: deque[bool] = deque(maxlen=self.config.window)
        self.history: list[dict] = []
        self.episodes = 0
        self.sink: Any = None
        self._apply()

    @property
    def value(self) -> float:
        return self.config.levels[self.level]

    def attach(self, envs: Sequence[Any]) -> None:
        self.envs = list(envs)
        self._apply()

    def success_rate(self) -> float | None:
        return sum(self.recent) / len(self.recent) if self.recent else None

    def record(self, success: bool) -> bool:
        """Count one finished episode; returns True when the level changed."""
        self.episodes += 1
        self.recent.append(bool(success))
        c = self.config
        if len(self.recent) < c.window:
            return False
        rate = self.success_rate() or 0.0
        new = self.level
        if rate >= c.promote_at and self.level < len(c.levels) - 1:
            new = self.level + 1
        elif c.demote_at is not None and rate < c.demote_at and self.level > 0:
            new = self.level - 1
        if new == self.level:
            return False
        old_value = self.value
        self.level = new
        self.recent.clear()
        self.history.append({"episode": self.episodes, "level": new, "param": c.param, "from": old_value,
                             "to": self.value, "success_rate": rate})
        log.info("curriculum: %s %g -> %g (level %d/%d, success rate %.2f over %d episodes)", c.param, old_value,
                 self.value, new + 1, len(c.levels), rate, c.window)
        self._apply()
        return True

    def _apply(self) -> None:
        for env in self.envs:
            apply_env_param(env, self.config.param, self.value)
        if self.sink is not None:
            self.sink(self.config.param, self.value)

    def bind(self, algo: Any) -> None:
        """Send levels to ``algo``'s envs, starting with the current one: through
        ``algo.set_env_param`` when it has one (IMPALA's actors), else to ``algo.vec_env.envs``."""
        if hasattr(algo, "set_env_param"):
            self.sink = algo.set_env_param
            self._apply()
        elif getattr(algo, "vec_env", None) is not None:
            self.attach(algo.vec_env.envs)

    def __call__(self, algo: Any, info: dict) -> None:
        """``learn`` callback: binds to the algorithm on first call (if not bound), records each episode."""
        if self.sink is None and not self.envs:
            self.bind(algo)
        for ep in info.get("episodes", ()):
            if ep.success is not None and self.record(ep.success):
                logger = getattr(algo, "_logger", None)
                if logger is not None:
                    logger.scalars(algo.num_timesteps, {"curriculum/level": self.level, "curriculum/value": self.value})


def apply_env_param(env: Any, param: str, value: float) -> None:
    """``env.unwrapped.set_curriculum(param, value)`` when the env has it, else set the attribute."""
    u = getattr(env, "unwrapped", env)
    if hasattr(u, "set_curriculum"):
        u.set_curriculum(param, value)
    else:
        setattr(u, param, value)


def count_level(value: Any, high: int, where: str, low: int = 1) -> int:
    """``value`` as a whole count in ``low..high`` (a curriculum level arrives as a float, e.g. 3.0); anything else
    is a ConfigError naming ``where``. For envs whose curriculum sets how many objects or opponents an episode has."""
    try:
        ok = float(value) == int(float(value)) and low <= int(float(value)) <= high
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ConfigError(f"{where}: expected an integer {low}..{high}, got {value!r}")
    return int(float(value))
