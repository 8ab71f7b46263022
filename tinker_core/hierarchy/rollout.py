"""Bookkeeping of running options during collection: which option each env runs, since when, and the reward it
has gathered; a finished option becomes one high-level `Decision` (a semi-MDP transition)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Decision:
    """One high-level transition: option ``option`` chosen in ``obs``, run for ``duration`` steps."""

    obs: np.ndarray
    option: int
    logp: float
    reward: float
    """sum_k gamma^k r_k over the option's steps"""
    duration: int
    next_obs: np.ndarray
    terminal: bool
    """the episode terminated during the option (no bootstrap)"""
    end: bool
    """the episode ended there (terminated or truncated): the advantage chain stops"""


def option_ends(age: np.ndarray, max_duration: int, beta_draw: np.ndarray | None, episode_end: np.ndarray) -> np.ndarray:
    """Which options end after this step: the episode ended, the option ran ``max_duration`` steps, or (learned
    termination) the drawn ``beta_draw`` says so. ``age`` counts the steps the option has run, this one included."""
    ends = np.asarray(episode_end, bool) | (np.asarray(age) >= max_duration)
    if beta_draw is not None:
        ends = ends | np.asarray(beta_draw, bool)
    return ends


@dataclass
class OptionTracker:
    """The running option of each of ``n`` envs, and the decisions completed since the last ``take``."""

    n: int
    gamma: float
    option: np.ndarray = field(init=False)
    age: np.ndarray = field(init=False)
    needs_decision: np.ndarray = field(init=False)
    start_obs: list = field(init=False)
    logp: np.ndarray = field(init=False)
    reward: np.ndarray = field(init=False)
    done: list[list[Decision]] = field(init=False)

    def __post_init__(self) -> None:
        self.option = np.zeros(self.n, np.int64)
        self.age = np.zeros(self.n, np.int64)
        self.needs_decision = np.ones(self.n, bool)
        self.start_obs = [None] * self.n
        self.logp = np.zeros(self.n)
        self.reward = np.zeros(self.n)
        self.done = [[] for _ in range(self.n)]

    def start(self, i: int, obs: np.ndarray, option: int, logp: float) -> None:
        self.option[i], self.logp[i], self.start_obs[i] = option, logp, np.array(obs, copy=True)
        self.age[i], self.reward[i], self.needs_decision[i] = 0, 0.0, False

    def add_reward(self, rewards: np.ndarray) -> None:
        """Count one env step of every running option."""
        self.reward += (self.gamma ** self.age) * rewards
        self.age += 1

    def finish(self, i: int, next_obs: np.ndarray, terminal: bool, end: bool) -> None:
        self.done[i].append(Decision(self.start_obs[i], int(self.option[i]), float(self.logp[i]), float(self.reward[i]),
                                     int(self.age[i]), np.array(next_obs, copy=True), bool(terminal), bool(end)))
        self.needs_decision[i] = True

    def take(self) -> list[list[Decision]]:
        """The completed decisions per env, in time order (running options stay running)."""
        out, self.done = self.done, [[] for _ in range(self.n)]
        return out

    def reset(self) -> None:
        self.__post_init__()
