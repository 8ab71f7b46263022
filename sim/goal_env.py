"""`PointGoalEnv`: a point in the plane that must reach a goal, with a sparse reward, in the
goal-conditioned form gymnasium-robotics defines (``tinker/PointGoal-v0``).

The observation is a Dict ``{"observation", "achieved_goal", "desired_goal"}`` and the env has a
vectorized ``compute_reward(achieved_goal, desired_goal, info)``, so hindsight relabelling (HER) can
recompute the reward of any stored transition for another goal. It is tiny on purpose (numpy only,
microseconds a step): a sparse task where random exploration almost never reaches the goal, for
testing and measuring goal relabelling without a physics engine.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tinker_core.errors import ConfigError


class PointGoalEnv(gym.Env):
    """Point mass in ``[-1, 1]^2``; each step moves it by ``action * step_size`` (clipped to the box).

    Reward: ``-1`` while the point is farther than ``distance_threshold`` from the goal, else ``0``
    (gymnasium-robotics' sparse convention). Episodes never terminate; the registered id truncates
    them after 20 steps. ``discrete=True`` gives 4 actions (+x, -x, +y, -y) for DQN.
    """

    metadata = {"render_modes": []}

    def __init__(self, step_size: float = 0.15, distance_threshold: float = 0.1, discrete: bool = False):
        if step_size <= 0:
            raise ConfigError(f"PointGoalEnv.step_size: expected > 0, got {step_size}")
        if distance_threshold <= 0:
            raise ConfigError(f"PointGoalEnv.distance_threshold: expected > 0, got {distance_threshold}")
        self.step_size, self.distance_threshold, self.discrete = float(step_size), float(distance_threshold), discrete
        box = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_space = spaces.Dict({"observation": box, "achieved_goal": box, "desired_goal": box})
        self.action_space = spaces.Discrete(4) if discrete else spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._pos = np.zeros(2, dtype=np.float32)
        self._goal = np.zeros(2, dtype=np.float32)

    _MOVES = np.array([[1, 0], [-1, 0], [0, 1], [0, -1]], dtype=np.float32)

    def _obs(self) -> dict[str, np.ndarray]:
        return {"observation": self._pos.copy(), "achieved_goal": self._pos.copy(), "desired_goal": self._goal.copy()}

    def compute_reward(self, achieved_goal: Any, desired_goal: Any, info: Any) -> np.ndarray:
        """``-(distance > threshold)`` for one goal pair or a batch (last axis: x, y)."""
        d = np.linalg.norm(np.asarray(achieved_goal) - np.asarray(desired_goal), axis=-1)
        return -(d > self.distance_threshold).astype(np.float32)

    def get_state(self) -> dict:
        """The episode's state (point and goal), for checkpoints that resume mid-episode."""
        return {"pos": self._pos.tolist(), "goal": self._goal.tolist()}

    def set_state(self, state: dict) -> None:
        self._pos = np.asarray(state["pos"], dtype=np.float32)
        self._goal = np.asarray(state["goal"], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        self._goal = self.np_random.uniform(-1.0, 1.0, 2).astype(np.float32)
        return self._obs(), {"is_success": False}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        move = self._MOVES[int(action)] if self.discrete else np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)
        self._pos = np.clip(self._pos + self.step_size * move, -1.0, 1.0).astype(np.float32)
        obs = self._obs()
        reward = float(self.compute_reward(obs["achieved_goal"], obs["desired_goal"], {}))
        return obs, reward, False, False, {"is_success": reward == 0.0}
