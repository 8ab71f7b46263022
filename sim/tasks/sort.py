"""ArmSort: an industrial sorter. Objects of two kinds lie on a table; each must go into the bin of its kind.

Kinds: 0 = red cube -> bin at ``-y``; 1 = blue cylinder -> bin at ``+y``. The arm carries a suction
cup: the extra action dimension ``suction`` (> 0 = on) grips the object the end-effector link touches
(a fixed constraint, created when suction turns on within ``SUCTION_REACH_M`` of an object) and releases it
when it turns off. An object is *sorted* when it rests inside its bin and is not held; the episode
succeeds (and terminates) when every object is sorted, and is truncated by the time limit (200 steps).
``max_objects`` > ``num_objects`` keeps that many object slots in the observation (the extra slots read as
absent and sorted), so a curriculum can change ``num_objects`` (from the next reset) under one layout.
Reward per step: ``-(distance ee->object) - (distance object->bin)`` for the first unsorted object,
plus 2 per sorted object, ``-1`` per object in a wrong bin, and 5 at success. ``sorted_reward="remaining"`` pays
``-2`` per object not yet sorted instead of ``+2`` per sorted one (the same differences between states, but
finishing early pays: with ``+2`` per sorted object and every step, a return-maximizing learner is better off
sorting all but the last object and waiting out the time limit than ending the episode with success).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pybullet as p

from tinker_sim.dynamics import DynamicsParams
from tinker_sim.pybullet_world import PyBulletWorld
from tinker_sim.robot import ArmRobot
from tinker_sim.tasks.base import Task, term
from tinker_core.errors import ConfigError

TABLE_HALF = np.array([0.3, 0.6, 0.025])
TABLE_CENTER = np.array([0.55, 0.0, 0.025])
TABLE_TOP = float(TABLE_CENTER[2] + TABLE_HALF[2])
SPAWN_LOW = np.array([0.45, -0.15])
"""objects appear uniformly in this xy box on the table (base frame, m)"""
SPAWN_HIGH = np.array([0.65, 0.15])
MIN_SEPARATION = 0.09
BIN_CENTERS = np.array([[0.5, -0.4], [0.5, 0.4]])
"""xy of the bin for each kind"""
BIN_INNER_HALF = 0.08
BIN_WALL_HEIGHT = 0.04
OBJECT_HALF = 0.025
"""half the size of an object at object_size_scale = 1, m"""
REST_Z = TABLE_TOP + OBJECT_HALF
"""height of an object's centre resting on the table (at object_size_scale = 1), m"""
RIM_Z = TABLE_TOP + BIN_WALL_HEIGHT + OBJECT_HALF
"""an object's centre below this, inside a bin, rests in it (at object_size_scale = 1), m"""
OBJECT_MASS = 0.1
SUCTION_REACH_M = 0.01
PER_SORTED = 2.0
"""reward per sorted object (``sorted_reward`` "per_step"; "remaining": minus this per object not yet sorted)"""
WRONG_BIN_PENALTY = 1.0
"""reward taken per object in a bin not of its kind"""
SUCCESS_BONUS = 5.0
"""reward added when every object is sorted"""
KIND_COLORS = [(0.85, 0.15, 0.1, 1.0), (0.1, 0.3, 0.9, 1.0)]
NUM_KINDS = 2


SENSOR_SETTLE_CYCLES = 5
"""states in a row the live loop's sensor must see every object sorted before it ends the episode: the camera puts an
object it no longer sees held at its resting height, so one let go above its bin reads as sorted while it falls (a
policy fine-tuned from the sensor learned to drop them from 12-17 cm: the sensor ended 6 of 6 episodes, measured,
before the simulator saw the last object land). 5 cycles at 50 ms: a fall of 30 cm"""


