"""When an off-policy algorithm trains: every N env steps (per env) or every N finished episodes,
with a fixed number of gradient steps or, as SB3's ``gradient_steps=-1``, as many as env steps
were collected since the last training."""

from __future__ import annotations

from typing import Any

import numpy as np

from tinker_core.errors import ConfigError

UNITS = ("step", "episode")


def parse_train_freq(value: Any, unit: str, key: str = "train_freq") -> tuple[int, str]:
    """``4``, ``[4, step]`` or ``[1, episode]`` -> (N, unit)."""
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or value[1] not in UNITS:
            raise ConfigError(f"{key}: expected N, [N, step] or [N, episode], got {list(value)!r}")
        value, unit = value
    if unit not in UNITS:
        raise ConfigError(f"train_freq_unit: expected one of {list(UNITS)}, got {unit!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value) or value < 1:
        raise ConfigError(f"{key}: expected a whole number >= 1, got {value!r}")
    return int(value), unit


class TrainTrigger:
    """Counts collected steps and finished episodes; ``due`` says how many gradient steps to take now."""

    def __init__(self, every: int, unit: str, gradient_steps: int, n_envs: int, learning_starts: int):
        self.every, self.unit, self.gradient_steps = every, unit, gradient_steps
        self.n_envs, self.learning_starts = n_envs, learning_starts
        self.steps_since = 0
        self.episodes_since = 0

    def due(self, num_timesteps: int, new_steps: int, dones: Any) -> int:
        """Gradient steps to take after ``new_steps`` more env steps (``dones``: which envs ended an episode)."""
        self.steps_since += new_steps
        if self.unit == "episode":
            self.episodes_since += int(np.count_nonzero(dones))
            if self.episodes_since < self.every:
                return 0
        elif (num_timesteps // self.n_envs) % self.every != 0:
            return 0
        collected, self.steps_since, self.episodes_since = self.steps_since, 0, 0
        if num_timesteps <= self.learning_starts:
            return 0
        return collected if self.gradient_steps == -1 else self.gradient_steps


__all__ = ["parse_train_freq", "TrainTrigger", "UNITS"]
