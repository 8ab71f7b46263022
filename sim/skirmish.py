"""`SkirmishEnv` (``tinker/Skirmish-v0``): a small micro-combat game, tinker's own stand-in for a StarCraft II
micro scenario. It is **not StarCraft II** and shares no code or data with it: a numpy toy written here, with
the scenario's ideas (a squad of ranged units against a growing number of melee opponents, kills, survival,
cost) and none of its content. Numpy only: about 4,700 steps/s with 20 opponents and random actions, measured
on the busy 2-core machine here.

- Arena ``[-1, 1]^2``. The agent controls a squad of ``SQUAD_SIZE`` ranged units (hit points 1, speed
  ``unit_speed``, range ``unit_range``, ``unit_damage`` per shot). A unit fires only while standing (its
  velocity command at most ``FIRE_MAX_SPEED`` of full speed): moving and shooting exclude each other, so
  kiting is a trade-off.
- ``num_opponents`` (1..``MAX_OPPONENTS``) scripted opponents: melee units (hit points ``opponent_hp``, slower
  than the squad) that each walk to the nearest living squad unit and hit it within ``opponent_range``.
- Action ``Box(-1, 1, (5 * SQUAD_SIZE,))``, per unit: velocity x, y (units of ``unit_speed``), aim point x, y
  (arena coordinates), fire (> 0). A firing unit shoots the living opponent within its range nearest to its
  aim point (nothing in range: no shot, no cost).
- Observation (``obs_dim()`` floats): 8 global features (squad centroid, opponents' centroid, fraction of the
  squad alive, fraction of opponents alive, time left, distance of the closest opponent to the squad); per
  squad unit x, y, hp, alive; per opponent slot x, y, hp, alive, living opponents first, nearest to the squad's
  centroid first (slots beyond ``num_opponents`` and dead opponents are zeros).
- Reward: ``kill_reward`` per kill, ``win_reward`` at a win, ``-damage_weight`` per hit point the squad loses
  (survival), ``-shot_cost`` per shot and ``-step_cost`` per step (cost).
- Episodes end in a win (every opponent dead: ``is_success``) or a loss (the squad dead), or are truncated
  after ``max_steps``.
- Curriculum: ``set_curriculum("num_opponents", n)`` applies from the next reset. Domain randomization per
  episode: spawn positions, the opponents' speed gain and the squad's damage gain.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tinker_core.curriculum import count_level
from tinker_core.errors import ConfigError

SQUAD_SIZE = 5
"""units the agent controls"""
MAX_OPPONENTS = 20
"""opponent slots in the observation (the curriculum moves num_opponents up to this)"""
UNIT_FIELDS = 4
"""per squad unit and per opponent: x, y, hp, alive"""
GLOBAL_FIELDS = 8
ACTION_FIELDS = 5
"""per squad unit: vx, vy, aim x, aim y, fire"""
FIRE_MAX_SPEED = 0.25
"""a unit fires only when its velocity command's norm is at most this (stand to shoot)"""
OUT_OF_RANGE = 10.0
"""distance used for dead opponents in the skills' distance matrices"""


def obs_dim() -> int:
    return GLOBAL_FIELDS + UNIT_FIELDS * (SQUAD_SIZE + MAX_OPPONENTS)


def unit_offset(i: int) -> int:
    """Index of squad unit ``i``'s first field (x) in the observation."""
    return GLOBAL_FIELDS + UNIT_FIELDS * i


def opponent_offset(j: int) -> int:
    """Index of opponent slot ``j``'s first field (x) in the observation."""
    return GLOBAL_FIELDS + UNIT_FIELDS * (SQUAD_SIZE + j)


