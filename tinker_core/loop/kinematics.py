"""`ForwardKinematics`: the end effector's position from joint positions, read from a URDF (no physics engine).

What a robot that only publishes ``joint_states`` needs for the ``ee_pos`` observation term: the chain of
joints from the URDF's root link to the child of its last movable joint (the simulated arm's end effector,
`tinker_sim.robot.ArmRobot`), each ``origin`` (xyz, rpy) then its motion about ``axis``. Positions are in the root
link's frame, m.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Sequence

import numpy as np

from tinker_core.errors import ConfigError


def default_urdf() -> Path:
    """The KUKA iiwa the simulated robot runs (``kuka_iiwa/model.urdf`` from pybullet_data)."""
    import pybullet_data

    return Path(pybullet_data.getDataPath()) / "kuka_iiwa" / "model.urdf"


def _rpy(r: float, p: float, y: float) -> np.ndarray:
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.array([[cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
                     [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
                     [-sp, cp * sr, cp * cr]])


def _vec(el, attr: str, default: str) -> np.ndarray:
    return np.array([float(x) for x in ((el.get(attr) if el is not None else None) or default).split()])


class ForwardKinematics:
    """``ee_position(q)`` for ``q`` in ``joint_names`` order (default: the chain's own order)."""

    def __init__(self, urdf: str | os.PathLike, joint_names: Sequence[str] | None = None):
        path = Path(urdf)
        if not path.is_file():
            raise ConfigError(f"ForwardKinematics.urdf: file not found: {path}")
        joints = ET.parse(path).getroot().findall("joint")
        by_child = {j.find("child").get("link"): j for j in joints}
        movable = [j for j in joints if j.get("type") in ("revolute", "continuous", "prismatic")]
        if not movable:
            raise ConfigError(f"ForwardKinematics: {path} has no movable joint")
        chain, link = [], movable[-1].find("child").get("link")
        while link in by_child:  # walk up from the end effector to the root
            chain.insert(0, by_child[link])
            link = by_child[link].find("parent").get("link")
        self.chain_names = [j.get("name") for j in chain if j.get("type") != "fixed"]
        names = list(joint_names) if joint_names is not None else self.chain_names
        missing = [n for n in self.chain_names if n not in names]
        if missing:
            raise ConfigError(f"ForwardKinematics: joints {missing} of {path.name} are not in {names}")
        bounded = {j.get("name"): j.find("limit") for j in movable
                   if j.get("type") != "continuous" and j.find("limit") is not None}
        self.limits = (np.array([float(bounded[n].get("lower", "-inf")) if n in bounded else -np.inf for n in names]),
                       np.array([float(bounded[n].get("upper", "inf")) if n in bounded else np.inf for n in names]))
        """(lower, upper) position limits of the joints in ``joint_names`` order, from the URDF (rad or m; a
        continuous joint or one without limits: unbounded)"""
        self._steps = []  # (origin rotation, origin translation, axis, its K and K^2, prismatic, index into q or -1)
        for j in chain:
            o = j.find("origin")
            kind = j.get("type")
            a = _vec(j.find("axis"), "xyz", "1 0 0")
            a = a / np.linalg.norm(a)
            k = np.array([[0, -a[2], a[1]], [a[2], 0, -a[0]], [-a[1], a[0], 0]])  # cross-product matrix of the axis
            self._steps.append((_rpy(*_vec(o, "rpy", "0 0 0")), _vec(o, "xyz", "0 0 0"), a, k, k @ k,
                                kind == "prismatic", -1 if kind == "fixed" else names.index(j.get("name"))))

    @classmethod
    def from_urdf(cls, urdf: str | os.PathLike | None = None, joint_names: Sequence[str] | None = None):
        return cls(urdf or default_urdf(), joint_names)

    def ee_position(self, q: np.ndarray) -> np.ndarray:
        """The end effector's position (root link frame, m) at joint positions ``q``."""
        rot, pos = np.eye(3), np.zeros(3)
        eye, s, c = np.eye(3), np.sin(q), np.cos(q)
        for r0, t0, axis, k, k2, prismatic, i in self._steps:
            pos = pos + rot @ t0
            rot = rot @ r0
            if i < 0:
                continue
            if prismatic:
                pos = pos + rot @ (axis * q[i])
            else:  # Rodrigues: rotation by q[i] about the axis
                rot = rot @ (eye + s[i] * k + (1.0 - c[i]) * k2)
        return pos
