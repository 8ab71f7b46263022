"""`PyBulletWorld`: one headless PyBullet physics client and the clock that steps it.

Physics runs at ``timestep`` (by default the step nearest 1/240 s that divides the control period);
one control period (50 ms by default: 12 steps of 1/240 s) is ``substeps`` physics steps. Every call passes ``physicsClientId`` so several worlds can live in one
process (the scripted controller keeps a private kinematic world next to the env's).
"""

from __future__ import annotations

from typing import Sequence

import pybullet as p
import pybullet_data

from tinker_core.errors import ConfigError


class PyBulletWorld:
    """A DIRECT-mode physics client with gravity, a ground plane and a fixed control period."""

    def __init__(self, control_period: float = 0.05, timestep: float | None = None, gravity: float = -9.81,
                 ground: bool = True):
        if not control_period > 0:
            raise ConfigError(f"PyBulletWorld.control_period: expected > 0 s, got {control_period}")
        if timestep is None:
            timestep = control_period / max(1, round(control_period * 240.0))
        if not timestep > 0:
            raise ConfigError(f"PyBulletWorld.timestep: expected > 0 s, got {timestep}")
        substeps = round(control_period / timestep)
        if substeps < 1 or abs(substeps * timestep - control_period) > 1e-9 + 1e-6 * control_period:
            raise ConfigError(
                f"PyBulletWorld.control_period: expected a whole multiple of the physics timestep {timestep:.6f} s, "
                f"got {control_period} s")
        self.control_period = float(control_period)
        self.timestep = float(timestep)
        self.substeps = int(substeps)
        self.client = p.connect(p.DIRECT)
        p.setTimeStep(self.timestep, physicsClientId=self.client)
        p.setGravity(0.0, 0.0, gravity, physicsClientId=self.client)
        p.setAdditionalSearchPath(pybullet_data.getDataPath(), physicsClientId=self.client)
        self.ground = p.loadURDF("plane.urdf", physicsClientId=self.client) if ground else None

    def step(self) -> None:
        """Advance one control period (``substeps`` physics steps)."""
        c = self.client
        for _ in range(self.substeps):
            p.stepSimulation(physicsClientId=c)

    def add_box(self, half_extents: Sequence[float], position: Sequence[float], rgba: Sequence[float],
                mass: float = 0.0, collision: bool = True) -> int:
        c = self.client
        col = p.createCollisionShape(p.GEOM_BOX, halfExtents=half_extents, physicsClientId=c) if collision else -1
        vis = p.createVisualShape(p.GEOM_BOX, halfExtents=half_extents, rgbaColor=rgba, physicsClientId=c)
        return p.createMultiBody(mass, col, vis, basePosition=position, physicsClientId=c)

    def add_sphere(self, radius: float, position: Sequence[float], rgba: Sequence[float], mass: float = 0.0,
                   collision: bool = True) -> int:
        c = self.client
        col = p.createCollisionShape(p.GEOM_SPHERE, radius=radius, physicsClientId=c) if collision else -1
        vis = p.createVisualShape(p.GEOM_SPHERE, radius=radius, rgbaColor=rgba, physicsClientId=c)
        return p.createMultiBody(mass, col, vis, basePosition=position, physicsClientId=c)

    def set_pose(self, body: int, position: Sequence[float], orientation: Sequence[float] = (0, 0, 0, 1)) -> None:
        p.resetBasePositionAndOrientation(body, position, orientation, physicsClientId=self.client)
        p.resetBaseVelocity(body, (0, 0, 0), (0, 0, 0), physicsClientId=self.client)

    def position(self, body: int) -> tuple[float, float, float]:
        return p.getBasePositionAndOrientation(body, physicsClientId=self.client)[0]

    def remove(self, body: int) -> None:
        p.removeBody(body, physicsClientId=self.client)

    def close(self) -> None:
        client = getattr(self, "client", None)  # None if __init__ failed before connecting
        if client is not None and client >= 0:
            try:
                p.disconnect(physicsClientId=self.client)
            except p.error:
                pass
            self.client = None

    def __del__(self) -> None:
        self.close()