def sensor_rule(task_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """The reward rule and the cell's geometry a `SortTask` made with ``task_kwargs`` uses, for the live loop's
    success sensor (`tinker_core.loop.sort_sensor`): one rule for the env and the robot."""
    kw = task_kwargs or {}
    return {"sorted_reward": str(kw.get("sorted_reward", "per_step")), "per_sorted": PER_SORTED,
            "wrong_bin_penalty": WRONG_BIN_PENALTY, "success_bonus": SUCCESS_BONUS,
            "bins": [tuple(float(v) for v in c) for c in BIN_CENTERS], "bin_inner_half": BIN_INNER_HALF,
            "rim_z": RIM_Z, "settle_cycles": SENSOR_SETTLE_CYCLES}


def sort_fixtures() -> list[tuple[str, tuple, tuple, tuple]]:
    """The sorter's static boxes, (name, half extents, centre in the base frame, rgba): the table, then each bin's
    four walls (`SortTask.static_fixtures`). The task adds them to the world (`Task.add_fixture`); `fixture_scene`
    gives them to a guard that has no world."""
    out = [("sort_table", tuple(TABLE_HALF), tuple(TABLE_CENTER), (0.55, 0.45, 0.35, 1.0))]
    h, t = BIN_WALL_HEIGHT / 2, 0.005
    z = TABLE_TOP + h
    for kind, (bx, by) in enumerate(BIN_CENTERS):
        rgba = tuple(0.5 + 0.5 * c for c in KIND_COLORS[kind][:3]) + (1.0,)
        for w, (dx, dy, hx, hy) in enumerate(((BIN_INNER_HALF + t, 0, t, BIN_INNER_HALF + 2 * t),
                                              (-BIN_INNER_HALF - t, 0, t, BIN_INNER_HALF + 2 * t),
                                              (0, BIN_INNER_HALF + t, BIN_INNER_HALF, t),
                                              (0, -BIN_INNER_HALF - t, BIN_INNER_HALF, t))):
            out.append((f"bin{kind}_wall{w}", (hx, hy, h), (bx + dx, by + dy, z), rgba))
    return out


class SortTask(Task):
    name = "sort"
    action_terms = [term("suction", 1, "on>0", 1.0, 0.0, "none")]
    dynamics_keys = ("friction", "object_mass_scale", "object_size_scale")
    static_fixtures = staticmethod(sort_fixtures)

    def __init__(self, world: PyBulletWorld, robot: ArmRobot, num_objects: int = 2, max_objects: int | None = None,
                 sorted_reward: str = "per_step"):
        super().__init__(world, robot)
        if sorted_reward not in ("per_step", "remaining"):
            raise ConfigError(f"SortTask.sorted_reward: expected 'per_step' or 'remaining', got {sorted_reward!r}")
        self.sorted_reward = sorted_reward
        self.slots = int(max_objects) if max_objects is not None else int(num_objects)
        """object slots in the observation (fixed for the task's life)"""
        self._num_objects = self._next_num_objects = self._check_count(num_objects)
        self.params = DynamicsParams()
        table, *walls = self.static_fixtures()
        self.table = self.add_fixture(*table)
        self.bin_parts = [self.add_fixture(*wall) for wall in walls]
        self.objects: list[int] = []
        self._shapes: dict[tuple[int, int], tuple[int, int]] = {}
        self._parked: dict[tuple[int, int], list[int]] = {}
        self._keys: list[tuple[int, int]] = []
        self.kinds = np.zeros(self.num_objects, dtype=int)
        self.grip_constraint: int | None = None
        self.held: int | None = None
        self._size = OBJECT_HALF

    def _check_count(self, n: Any) -> int:
        if not (float(n) == int(float(n)) and 1 <= int(float(n)) <= self.slots):
            raise ConfigError(f"SortTask.num_objects: expected an integer 1..{self.slots} (max_objects), got {n!r}")
        return int(float(n))

    @property
    def num_objects(self) -> int:
        """objects of the running episode"""
        return self._num_objects

    @num_objects.setter
    def num_objects(self, n: int) -> None:
        """takes effect at the next reset (a curriculum level never changes a running episode)"""
        self._next_num_objects = self._check_count(n)

    def obs_terms(self) -> list[dict[str, Any]]:
        terms = [term("suction_active", 1, "bool", 1.0, 0.0, "none")]
        for i in range(self.slots):
            terms += [
                term(f"obj{i}_pos", 3, "m", 1.0 / self.workspace_half, self.workspace_center, "base"),
                term(f"obj{i}_minus_ee", 3, "m", 1.0 / 0.3, 0.0, "base"),
                term(f"obj{i}_kind", NUM_KINDS, "one-hot", 1.0, 0.0, "none"),
                term(f"obj{i}_bin_minus_obj", 3, "m", 1.0 / 0.3, 0.0, "base"),
                term(f"obj{i}_sorted", 1, "bool", 1.0, 0.0, "none"),
            ]
        return terms

    def apply_dynamics(self, params: DynamicsParams) -> None:
        self.params = params
        c = self.world.client
        for body in [self.table] + self.bin_parts:
            p.changeDynamics(body, -1, lateralFriction=params.friction, physicsClientId=c)

    def reset(self, rng: np.random.Generator, params: DynamicsParams) -> None:
        self._release()
        self._park_objects()
        self.params = params
        self._num_objects = self._next_num_objects
        size_key = int(round(params.object_size_scale * 100))  # shapes are cached per 1 % of size: bounded memory
        self._size = OBJECT_HALF * size_key / 100
        self.kinds = rng.integers(0, NUM_KINDS, self.num_objects)
        if self.num_objects >= NUM_KINDS:  # at least one of each kind
            self.kinds[:NUM_KINDS] = rng.permutation(NUM_KINDS)
        positions: list[np.ndarray] = []
        while len(positions) < self.num_objects:
            xy = rng.uniform(SPAWN_LOW, SPAWN_HIGH)
            if all(np.linalg.norm(xy - q) >= MIN_SEPARATION for q in positions):
                positions.append(xy)
        self.objects = []
        mass = OBJECT_MASS * params.object_mass_scale
        c = self.world.client
        for kind, xy in zip(self.kinds, positions):
            pos = np.array([xy[0], xy[1], TABLE_TOP + self._size]) + self.robot.base_position
            key = (int(kind), size_key)
            parked = self._parked.get(key)
            if parked:
                body = parked.pop()
                self.world.set_pose(body, pos)
            else:
                col, vis = self._shape(*key)
                body = p.createMultiBody(mass, col, vis, basePosition=pos.tolist(), physicsClientId=c)
            p.changeDynamics(body, -1, mass=mass, lateralFriction=params.friction, physicsClientId=c)
            self.objects.append(body)
            self._keys.append(key)
        self._refresh()

    def _park_objects(self) -> None:
        """Keep last episode's objects for reuse: static, under the floor (PyBullet leaks memory per new body)."""
        c = self.world.client
        for body, key in zip(self.objects, self._keys):
            p.changeDynamics(body, -1, mass=0.0, physicsClientId=c)
            self.world.set_pose(body, (0.0, 0.0, -2.0 - 0.1 * body))
            self._parked.setdefault(key, []).append(body)
        self.objects, self._keys = [], []

    def _shape(self, kind: int, size_key: int) -> tuple[int, int]:
        """(collision, visual) shape ids for a kind at a size, created once (PyBullet cannot free visual shapes)."""
        key = (kind, size_key)
        if key not in self._shapes:
            c, h = self.world.client, OBJECT_HALF * size_key / 100
            if kind == 0:
                col = p.createCollisionShape(p.GEOM_BOX, halfExtents=[h] * 3, physicsClientId=c)
                vis = p.createVisualShape(p.GEOM_BOX, halfExtents=[h] * 3, rgbaColor=KIND_COLORS[0], physicsClientId=c)
            else:
                col = p.createCollisionShape(p.GEOM_CYLINDER, radius=h, height=2 * h, physicsClientId=c)
                vis = p.createVisualShape(p.GEOM_CYLINDER, radius=h, length=2 * h, rgbaColor=KIND_COLORS[1],
                                          physicsClientId=c)
            self._shapes[key] = (col, vis)
        return self._shapes[key]

    # ---- suction ----------------------------------------------------------------------------------
    def apply_action(self, extra: np.ndarray, ee: np.ndarray) -> None:
        on = float(extra[0]) > 0.0
        if not on:
            self._release()
        elif self.held is None:
            c, r = self.world.client, self.robot
            for body in self.objects:
                if p.getClosestPoints(r.body, body, SUCTION_REACH_M, linkIndexA=r.ee_link, physicsClientId=c):
                    self._attach(body)
                    break

    def _attach(self, body: int) -> None:
        c, r = self.world.client, self.robot
        link = p.getLinkState(r.body, r.ee_link, computeForwardKinematics=True, physicsClientId=c)
        ee_pos, ee_orn = link[4], link[5]
        obj_pos, obj_orn = p.getBasePositionAndOrientation(body, physicsClientId=c)
        inv_pos, inv_orn = p.invertTransform(ee_pos, ee_orn)
        rel_pos, rel_orn = p.multiplyTransforms(inv_pos, inv_orn, obj_pos, obj_orn)
        self.grip_constraint = p.createConstraint(r.body, r.ee_link, body, -1, p.JOINT_FIXED, (0, 0, 0), rel_pos,
                                                  (0, 0, 0), rel_orn, physicsClientId=c)
        p.changeConstraint(self.grip_constraint, maxForce=200.0, physicsClientId=c)
        self.held = body

    def _release(self) -> None:
        if self.grip_constraint is not None:
            p.removeConstraint(self.grip_constraint, physicsClientId=self.world.client)
        self.grip_constraint = None
        self.held = None

    # ---- state ------------------------------------------------------------------------------------
    def _refresh(self) -> None:
        base = self.robot.base_position
        self.positions = np.array([self.world.position(b) for b in self.objects]) - base
        goals = BIN_CENTERS[self.kinds]
        self.goals = np.column_stack([goals, np.full(self.num_objects, TABLE_TOP + self._size)])
        self.in_bin = np.full(self.num_objects, -1)
        low_enough = self.positions[:, 2] < TABLE_TOP + BIN_WALL_HEIGHT + self._size
        for kind, centre in enumerate(BIN_CENTERS):
            inside = np.all(np.abs(self.positions[:, :2] - centre) < BIN_INNER_HALF, axis=1) & low_enough
            self.in_bin[inside] = kind
        held = np.array([b == self.held for b in self.objects])
        self.sorted = (self.in_bin == self.kinds) & ~held
        self.wrong = (self.in_bin >= 0) & (self.in_bin != self.kinds) & ~held

    def observe(self, ee: np.ndarray) -> np.ndarray:
        self._refresh()
        parts = [np.array([1.0 if self.held is not None else 0.0])]
        onehot = np.eye(NUM_KINDS)
        for i in range(self.num_objects):
            pos = self.positions[i]
            parts += [pos, pos - ee, onehot[self.kinds[i]], self.goals[i] - pos, [float(self.sorted[i])]]
        for _ in range(self.num_objects, self.slots):  # an absent object: nowhere, of no kind, sorted
            parts += [np.zeros(3), np.zeros(3), np.zeros(NUM_KINDS), np.zeros(3), [1.0]]
        return np.concatenate(parts)

    def evaluate(self, ee: np.ndarray) -> tuple[float, bool, dict[str, Any]]:
        self._refresh()
        n_sorted = int(self.sorted.sum())
        success = n_sorted == self.num_objects
        sorted_term = n_sorted if self.sorted_reward == "per_step" else n_sorted - self.num_objects
        reward = PER_SORTED * sorted_term - WRONG_BIN_PENALTY * int(self.wrong.sum())
        if success:
            reward += SUCCESS_BONUS
        else:
            i = int(np.flatnonzero(~self.sorted)[0])
            if self.held is not None:
                i = self.objects.index(self.held)
            reward -= float(np.linalg.norm(self.positions[i] - ee)) + float(np.linalg.norm(self.goals[i] - self.positions[i]))
        info = {"sorted": n_sorted, "wrong_bin": int(self.wrong.sum()), "num_objects": self.num_objects,
                "holding": self.held is not None}
        return reward, success, info

    def state(self, ee: np.ndarray) -> dict[str, Any]:
        _, success, info = self.evaluate(ee)
        return {"objects": self.positions.tolist(), "kinds": self.kinds.tolist(), "success": bool(success), **info}
