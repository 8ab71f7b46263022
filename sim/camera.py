"""`Camera`: fixed RGB views of the workspace, rendered with the CPU tiny renderer.

Nothing is rendered unless an image is asked for. ``views=1``: one view from the front-right;
``views=2``: that view and its mirror image from the front-left, side by side in one (S, 2S, 3) frame
(two views let a perception model triangulate the target's height and depth).

Per episode the pose, intrinsics, light and image noise follow the episode's `DynamicsParams`:
``camera_shift_m`` translates the whole camera (eye and look-at point together, in a direction drawn per
episode) WITHOUT re-aiming it, so a shifted camera really biases what perception sees; ``camera_tilt_deg``
turns the viewing direction by that angle about a random axis; ``camera_fov_delta_deg`` changes the field
of view; ``light_intensity``/``light_azimuth_deg`` set the light; ``image_noise_std`` adds Gaussian pixel
noise (in 0..255 units).
"""

from __future__ import annotations

import math

import numpy as np
import pybullet as p

from tinker_sim.dynamics import DynamicsParams
from tinker_sim.pybullet_world import PyBulletWorld
from tinker_core.errors import ConfigError


def _rotate(v: np.ndarray, axis: np.ndarray, angle: float) -> np.ndarray:
    """Rodrigues' rotation of ``v`` about unit ``axis`` by ``angle`` rad."""
    return v * math.cos(angle) + np.cross(axis, v) * math.sin(angle) + axis * axis.dot(v) * (1 - math.cos(angle))


def _projection(fov_deg: float) -> tuple[float, ...]:
    """The square image's OpenGL projection (column-major, PyBullet's form): vertical field of view ``fov_deg``,
    clipped to 0.05..5 m."""
    return p.computeProjectionMatrixFOV(fov_deg, 1.0, 0.05, 5.0)


class Camera:
    """Looks at the workspace in front of the robot from above the table (see the module docstring)."""

    def __init__(self, world: PyBulletWorld, image_size: int = 64, eye=(1.3, 0.5, 0.9), target=(0.45, 0.0, 0.25),
                 fov_deg: float = 55.0, views: int = 1):
        if not 16 <= int(image_size) <= 512:
            raise ConfigError(f"Camera.image_size: expected 16..512 pixels, got {image_size}")
        if int(views) not in (1, 2):
            raise ConfigError(f"Camera.views: expected 1 or 2, got {views}")
        self.world = world
        self.size = int(image_size)
        self.views = int(views)
        eye0, target0 = np.asarray(eye, dtype=np.float64), np.asarray(target, dtype=np.float64)
        mirror = np.array([1.0, -1.0, 1.0])
        self.eyes0 = [eye0, eye0 * mirror][: self.views]
        self.targets0 = [target0, target0 * mirror][: self.views]
        self.fov_deg = float(fov_deg)
        self.shape = (self.size, self.views * self.size, 3)
        self.set_params(DynamicsParams(), np.random.default_rng(0))

    def set_params(self, params: DynamicsParams, rng: np.random.Generator) -> None:
        """Put an episode's camera pose, intrinsics, light and noise in force (draws from ``rng``)."""
        direction = rng.normal(size=3)
        direction /= max(np.linalg.norm(direction), 1e-9)
        shift = params.camera_shift_m * direction
        self.views_mats = []
        self.eyes = []
        for eye0, target0 in zip(self.eyes0, self.targets0):
            eye = eye0 + shift
            forward = target0 - eye0
            if params.camera_tilt_deg:
                axis = np.cross(forward, rng.normal(size=3))
                axis /= max(np.linalg.norm(axis), 1e-9)
                forward = _rotate(forward, axis, math.radians(params.camera_tilt_deg))
            self.eyes.append(eye)
            self.views_mats.append(p.computeViewMatrix(eye.tolist(), (eye + forward).tolist(), [0, 0, 1]))
        self.eye = self.eyes[0]
        self.view = self.views_mats[0]
        fov = float(np.clip(self.fov_deg + params.camera_fov_delta_deg, 10.0, 120.0))
        self.projection = _projection(fov)
        az = math.radians(params.light_azimuth_deg)
        self.light_direction = [math.cos(az), math.sin(az), 1.5]
        self.ambient = 0.6 * params.light_intensity
        self.diffuse = 0.5 * params.light_intensity
        self.noise_std = params.image_noise_std
        self._noise_rng = np.random.default_rng(int(rng.integers(2**31))) if self.noise_std > 0 else None

    def capture(self) -> np.ndarray:
        """One RGB frame, uint8 (size, views * size, 3)."""
        frames = []
        for view in self.views_mats:
            _, _, rgba, _, _ = p.getCameraImage(
                self.size, self.size, view, self.projection, lightDirection=self.light_direction,
                lightAmbientCoeff=self.ambient, lightDiffuseCoeff=self.diffuse, lightSpecularCoeff=0.1, shadow=0,
                renderer=p.ER_TINY_RENDERER, flags=p.ER_NO_SEGMENTATION_MASK, physicsClientId=self.world.client)
            frames.append(np.asarray(rgba, dtype=np.uint8).reshape(self.size, self.size, 4)[:, :, :3])
        img = frames[0].copy() if len(frames) == 1 else np.concatenate(frames, axis=1)
        if self._noise_rng is not None:
            noisy = img.astype(np.float32) + self._noise_rng.normal(0.0, self.noise_std, img.shape).astype(np.float32)
            img = np.clip(np.rint(noisy), 0, 255).astype(np.uint8)
        return img

    def projections(self, origin=(0.0, 0.0, 0.0)) -> list[list[list[float]]]:
        """Per view, the NOMINAL camera's 3x4 projection (rows: x, y and w of OpenGL clip coordinates) of a point
        given in a frame with its origin at world point ``origin`` (the labels' frame: the robot base). A point
        ``X`` appears at ``(P[0] . [X, 1], P[1] . [X, 1]) / P[2] . [X, 1]`` in -1..1 (x rightward, y upward), the
        model of the camera a triangulating locator is given (`tinker_core.nn.locator.LocatorConfig.projections`);
        the episode's moves, tilt and field of view are what it is NOT told."""
        to_frame = np.eye(4)
        to_frame[:3, 3] = np.asarray(origin, dtype=np.float64)
        proj = np.asarray(_projection(self.fov_deg)).reshape(4, 4).T
        out = []
        for eye0, target0 in zip(self.eyes0, self.targets0):
            view = np.asarray(p.computeViewMatrix(eye0.tolist(), target0.tolist(), [0, 0, 1])).reshape(4, 4).T
            out.append((proj @ view @ to_frame)[[0, 1, 3]].tolist())
        return out
