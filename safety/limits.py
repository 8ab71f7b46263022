"""Joint limits read from the robot's URDF: the one source of position, velocity and effort limits.

Only ``revolute`` and ``prismatic`` joints carry limits that a position command must respect;
they are taken in chain order (depth first from the root link, children in file order), which is
the order the robot's joint state and commands use. Mimic joints follow another joint and are
skipped.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from tinker_core.errors import ConfigError

LIMITED_JOINT_TYPES = ("revolute", "prismatic")


def default_urdf() -> Path:
    """The default robot: ``kuka_iiwa/model.urdf`` from ``pybullet_data`` (7 DoF, lbr_iiwa_joint_1..7)."""
    try:
        import pybullet_data
    except ImportError as e:  # the edge install has no pybullet
        raise ConfigError("default robot: pybullet_data is not installed; pass the URDF path explicitly") from e
    return Path(pybullet_data.getDataPath()) / "kuka_iiwa" / "model.urdf"


@dataclass
class JointLimits:
    """Per-joint limits of the commanded joints, in command order."""

    names: list[str]
    """joint names, in the order of joint states and commands"""
    lower: np.ndarray
    """lowest position, rad (revolute) or m (prismatic)"""
    upper: np.ndarray
    """highest position, rad or m"""
    velocity: np.ndarray
    """largest speed, rad/s or m/s"""
    effort: np.ndarray
    """largest torque or force, N·m or N"""
    links: list[str] = field(default_factory=list)
    """child link of each joint (the link the joint moves), same order as ``names``"""
    types: list[str] = field(default_factory=list)
    """URDF joint type of each joint (``revolute`` or ``prismatic``); empty means all revolute"""
    urdf_path: str | None = None
    """the URDF these limits were read from, if any"""

    def __post_init__(self) -> None:
        self.names = [str(n) for n in self.names]
        n = len(self.names)
        if n == 0:
            raise ConfigError("JointLimits.names: expected at least one joint, got none")
        if len(set(self.names)) != n:
            raise ConfigError(f"JointLimits.names: expected unique names, got {self.names}")
        for name in ("lower", "upper", "velocity", "effort"):
            a = np.array(getattr(self, name), dtype=np.float64).reshape(-1)
            if a.shape != (n,):
                raise ConfigError(f"JointLimits.{name}: expected {n} values (one per joint), got {a.shape[0]}")
            if not np.isfinite(a).all():
                raise ConfigError(f"JointLimits.{name}: expected finite values, got {a.tolist()}")
            a.setflags(write=False)
            setattr(self, name, a)
        bad = np.flatnonzero(self.lower >= self.upper)
        if bad.size:
            i = int(bad[0])
            raise ConfigError(f"JointLimits: joint {self.names[i]}: expected lower < upper, "
                              f"got lower {self.lower[i]:g}, upper {self.upper[i]:g}")
        bad = np.flatnonzero(self.velocity <= 0)
        if bad.size:
            i = int(bad[0])
            raise ConfigError(f"JointLimits: joint {self.names[i]}: expected velocity limit > 0, got {self.velocity[i]:g}")
        if self.links and len(self.links) != n:
            raise ConfigError(f"JointLimits.links: expected {n} link names, got {len(self.links)}")
        if self.types and (len(self.types) != n or any(t not in LIMITED_JOINT_TYPES for t in self.types)):
            raise ConfigError(f"JointLimits.types: expected {n} of {LIMITED_JOINT_TYPES}, got {self.types}")

    @property
    def dof(self) -> int:
        return len(self.names)

    @property
    def units(self) -> list[str]:
        """Position unit of each joint: ``rad`` (revolute) or ``m`` (prismatic)."""
        return ["m" if t == "prismatic" else "rad" for t in (self.types or ["revolute"] * self.dof)]

    def to_dict(self) -> dict:
        return {
            "names": list(self.names),
            "lower": self.lower.tolist(),
            "upper": self.upper.tolist(),
            "velocity": self.velocity.tolist(),
            "effort": self.effort.tolist(),
            "links": list(self.links),
            "types": list(self.types),
            "urdf_path": self.urdf_path,
        }

    @classmethod
    def from_urdf(cls, path: str | os.PathLike | None = None,
                  joint_names: Sequence[str] | None = None) -> "JointLimits":
        """Parse ``path`` (default: `default_urdf`); ``joint_names`` selects and orders joints."""
        path = Path(path) if path is not None else default_urdf()
        if not path.is_file():
            raise ConfigError(f"{path}: URDF file not found")
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as e:
            raise ConfigError(f"{path}: not valid URDF XML: {e}") from e
        if root.tag != "robot":
            raise ConfigError(f"{path}: expected a <robot> root element, got <{root.tag}>")
        chain = _joints_in_chain_order(root, path)
        limited = {j.get("name"): j for j in chain
                   if j.get("type") in LIMITED_JOINT_TYPES and j.find("mimic") is None}
        if joint_names is None:
            selected = list(limited)
        else:
            selected = [str(n) for n in joint_names]
            missing = [n for n in selected if n not in limited]
            if missing:
                raise ConfigError(f"{path}: joint(s) {missing} are not revolute/prismatic joints of this robot; "
                                  f"limited joints: {list(limited)}")
        if not selected:
            raise ConfigError(f"{path}: no revolute or prismatic joint found")
        rows = [_limit_row(limited[n], path) for n in selected]
        lower, upper, velocity, effort = (np.array(col, dtype=np.float64) for col in zip(*rows))
        links = [limited[n].find("child").get("link") for n in selected]
        types = [limited[n].get("type") for n in selected]
        return cls(selected, lower, upper, velocity, effort, links=links, types=types, urdf_path=str(path))


def _joints_in_chain_order(root: ET.Element, path: Path) -> list[ET.Element]:
    """Joints depth first from the root link; children in file order."""
    joints = root.findall("joint")
    children: dict[str, list[ET.Element]] = {}
    child_links = set()
    for j in joints:
        parent, child = j.find("parent"), j.find("child")
        if parent is None or child is None or parent.get("link") is None or child.get("link") is None:
            raise ConfigError(f"{path}: joint {j.get('name')!r} needs <parent link=...> and <child link=...>")
        children.setdefault(parent.get("link"), []).append(j)
        child_links.add(child.get("link"))
    roots = [link.get("name") for link in root.findall("link") if link.get("name") not in child_links]
    if len(roots) != 1:
        raise ConfigError(f"{path}: expected exactly one root link, got {roots}")
    order: list[ET.Element] = []

    def walk(link: str) -> None:
        for j in children.get(link, []):
            order.append(j)
            walk(j.find("child").get("link"))

    walk(roots[0])
    return order


def _limit_row(joint: ET.Element, path: Path) -> tuple[float, float, float, float]:
    name = joint.get("name")
    lim = joint.find("limit")
    if lim is None:
        raise ConfigError(f"{path}: joint {name}: {joint.get('type')} joint without a <limit> element")
    values = []
    for attr in ("lower", "upper", "velocity", "effort"):
        raw = lim.get(attr)
        if raw is None:
            raise ConfigError(f"{path}: joint {name}: <limit> has no {attr!r} attribute")
        try:
            values.append(float(raw))
        except ValueError:
            raise ConfigError(f"{path}: joint {name}: <limit {attr}={raw!r}> is not a number") from None
    return tuple(values)  # type: ignore[return-value]