class SkirmishEnv(gym.Env):
    """A squad of ranged units against ``num_opponents`` scripted melee opponents (see the module doc)."""

    metadata = {"render_modes": []}

    def __init__(self, num_opponents: int = 5, max_steps: int = 200, unit_speed: float = 0.04,
                 unit_range: float = 0.35, unit_damage: float = 0.1, opponent_hp: float = 0.8,
                 opponent_speed: float = 0.03, opponent_range: float = 0.07, opponent_damage: float = 0.05,
                 kill_reward: float = 1.0, win_reward: float = 5.0, damage_weight: float = 1.0,
                 shot_cost: float = 0.01, step_cost: float = 0.01,
                 opponent_speed_gain_range: tuple[float, float] = (0.9, 1.1),
                 damage_gain_range: tuple[float, float] = (0.9, 1.1)):
        count_level(num_opponents, MAX_OPPONENTS, "SkirmishEnv.num_opponents")
        if int(max_steps) < 1:
            raise ConfigError(f"SkirmishEnv.max_steps: expected >= 1, got {max_steps}")
        for name, v in (("unit_speed", unit_speed), ("unit_range", unit_range), ("unit_damage", unit_damage),
                        ("opponent_hp", opponent_hp), ("opponent_speed", opponent_speed),
                        ("opponent_range", opponent_range)):
            if not v > 0:
                raise ConfigError(f"SkirmishEnv.{name}: expected > 0, got {v}")
        for name, (lo, hi) in (("opponent_speed_gain_range", opponent_speed_gain_range),
                               ("damage_gain_range", damage_gain_range)):
            if not 0 < lo <= hi:
                raise ConfigError(f"SkirmishEnv.{name}: expected 0 < low <= high, got {(lo, hi)}")
        self.num_opponents = int(num_opponents)
        self._next_n = self.num_opponents
        self.max_steps = int(max_steps)
        self.unit_speed, self.unit_range, self.unit_damage = float(unit_speed), float(unit_range), float(unit_damage)
        self.opponent_hp, self.opponent_speed = float(opponent_hp), float(opponent_speed)
        self.opponent_range, self.opponent_damage = float(opponent_range), float(opponent_damage)
        self.kill_reward, self.win_reward, self.damage_weight = float(kill_reward), float(win_reward), float(damage_weight)
        self.shot_cost, self.step_cost = float(shot_cost), float(step_cost)
        self.opponent_speed_gain_range, self.damage_gain_range = tuple(opponent_speed_gain_range), tuple(damage_gain_range)
        self.observation_space = spaces.Box(-2.0, 2.0, (obs_dim(),), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (ACTION_FIELDS * SQUAD_SIZE,), np.float32)
        self.unit_pos = np.zeros((SQUAD_SIZE, 2))
        self.unit_hp = np.ones(SQUAD_SIZE)
        self.opp_pos = np.zeros((MAX_OPPONENTS, 2))
        self.opp_hp = np.zeros(MAX_OPPONENTS)
        self.t = 0
        self.kills = self.shots = 0
        self.damage_taken = 0.0
        self._opp_gain, self._dmg_gain = 1.0, 1.0

    # -- curriculum ---------------------------------------------------------------------------------
    def set_curriculum(self, param: str, value: float) -> None:
        """``num_opponents`` (from the next reset); any other name is an error naming the one there is."""
        if param != "num_opponents":
            raise ConfigError(f"SkirmishEnv.set_curriculum: unknown parameter {param!r}; expected 'num_opponents'")
        self._next_n = count_level(value, MAX_OPPONENTS, "SkirmishEnv.set_curriculum('num_opponents')")

    # -- gymnasium ----------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        rng = self.np_random
        self.num_opponents = n = self._next_n
        self._opp_gain = float(rng.uniform(*self.opponent_speed_gain_range))
        self._dmg_gain = float(rng.uniform(*self.damage_gain_range))
        center = np.array([rng.uniform(-0.6, -0.4), rng.uniform(-0.3, 0.3)])
        self.unit_pos = center + rng.uniform(-0.12, 0.12, (SQUAD_SIZE, 2))
        self.unit_hp = np.ones(SQUAD_SIZE)
        self.opp_pos = np.zeros((MAX_OPPONENTS, 2))
        self.opp_pos[:n] = np.stack([rng.uniform(0.45, 0.95, n), rng.uniform(-0.9, 0.9, n)], axis=1)
        self.opp_hp = np.zeros(MAX_OPPONENTS)
        self.opp_hp[:n] = self.opponent_hp
        self.t = self.kills = self.shots = 0
        self.damage_taken = 0.0
        return self._obs(), {"num_opponents": n}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = np.asarray(action, dtype=np.float64)
        if a.size != SQUAD_SIZE * ACTION_FIELDS:
            raise ConfigError(f"SkirmishEnv.step: expected {SQUAD_SIZE * ACTION_FIELDS} action values ({ACTION_FIELDS} per "
                              f"unit: vx, vy, aim x, aim y, fire), got shape {a.shape}")
        a = a.reshape(SQUAD_SIZE, ACTION_FIELDS)
        if not np.all(np.isfinite(a)):
            raise ConfigError(f"SkirmishEnv.step: action must be finite, got {np.asarray(action).tolist()}")
        a = np.clip(a, -1.0, 1.0)
        alive = self.unit_hp > 0
        # 1. the squad moves (velocity commands above norm 1 are scaled down to it)
        v = a[:, 0:2]
        speed = np.linalg.norm(v, axis=1)
        v = v / np.maximum(speed, 1.0)[:, None]
        self.unit_pos = np.where(alive[:, None], np.clip(self.unit_pos + v * self.unit_speed, -1.0, 1.0), self.unit_pos)
        # 2. standing units fire at the opponent in range nearest to their aim point; damage lands together
        kills, shots = self._fire(alive & (a[:, 4] > 0) & (speed <= FIRE_MAX_SPEED), a[:, 2:4])
        # 3. the opponents walk to their nearest living unit and hit it when in range
        damage = self._opponents_act()
        self.t += 1
        won = not (self.opp_hp > 0).any()
        lost = not (self.unit_hp > 0).any()
        reward = (self.kill_reward * kills + (self.win_reward if won else 0.0) - self.damage_weight * damage
                  - self.shot_cost * shots - self.step_cost)
        truncated = not (won or lost) and self.t >= self.max_steps
        return self._obs(), float(reward), bool(won or lost), bool(truncated), {
            "is_success": bool(won), "kills": self.kills, "num_opponents": self.num_opponents,
            "squad_alive": int((self.unit_hp > 0).sum()), "damage_taken": float(self.damage_taken),
            "shots": self.shots}

    def _fire(self, firing: np.ndarray, aim: np.ndarray) -> tuple[int, int]:
        live = self.opp_hp > 0
        if not firing.any() or not live.any():
            return 0, 0
        d_unit = np.linalg.norm(self.unit_pos[:, None, :] - self.opp_pos[None, :, :], axis=2)  # [S, M]
        d_aim = np.linalg.norm(aim[:, None, :] - self.opp_pos[None, :, :], axis=2)
        eligible = live[None, :] & (d_unit <= self.unit_range) & firing[:, None]
        shooters = np.flatnonzero(eligible.any(axis=1))
        if shooters.size == 0:
            return 0, 0
        targets = np.argmin(np.where(eligible, d_aim, np.inf), axis=1)[shooters]
        hits = np.bincount(targets, minlength=MAX_OPPONENTS) * self.unit_damage * self._dmg_gain
        before = live.copy()
        self.opp_hp = np.maximum(self.opp_hp - hits, 0.0)
        self.opp_hp[self.opp_hp < 1e-9] = 0.0
        kills = int((before & (self.opp_hp <= 0)).sum())
        self.kills += kills
        self.shots += int(shooters.size)
        return kills, int(shooters.size)

    def _opponents_act(self) -> float:
        live = np.flatnonzero(self.opp_hp > 0)
        alive = self.unit_hp > 0
        if live.size == 0 or not alive.any():
            return 0.0
        d = np.linalg.norm(self.opp_pos[live, None, :] - self.unit_pos[None, :, :], axis=2)  # [L, S]
        d[:, ~alive] = np.inf
        target = np.argmin(d, axis=1)
        dist = d[np.arange(live.size), target]
        step = self.opponent_speed * self._opp_gain
        direction = (self.unit_pos[target] - self.opp_pos[live]) / np.maximum(dist, 1e-9)[:, None]
        move = np.minimum(step, np.maximum(dist - 0.8 * self.opponent_range, 0.0))  # stop just inside reach
        self.opp_pos[live] = self.opp_pos[live] + direction * move[:, None]
        dist_after = np.linalg.norm(self.unit_pos[target] - self.opp_pos[live], axis=1)
        hitting = dist_after <= self.opponent_range
        dmg = np.bincount(target[hitting], minlength=SQUAD_SIZE) * self.opponent_damage
        lost = np.minimum(dmg, self.unit_hp)
        self.unit_hp = self.unit_hp - lost
        self.unit_hp[self.unit_hp < 1e-9] = 0.0
        self.damage_taken += float(lost.sum())
        return float(lost.sum())

    def _obs(self) -> np.ndarray:
        o = np.zeros(obs_dim(), np.float32)
        alive = self.unit_hp > 0
        live = np.flatnonzero(self.opp_hp > 0)
        c = self.unit_pos[alive].mean(axis=0) if alive.any() else np.zeros(2)
        o[0:2] = c
        if live.size:
            o[2:4] = self.opp_pos[live].mean(axis=0)
        o[4] = alive.mean()
        o[5] = live.size / self.num_opponents
        o[6] = 1.0 - self.t / self.max_steps
        if live.size and alive.any():
            o[7] = min(2.0, float(np.linalg.norm(self.opp_pos[live, None, :] - self.unit_pos[None, alive, :],
                                                  axis=2).min()))
        for i in range(SQUAD_SIZE):
            k = unit_offset(i)
            o[k:k + 2] = self.unit_pos[i]
            o[k + 2], o[k + 3] = self.unit_hp[i], float(alive[i])
        order = live[np.argsort(np.linalg.norm(self.opp_pos[live] - c, axis=1), kind="stable")]
        for j, m in enumerate(order):
            k = opponent_offset(j)
            o[k:k + 2] = self.opp_pos[m]
            o[k + 2], o[k + 3] = self.opp_hp[m], 1.0
        return o

    # -- checkpoints and tests ----------------------------------------------------------------------
    def get_state(self) -> dict:
        """The episode's state (also how tests build a situation by hand, with ``set_state``)."""
        return {"unit_pos": self.unit_pos.tolist(), "unit_hp": self.unit_hp.tolist(), "opp_pos": self.opp_pos.tolist(),
                "opp_hp": self.opp_hp.tolist(), "t": self.t, "kills": self.kills, "shots": self.shots,
                "damage_taken": self.damage_taken, "num_opponents": self.num_opponents, "next_n": self._next_n,
                "dr": [self._opp_gain, self._dmg_gain]}

    def set_state(self, state: dict) -> None:
        self.unit_pos = np.asarray(state["unit_pos"], np.float64).reshape(SQUAD_SIZE, 2)
        self.unit_hp = np.asarray(state["unit_hp"], np.float64).reshape(SQUAD_SIZE)
        self.opp_pos = np.asarray(state["opp_pos"], np.float64).reshape(MAX_OPPONENTS, 2)
        self.opp_hp = np.asarray(state["opp_hp"], np.float64).reshape(MAX_OPPONENTS)
        self.t, self.kills, self.shots = int(state.get("t", 0)), int(state.get("kills", 0)), int(state.get("shots", 0))
        self.damage_taken = float(state.get("damage_taken", 0.0))
        self.num_opponents = int(state.get("num_opponents", self.num_opponents))
        self._next_n = int(state.get("next_n", self.num_opponents))
        self._opp_gain, self._dmg_gain = (float(x) for x in state.get("dr", [1.0, 1.0]))

    def observe(self) -> np.ndarray:
        """The observation of the current state (after ``set_state``)."""
        return self._obs()
