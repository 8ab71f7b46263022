"""Hyperparameters that change over a run: RL Zoo's ``lin_<start>`` (linear from start to 0).

A config field may hold ``"lin_7.3e-4"`` instead of a number (``learning_rate``, ``clip_range``,
``clip_range_vf``); the config keeps the start value in the field and the schedule in
``config.schedules``, and the learn loop sets the current value before each iteration from the
fraction of the run that remains, as SB3's ``progress_remaining`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tinker_core.errors import ConfigError

SCHEDULABLE = ("learning_rate", "clip_range", "clip_range_vf")
"""config fields that may be given as a schedule (the ones RL Zoo and SB3 schedule)"""


@dataclass(frozen=True)
class LinearSchedule:
    """``start`` at the beginning of the run, ``end`` at its end, linear in between."""

    start: float
    end: float = 0.0

    def __call__(self, progress_remaining: float) -> float:
        return self.end + progress_remaining * (self.start - self.end)


def parse_schedule(value: Any, key: str) -> LinearSchedule:
    """``"lin_7.3e-4"`` -> LinearSchedule(7.3e-4, 0)."""
    if isinstance(value, str) and value.startswith("lin_"):
        try:
            start = float(value[len("lin_"):])
        except ValueError:
            start = None
        if start is not None and start > 0:
            return LinearSchedule(start)
    raise ConfigError(f"{key}: expected a number or 'lin_<start>' (linear from start to 0 over the run, as in "
                      f"RL Zoo), got {value!r}")


def split_schedules(config: Any) -> None:
    """Move schedule strings out of ``config``'s number fields into ``config.schedules`` (the field keeps
    the start value), and check ``config.schedules`` itself."""
    names = {n for n in SCHEDULABLE if hasattr(config, n)}
    for name in names:
        value = getattr(config, name)
        if isinstance(value, str):
            try:
                setattr(config, name, float(value))  # YAML reads 1e-3 without a dot as a string
                continue
            except ValueError:
                pass
            config.schedules[name] = value
    if not isinstance(config.schedules, dict):
        raise ConfigError(f"schedules: expected a mapping of field -> 'lin_<start>', got {config.schedules!r}")
    for name, spec in config.schedules.items():
        if name not in names:
            raise ConfigError(f"schedules: {name!r} cannot follow a schedule; schedulable fields: {sorted(names)}")
        setattr(config, name, parse_schedule(spec, name).start)


def apply_schedules(algo: Any) -> None:
    """Set each scheduled value of ``algo.config`` for the fraction of the current run that remains."""
    schedules = algo.config.schedules
    if not schedules:
        return
    span = max(1, algo._learn_target - algo._learn_start)
    remaining = min(1.0, max(0.0, 1.0 - (algo.num_timesteps - algo._learn_start) / span))
    for name, spec in schedules.items():
        value = parse_schedule(spec, name)(remaining)
        if name == "learning_rate":
            algo.set_learning_rate(value)
        else:
            setattr(algo.config, name, value)


__all__ = ["SCHEDULABLE", "LinearSchedule", "parse_schedule", "split_schedules", "apply_schedules"]
