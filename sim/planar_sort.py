"""`PlanarSortEnv` (``tinker/PlanarSort-v0``): a kinematic, planar stand-in for ArmSort over a long horizon.

What it is, plainly: no physics and no arm. A suction gripper is a point in the plane ``[-1, 1]^2``; up to
``MAX_OBJECTS`` objects of ``NUM_KINDS`` kinds lie on the table; each kind has a bin along the top edge.
An episode is solved when every object is in the bin of its kind. With 6 objects that is about a dozen
sub-tasks in a row (reach object i, carry it to bin k), which is where a hierarchy earns its keep; the
PyBullet ArmSort (``tinker/ArmSort-v0``) is the same task with an arm, too slow to learn on 2 cores in
minutes. Numpy only, microseconds a step.

- Action ``Box(-1, 1, (3,))``: gripper velocity (x, y) in units of ``speed`` per step, and suction (> 0 on).
  Suction turned on within ``grip_radius`` of a free object picks the nearest; turned off, it drops the held
  object: inside the bin of its kind the object is sorted (and leaves the table); anywhere else it lies
  where it was dropped (a wrong bin costs ``wrong_bin_penalty``).
- Observation (``obs_dim`` floats): gripper x, y, holding; then per object slot: x, y, one-hot kind
  (``NUM_KINDS``), active (present and not sorted), held. Slots beyond ``num_objects`` are zeros.
- Reward: +1 per sorted object, +1 at success, ``-wrong_bin_penalty`` per drop into a wrong bin, and a
  potential-based shaping term ``shaping * (phi(s) - phi(s'))`` with ``phi`` the distance from the gripper
  to the nearest free object (not holding) or from the held object to its bin (potential-based, so it
  leaves the optimal policy unchanged; every learner here gets the same reward).
- Episodes end in success, or are truncated after ``steps_per_object * num_objects`` steps.
- Curriculum: ``set_curriculum("num_objects", n)`` (applies from the next reset). Domain randomization
  per episode: speed gain, action noise and grip radius drawn from the ranges below; positions and kinds.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tinker_core.curriculum import count_level
from tinker_core.errors import ConfigError

MAX_OBJECTS = 6
"""object slots in the observation (the curriculum moves num_objects from 1 up to this)"""
NUM_KINDS = 3
BIN_CENTERS = np.array([[-0.6, 0.8], [0.0, 0.8], [0.6, 0.8]], dtype=np.float32)
"""xy of the bin of each kind"""
BIN_RADIUS = 0.15
SPAWN_LOW = np.array([-0.8, -0.8], dtype=np.float32)
SPAWN_HIGH = np.array([0.8, 0.3], dtype=np.float32)
MIN_SEPARATION = 0.15
GRIPPER_FIELDS = 3
"""gripper x, y, holding"""
SLOT_FIELDS = 2 + NUM_KINDS + 2
"""per object: x, y, one-hot kind, active, held"""


def obs_dim() -> int:
    return GRIPPER_FIELDS + MAX_OBJECTS * SLOT_FIELDS


def slot_offset(i: int) -> int:
    """Index of object slot ``i``'s first field (x) in the observation."""
    return GRIPPER_FIELDS + i * SLOT_FIELDS


