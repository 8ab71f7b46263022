"""`RobotModel`: a URDF's kinematic tree, for the transforms a viewer draws the arm with (``/tf``).

Each joint gives one transform, parent link -> child link: the joint's ``<origin>`` then its motion
about (revolute, continuous) or along (prismatic) its ``<axis>`` by the measured position, the way
``robot_state_publisher`` computes them. `world_positions` composes them (the view's 2D drawing and
tests). Pure numpy and the standard XML parser: no ROS, no PyBullet.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from tinker_core.errors import ConfigError


def default_urdf() -> Path:
    """The graph's default robot: ``kuka_iiwa/model.urdf`` from pybullet_data (the policy and safety nodes' too)."""
    import pybullet_data

    return Path(pybullet_data.getDataPath()) / "kuka_iiwa" / "model.urdf"


def _rpy_quat(r: float, p: float, y: float) -> np.ndarray:
    """Quaternion (x, y, z, w) of URDF fixed-axis roll, pitch, yaw."""
    cr, sr, cp, sp, cy, sy = np.cos(r / 2), np.sin(r / 2), np.cos(p / 2), np.sin(p / 2), np.cos(y / 2), np.sin(y / 2)
    return np.array([sr * cp * cy - cr * sp * sy, cr * sp * cy + sr * cp * sy,
                     cr * cp * sy - sr * sp * cy, cr * cp * cy + sr * sp * sy])


def _qmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array([aw * bx + ax * bw + ay * bz - az * by, aw * by - ax * bz + ay * bw + az * bx,
                     aw * bz + ax * by - ay * bx + az * bw, aw * bw - ax * bx - ay * by - az * bz])


def _qrot(q: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``v`` rotated by ``q`` (plain arithmetic: np.cross costs ~100 us on 3-vectors)."""
    x, y, z, w = (float(c) for c in q)
    vx, vy, vz = (float(c) for c in v)
    tx, ty, tz = y * vz - z * vy + w * vx, z * vx - x * vz + w * vy, x * vy - y * vx + w * vz
    return np.array([vx + 2.0 * (y * tz - z * ty), vy + 2.0 * (z * tx - x * tz), vz + 2.0 * (x * ty - y * tx)])


@dataclass(frozen=True)
class Joint:
    name: str
    kind: str
    parent: str
    child: str
    xyz: np.ndarray
    quat: np.ndarray
    axis: np.ndarray


class RobotModel:
    """Joints of a URDF in tree order; ``transforms(q)`` gives each joint's parent -> child transform."""

    def __init__(self, urdf: str | os.PathLike | None = None):
        self.path = Path(urdf) if urdf else default_urdf()
        if not self.path.is_file():
            raise ConfigError(f"robot model: URDF not found: {self.path}")
        try:
            root = ET.fromstring(self.path.read_text())
        except ET.ParseError as e:
            raise ConfigError(f"robot model: {self.path} is not valid URDF XML: {e}") from e
        self.text = self.path.read_text()
        self.name = root.get("name", "robot")
        self.links = [ln.get("name", "") for ln in root.findall("link")]
        joints = []
        for j in root.findall("joint"):
            o = j.find("origin")
            xyz = np.array([float(v) for v in (o.get("xyz", "0 0 0") if o is not None else "0 0 0").split()])
            rpy = [float(v) for v in (o.get("rpy", "0 0 0") if o is not None else "0 0 0").split()]
            a = j.find("axis")
            axis = np.array([float(v) for v in (a.get("xyz", "1 0 0") if a is not None else "1 0 0").split()])
            parent, child = j.find("parent"), j.find("child")
            if parent is None or child is None:
                raise ConfigError(f"robot model: joint {j.get('name')!r} in {self.path} lacks <parent> or <child>")
            joints.append(Joint(j.get("name", ""), j.get("type", "fixed"), parent.get("link", ""),
                                child.get("link", ""), xyz, _rpy_quat(*rpy), axis / (np.linalg.norm(axis) or 1.0)))
        children = {j.child for j in joints}
        roots = [ln for ln in self.links if ln not in children]
        if len(roots) != 1:
            raise ConfigError(f"robot model: {self.path} has {len(roots)} root links {roots}; expected one tree")
        self.root = roots[0]
        order, frontier = [], [self.root]
        while frontier:  # parents before children, so composing in this order works
            link = frontier.pop(0)
            for j in joints:
                if j.parent == link:
                    order.append(j)
                    frontier.append(j.child)
        self.joints: list[Joint] = order
        self.movable = [j.name for j in order if j.kind in ("revolute", "continuous", "prismatic")]

    def transforms(self, positions: Mapping[str, float]) -> list[dict]:
        """Each joint's transform at ``positions`` (by joint name; missing ones at 0): dicts with
        ``parent``, ``child``, ``translation`` (m) and ``rotation`` (quaternion x, y, z, w)."""
        out = []
        for j in self.joints:
            q = float(positions.get(j.name, 0.0))
            xyz, quat = j.xyz, j.quat
            if j.kind in ("revolute", "continuous") and q:
                s = np.sin(q / 2)
                quat = _qmul(quat, np.array([j.axis[0] * s, j.axis[1] * s, j.axis[2] * s, np.cos(q / 2)]))
            elif j.kind == "prismatic" and q:
                xyz = xyz + _qrot(quat, j.axis * q)
            out.append({"parent": j.parent, "child": j.child, "translation": xyz, "rotation": quat})
        return out

    def world_positions(self, positions: Mapping[str, float], transforms: list[dict] | None = None) -> dict[str, np.ndarray]:
        """Each link frame's origin in the root link's frame (m); ``transforms``: `transforms(positions)` if
        already made."""
        pose = {self.root: (np.zeros(3), np.array([0.0, 0.0, 0.0, 1.0]))}
        for t in transforms if transforms is not None else self.transforms(positions):
            p, r = pose[t["parent"]]
            pose[t["child"]] = (p + _qrot(r, np.asarray(t["translation"])), _qmul(r, np.asarray(t["rotation"])))
        return {k: v[0] for k, v in pose.items()}


def with_frame_prefix(transforms: list[dict], prefix: str) -> list[dict]:
    """``transforms`` with every frame id prefixed (``robot1/`` + ``lbr_iiwa_link_0``): several robots' frames in
    one ``/tf`` tree never collide (tf2's own convention). An empty prefix returns them as they are."""
    if not prefix:
        return transforms
    return [{**t, "parent": prefix + t["parent"], "child": prefix + t["child"]} for t in transforms]
