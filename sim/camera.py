"""`Camera`: a fixed RGB camera over the workspace, rendered with the CPU tiny renderer.

Nothing is rendered unless an image is asked for. Its pose and light follow the episode's
`DynamicsParams` (``camera_shift_m`` moves the eye in a direction drawn per episode;
``light_intensity``/``light_azimuth_deg`` set the light).
"""

from __future__ import annotations

import math

import numpy as np
import pybullet as p

from tinker_sim.dynamics import DynamicsParams
from tinker_sim.pybullet_world import PyBulletWorld
from tinker_core.errors import ConfigError


class Camera:
    """Looks at the workspace in front of the robot from the front-right, above the table."""

    def __init__(self, world: PyBulletWorld, image_size: int = 64, eye=(1.3, 0.5, 0.9), target=(0.45, 0.0, 0.25),
                 fov_deg: float = 55.0):
        if not 16 <= int(image_size) <= 512:
            raise ConfigError(f"Camera.image_size: expected 16..512 pixels, got {image_size}")
        self.world = world
        self.size = int(image_size)
        self.eye0 = np.asarray(eye, dtype=np.float64)
        self.target = np.asarray(target, dtype=np.float64)
        self.fov_deg = float(fov_deg)
        self.projection = p.computeProjectionMatrixFOV(self.fov_deg, 1.0, 0.05, 5.0)
        self.set_params(DynamicsParams(), np.random.default_rng(0))

    def set_params(self, params: DynamicsParams, rng: np.random.Generator) -> None:
        direction = rng.normal(size=3)
        direction /= max(np.linalg.norm(direction), 1e-9)
        self.eye = self.eye0 + params.camera_shift_m * direction
        self.view = p.computeViewMatrix(self.eye.tolist(), self.target.tolist(), [0, 0, 1])
        az = math.radians(params.light_azimuth_deg)
        self.light_direction = [math.cos(az), math.sin(az), 1.5]
        self.ambient = 0.6 * params.light_intensity
        self.diffuse = 0.5 * params.light_intensity

    def capture(self) -> np.ndarray:
        """One RGB frame, uint8 (size, size, 3)."""
        _, _, rgba, _, _ = p.getCameraImage(
            self.size, self.size, self.view, self.projection, lightDirection=self.light_direction,
            lightAmbientCoeff=self.ambient, lightDiffuseCoeff=self.diffuse, lightSpecularCoeff=0.1, shadow=0,
            renderer=p.ER_TINY_RENDERER, flags=p.ER_NO_SEGMENTATION_MASK, physicsClientId=self.world.client)
        return np.asarray(rgba, dtype=np.uint8).reshape(self.size, self.size, 4)[:, :, :3].copy()