class PlanarSortEnv(gym.Env):
    """Point gripper sorting ``num_objects`` objects of ``NUM_KINDS`` kinds into their bins (see the module doc)."""

    metadata = {"render_modes": []}

    def __init__(self, num_objects: int = 1, speed: float = 0.2, steps_per_object: int = 40,
                 speed_gain_range: tuple[float, float] = (0.8, 1.2), action_noise_range: tuple[float, float] = (0.0, 0.05),
                 grip_radius_range: tuple[float, float] = (0.08, 0.12), shaping: float = 0.5,
                 wrong_bin_penalty: float = 0.5):
        count_level(num_objects, MAX_OBJECTS, "PlanarSortEnv.num_objects")
        if speed <= 0:
            raise ConfigError(f"PlanarSortEnv.speed: expected > 0, got {speed}")
        if steps_per_object < 1:
            raise ConfigError(f"PlanarSortEnv.steps_per_object: expected >= 1, got {steps_per_object}")
        for name, (lo, hi) in (("speed_gain_range", speed_gain_range), ("action_noise_range", action_noise_range),
                               ("grip_radius_range", grip_radius_range)):
            if not 0 <= lo <= hi:
                raise ConfigError(f"PlanarSortEnv.{name}: expected 0 <= low <= high, got {(lo, hi)}")
        self.num_objects = int(num_objects)
        self._next_num_objects = self.num_objects
        self.speed, self.steps_per_object = float(speed), int(steps_per_object)
        self.speed_gain_range, self.action_noise_range = tuple(speed_gain_range), tuple(action_noise_range)
        self.grip_radius_range = tuple(grip_radius_range)
        self.shaping, self.wrong_bin_penalty = float(shaping), float(wrong_bin_penalty)
        self.observation_space = spaces.Box(-1.5, 1.5, (obs_dim(),), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self._grip = np.zeros(2, np.float32)
        self._pos = np.zeros((MAX_OBJECTS, 2), np.float32)
        self._kind = np.zeros(MAX_OBJECTS, np.int64)
        self._active = np.zeros(MAX_OBJECTS, bool)
        self._held = -1
        self._t = 0
        self._gain, self._noise, self._radius = 1.0, 0.0, 0.1

    # -- curriculum ---------------------------------------------------------------------------------
    def set_curriculum(self, param: str, value: float) -> None:
        """``num_objects`` (from the next reset); any other name is an error naming the ones there are."""
        if param != "num_objects":
            raise ConfigError(f"PlanarSortEnv.set_curriculum: unknown parameter {param!r}; expected 'num_objects'")
        self._next_num_objects = count_level(value, MAX_OBJECTS, "PlanarSortEnv.set_curriculum('num_objects')")

    @property
    def max_steps(self) -> int:
        return self.steps_per_object * self.num_objects

    # -- gymnasium ----------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        rng = self.np_random
        self.num_objects = self._next_num_objects
        n = self.num_objects
        self._gain = float(rng.uniform(*self.speed_gain_range))
        self._noise = float(rng.uniform(*self.action_noise_range))
        self._radius = float(rng.uniform(*self.grip_radius_range))
        pts: list[np.ndarray] = []
        while len(pts) < n + 1:  # the objects, then the gripper's start
            xy = rng.uniform(SPAWN_LOW, SPAWN_HIGH).astype(np.float32)
            if all(np.linalg.norm(xy - q) >= MIN_SEPARATION for q in pts):
                pts.append(xy)
        self._pos[:] = 0.0
        self._pos[:n] = np.stack(pts[:n])
        self._grip = pts[n].copy()
        self._kind[:] = 0
        self._kind[:n] = rng.integers(0, NUM_KINDS, n)
        self._active[:] = False
        self._active[:n] = True
        self._held, self._t = -1, 0
        return self._obs(), {"num_objects": n}

    def _potential(self) -> float:
        if self._held >= 0:
            return float(np.linalg.norm(self._pos[self._held] - BIN_CENTERS[self._kind[self._held]]))
        free = np.flatnonzero(self._active)
        if free.size == 0:
            return 0.0
        return float(np.min(np.linalg.norm(self._pos[free] - self._grip, axis=1)))

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = np.asarray(action, dtype=np.float32).reshape(3)
        if not np.all(np.isfinite(a)):
            raise ConfigError(f"PlanarSortEnv.step: action must be finite, got {a.tolist()}")
        a = np.clip(a, -1.0, 1.0)
        phi0 = self._potential()
        move = a[:2] * self.speed * self._gain + self.np_random.normal(0.0, self._noise, 2) * self.speed
        self._grip = np.clip(self._grip + move, -1.0, 1.0).astype(np.float32)
        reward = 0.0
        suction = a[2] > 0.0
        if self._held >= 0:
            self._pos[self._held] = self._grip
            if not suction:
                reward += self._drop()
        elif suction:
            free = np.flatnonzero(self._active)
            if free.size:
                d = np.linalg.norm(self._pos[free] - self._grip, axis=1)
                if d.min() <= self._radius:
                    self._held = int(free[int(np.argmin(d))])
                    self._pos[self._held] = self._grip
        self._t += 1
        reward += self.shaping * (phi0 - self._potential())
        success = not self._active.any()
        if success:
            reward += 1.0
        truncated = not success and self._t >= self.max_steps
        sorted_n = int(self.num_objects - self._active[:self.num_objects].sum())
        return self._obs(), float(reward), bool(success), bool(truncated), {
            "is_success": bool(success), "sorted": sorted_n, "num_objects": self.num_objects}

    def _drop(self) -> float:
        i, self._held = self._held, -1
        d = np.linalg.norm(BIN_CENTERS - self._pos[i], axis=1)
        if d[self._kind[i]] <= BIN_RADIUS:
            self._active[i] = False
            self._pos[i] = 0.0
            return 1.0
        if d.min() <= BIN_RADIUS:
            return -self.wrong_bin_penalty
        return 0.0

    def _obs(self) -> np.ndarray:
        o = np.zeros(obs_dim(), np.float32)
        o[0:2] = self._grip
        o[2] = float(self._held >= 0)
        for i in range(self.num_objects):
            k = slot_offset(i)
            if self._active[i]:
                o[k:k + 2] = self._pos[i]
                o[k + 2 + self._kind[i]] = 1.0
                o[k + 2 + NUM_KINDS] = 1.0
                o[k + 3 + NUM_KINDS] = float(self._held == i)
        return o

    # -- checkpoints --------------------------------------------------------------------------------
    def get_state(self) -> dict:
        """The episode's state, for checkpoints that resume mid-episode."""
        return {"grip": self._grip.tolist(), "pos": self._pos.tolist(), "kind": self._kind.tolist(),
                "active": self._active.tolist(), "held": self._held, "t": self._t, "num_objects": self.num_objects,
                "next_num_objects": self._next_num_objects, "dr": [self._gain, self._noise, self._radius]}

    def set_state(self, state: dict) -> None:
        self._grip = np.asarray(state["grip"], np.float32)
        self._pos = np.asarray(state["pos"], np.float32)
        self._kind = np.asarray(state["kind"], np.int64)
        self._active = np.asarray(state["active"], bool)
        self._held, self._t = int(state["held"]), int(state["t"])
        self.num_objects, self._next_num_objects = int(state["num_objects"]), int(state["next_num_objects"])
        self._gain, self._noise, self._radius = (float(x) for x in state["dr"])
