"""`RestingGeometry`: where a moved camera really saw a resting object (no ROS, no torch).

The sorter's perception (`tinker_core.nn.located_objects.LocatedObjects`) places an object that is not held at the
height it rests at, ``rest_z``: x and y are what the two views' image points agree on at that height, through the
nominal camera (`tinker_core.nn.locator.triangulate_at_height`). A camera moved by ``s`` shows the object where the
nominal camera would show X - s, which lies ``s_z`` lower than the object: adding ``s`` to the estimate leaves the
vertical part of the move as a horizontal error along each view's ray (5 cm at the median for an 8 cm move, on
the shipped cameras). The estimate the nominal camera made, E, is undone instead: the point Y at height
``rest_z - s_z`` whose projections triangulate at ``rest_z`` to E (a few Newton steps on one Jacobian), and the
object is Y + s. A held object, triangulated freely, is simply E + s.

The geometry is what the bundle's perception was exported with (the manifest's ``located_geometry``): the nominal
camera's projections, the resting height, and the bins' inner half-width (the ``sorted`` sensor).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from tinker_core.errors import ConfigError


@dataclass(frozen=True)
class RestingGeometry:
    """The sorter perception's geometry (base frame, m); ``projections``: one 3x4 matrix per view."""

    projections: np.ndarray
    rest_z: float
    bin_inner_half: float

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "located_geometry") -> "RestingGeometry":
        try:
            p = np.asarray(d["projections"], dtype=np.float64)
            geometry = cls(p, float(d["rest_z"]), float(d["bin_inner_half"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{where}: expected projections (one 3x4 matrix per view), rest_z and bin_inner_half, "
                              f"got {dict(d)!r} ({e})") from None
        if p.ndim != 3 or p.shape[1:] != (3, 4) or p.shape[0] < 2 or not np.isfinite(p).all():
            raise ConfigError(f"{where}.projections: expected two or more finite 3x4 matrices, got shape "
                              f"{list(p.shape)}")
        return geometry

    def to_dict(self) -> dict:
        return {"projections": np.asarray(self.projections).tolist(), "rest_z": self.rest_z,
                "bin_inner_half": self.bin_inner_half}

    def project(self, point: np.ndarray) -> np.ndarray:
        """(V, 2) image points of a 3D point through the nominal camera."""
        q = self.projections @ np.append(point, 1.0)
        return q[:, :2] / q[:, 2:3]

    def at_height(self, points: np.ndarray, z: float) -> np.ndarray:
        """(x, y) at height ``z`` whose projections match the (V, 2) image points best (least squares)."""
        rows = (points[:, :, None] * self.projections[:, 2:3, :] - self.projections[:, 0:2, :]).reshape(-1, 4)
        a, b = rows[:, :2], -(rows[:, 2] * z + rows[:, 3])
        return np.linalg.solve(a.T @ a, a.T @ b)

    def resting(self, estimate: np.ndarray, offset: np.ndarray, steps: int = 4) -> np.ndarray:
        """Where an object resting at ``rest_z`` is, given the nominal camera's ``estimate`` of it at that height
        and the camera's ``offset`` (module docstring)."""
        z = self.rest_z - float(offset[2])
        target = np.asarray(estimate, dtype=np.float64)[:2]

        def seen(xy: np.ndarray) -> np.ndarray:
            return self.at_height(self.project(np.array([xy[0], xy[1], z])), self.rest_z)

        xy, eps = target.copy(), 1e-4
        f = seen(xy)
        jac = np.stack([(seen(xy + d) - f) / eps for d in (np.array([eps, 0.0]), np.array([0.0, eps]))], axis=1)
        inverse = np.linalg.inv(jac)  # nearly constant over a few cm: one Jacobian serves every step
        for _ in range(steps):
            xy = xy - inverse @ (f - target)
            f = seen(xy)
        return np.array([xy[0] + offset[0], xy[1] + offset[1], self.rest_z])
