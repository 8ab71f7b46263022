"""`DiscFleet`: planar disc robots (wheeled bases reduced to a cylinder and a velocity loop) in PyBullet.

Each robot is a rigid cylinder on the ground plane. Its action is a desired planar velocity; its
"motor" is a proportional velocity loop whose force, ``gain * kp * (v_des - v)``, is clipped to
``max_force`` and applied at the centre of mass every physics step. Contact, friction and robot-robot
collisions are PyBullet's. Domain randomization draws each robot's mass, ground friction and actuator
gain per episode. A disc is ~20x cheaper to simulate than a racecar/husky URDF, which is what lets 20
of them train on 2 cores (``sim/multi/README``-style numbers are in docs/multi_agent/).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pybullet as p

from tinker_sim.pybullet_world import PyBulletWorld
from tinker_core.errors import ConfigError


@dataclass
class DiscRandomization:
    """Per-robot ranges drawn uniformly at every reset (low == high: fixed)."""

    mass_kg: tuple[float, float] = (0.8, 1.25)
    """Robot mass."""
    friction: tuple[float, float] = (0.02, 0.1)
    """Ground friction coefficient. A wheeled base does not slide on the ground: what it feels is its
    wheels' rolling resistance, which this stands for (a sliding coefficient of 0.5 would make a slow
    command stall the velocity loop)."""
    actuator_gain: tuple[float, float] = (0.7, 1.3)
    """Multiplies the velocity loop's force (a weak or strong motor)."""

    def __post_init__(self) -> None:
        for name in ("mass_kg", "friction", "actuator_gain"):
            lo, hi = (float(v) for v in getattr(self, name))
            if not 0.0 < lo <= hi:
                raise ConfigError(f"DiscRandomization.{name}: expected 0 < low <= high, got ({lo}, {hi})")
            setattr(self, name, (lo, hi))

    def draw(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        return {k: rng.uniform(*getattr(self, k), size=n) for k in ("mass_kg", "friction", "actuator_gain")}


class DiscFleet:
    """``n`` disc robots in ``world``, driven by desired velocities in [-1, 1] * ``max_speed``."""

    def __init__(self, world: PyBulletWorld, n: int, radius: float = 0.1, height: float = 0.05,
                 max_speed: float = 1.0, kp: float = 20.0, max_force: float = 10.0,
                 rgba: tuple[float, float, float, float] = (0.2, 0.4, 0.9, 1.0)):
        if n < 1:
            raise ConfigError(f"DiscFleet.n: expected >= 1 robots, got {n}")
        self.world, self.n = world, int(n)
        self.radius, self.height = float(radius), float(height)
        self.max_speed, self.kp, self.max_force = float(max_speed), float(kp), float(max_force)
        c = world.client
        col = p.createCollisionShape(p.GEOM_CYLINDER, radius=radius, height=height, physicsClientId=c)
        vis = p.createVisualShape(p.GEOM_CYLINDER, radius=radius, length=height, rgbaColor=rgba, physicsClientId=c)
        self.ids = [p.createMultiBody(1.0, col, vis, basePosition=[3.0 * i, 50.0, height / 2], physicsClientId=c)
                    for i in range(self.n)]
        self.mass = np.ones(self.n)
        self.gain = np.ones(self.n)

    def apply_params(self, params: dict[str, np.ndarray]) -> None:
        """Set each robot's mass, friction and actuator gain (arrays of length n)."""
        c = self.world.client
        self.mass = np.asarray(params["mass_kg"], dtype=np.float64)
        self.gain = np.asarray(params["actuator_gain"], dtype=np.float64)
        for i, b in enumerate(self.ids):
            p.changeDynamics(b, -1, mass=float(self.mass[i]), lateralFriction=float(params["friction"][i]),
                             spinningFriction=0.0, rollingFriction=0.0, linearDamping=0.0, angularDamping=0.5,
                             physicsClientId=c)

    def place(self, xy: np.ndarray) -> None:
        """Put robot i at ``xy[i]`` at rest, upright."""
        c = self.world.client
        for i, b in enumerate(self.ids):
            p.resetBasePositionAndOrientation(b, [float(xy[i, 0]), float(xy[i, 1]), self.height / 2], [0, 0, 0, 1],
                                              physicsClientId=c)
            p.resetBaseVelocity(b, [0, 0, 0], [0, 0, 0], physicsClientId=c)

    def step(self, actions: np.ndarray, active: np.ndarray | None = None) -> None:
        """One control period with desired velocities ``actions`` [n, 2] in [-1, 1] (robots not
        ``active`` get a zero velocity command: they brake)."""
        c = self.world.client
        v_des = np.clip(np.asarray(actions, dtype=np.float64), -1.0, 1.0) * self.max_speed
        if active is not None:
            v_des = v_des * np.asarray(active, dtype=np.float64)[:, None]
        k = self.gain * self.kp * self.mass
        for _ in range(self.world.substeps):
            for i, b in enumerate(self.ids):
                pos, _ = p.getBasePositionAndOrientation(b, physicsClientId=c)
                v, _ = p.getBaseVelocity(b, physicsClientId=c)
                f = k[i] * (v_des[i] - (v[0], v[1]))
                norm = float(np.hypot(f[0], f[1]))
                if norm > self.max_force * self.gain[i]:
                    f *= self.max_force * self.gain[i] / norm
                p.applyExternalForce(b, -1, [float(f[0]), float(f[1]), 0.0], pos, p.WORLD_FRAME, physicsClientId=c)
            p.stepSimulation(physicsClientId=c)

    def states(self) -> tuple[np.ndarray, np.ndarray]:
        """(positions [n, 2], velocities [n, 2]) in metres and m/s."""
        c = self.world.client
        pos = np.array([p.getBasePositionAndOrientation(b, physicsClientId=c)[0][:2] for b in self.ids])
        vel = np.array([p.getBaseVelocity(b, physicsClientId=c)[0][:2] for b in self.ids])
        return pos, vel

    def contacts(self) -> np.ndarray:
        """How many other robots each robot touches now."""
        c = self.world.client
        out = np.zeros(self.n, dtype=np.int64)
        index = {b: i for i, b in enumerate(self.ids)}
        pairs = {(min(cp[1], cp[2]), max(cp[1], cp[2])) for cp in p.getContactPoints(physicsClientId=c)
                 if cp[1] in index and cp[2] in index and cp[1] != cp[2]}
        for a, b in pairs:
            out[index[a]] += 1
            out[index[b]] += 1
        return out
