"""Forward kinematics and clearance queries for the SafetyWrapper, on its own PyBullet client.

The client is a private ``DIRECT`` connection that holds only the robot (fixed base at the origin,
so the base frame is the world frame) and the known scene. It is never the simulator's client:
setting joint states here moves nothing anywhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from tinker_safety.config import ScenePrimitive
from tinker_core.errors import ConfigError


@dataclass(frozen=True)
class Clearance:
    """The closest pair found within the queried distance."""

    distance: float
    """signed distance, m (negative: penetration)"""
    between: str
    """what is that close, e.g. ``links lbr_iiwa_link_0 and lbr_iiwa_link_5``"""


class RobotModel:
    """The robot and its scene in a private PyBullet ``DIRECT`` client."""

    def __init__(self, urdf_path: str | Path, joint_names: Sequence[str], ee_link: str = "",
                 scene: Sequence[ScenePrimitive] = (), self_collision_ignore: Sequence[Sequence[str]] = ()):
        try:
            import pybullet as p
        except ImportError as e:  # the edge install has no pybullet
            raise ConfigError("SafetyConfig: the workspace box and the collision check need pybullet "
                              "(pip install pybullet==3.2.7), or disable both") from e
        self._p = p
        self.client = p.connect(p.DIRECT)
        try:
            self._build(str(urdf_path), list(joint_names), ee_link, scene, self_collision_ignore)
        except BaseException:
            self.close()
            raise

    def _build(self, urdf: str, joint_names: list[str], ee_link: str, scene: Sequence[ScenePrimitive],
               ignore: Sequence[Sequence[str]]) -> None:
        p, cid = self._p, self.client
        try:
            self.robot = p.loadURDF(urdf, useFixedBase=True, physicsClientId=cid)
        except p.error as e:
            raise ConfigError(f"{urdf}: PyBullet cannot load this URDF ({e})") from e
        infos = [p.getJointInfo(self.robot, j, physicsClientId=cid) for j in range(p.getNumJoints(self.robot, physicsClientId=cid))]
        root = p.getBodyInfo(self.robot, physicsClientId=cid)[0].decode()
        # PyBullet's link index equals the index of the joint that moves it; the root link is -1
        self.link_names = {-1: root, **{i[0]: i[12].decode() for i in infos}}
        link_index = {name: idx for idx, name in self.link_names.items()}
        joint_index = {i[1].decode(): i[0] for i in infos}
        missing = [n for n in joint_names if n not in joint_index]
        if missing:
            raise ConfigError(f"{urdf}: PyBullet finds no joint(s) {missing}; joints: {list(joint_index)}")
        self.joint_indices = [joint_index[n] for n in joint_names]
        ee = ee_link or self.link_names[self.joint_indices[-1]]
        if ee not in link_index:
            raise ConfigError(f"SafetyConfig.ee_link: no link {ee!r} in {urdf}; links: {list(link_index)}")
        self.ee_link, self.ee_index = ee, link_index[ee]
        for pair in ignore:
            unknown = [n for n in pair if n not in link_index]
            if unknown:
                raise ConfigError(f"SafetyConfig.self_collision_ignore: no link(s) {unknown} in {urdf}; "
                                  f"links: {list(link_index)}")
        solid = [i for i in self.link_names if p.getCollisionShapeData(self.robot, i, physicsClientId=cid)]
        parent = {i[0]: i[16] for i in infos}
        # links fixed to the root (the root itself, a mount) never move: nothing about them can change
        static = {-1}
        for i in infos:  # PyBullet lists a parent before its children
            if i[2] == p.JOINT_FIXED and i[16] in static:
                static.add(i[0])
        skip = {frozenset((link_index[a], link_index[b])) for a, b in ignore}
        self.self_pairs = [(a, b) for k, a in enumerate(solid) for b in solid[k + 1:]
                           if parent.get(b) != a and parent.get(a) != b and frozenset((a, b)) not in skip
                           and not (a in static and b in static)]
        self.solid_links = solid
        self.moving_links = [i for i in solid if i not in static]
        bodies = [(s.name, self._add_primitive(s)) for s in scene]
        self.scene_bodies = [(name, body, p.getAABB(body, -1, physicsClientId=cid)) for name, body in bodies]
        self._targets = [[0.0] for _ in self.joint_indices]
        self._at: list[float] | None = None  # the joint positions last set (None: unknown)

    def _add_primitive(self, s: ScenePrimitive) -> int:
        p, cid = self._p, self.client
        if s.shape == "box":
            shape = p.createCollisionShape(p.GEOM_BOX, halfExtents=[x / 2 for x in s.size], physicsClientId=cid)
        elif s.shape == "sphere":
            shape = p.createCollisionShape(p.GEOM_SPHERE, radius=s.size[0], physicsClientId=cid)
        elif s.shape == "cylinder":
            shape = p.createCollisionShape(p.GEOM_CYLINDER, radius=s.size[0], height=s.size[1], physicsClientId=cid)
        else:
            shape = p.createCollisionShape(p.GEOM_PLANE, planeNormal=[0, 0, 1], physicsClientId=cid)
        return p.createMultiBody(baseMass=0, baseCollisionShapeIndex=shape, basePosition=s.position,
                                 baseOrientation=p.getQuaternionFromEuler(s.rpy), physicsClientId=cid)

    # -- queries ---------------------------------------------------------------------------------
    def set_positions(self, q: np.ndarray) -> None:
        """Put the model's joints at ``q`` (skipped when they are there: the workspace check and the collision check
        of one command both ask for its pose, and nothing else moves this private client's robot)."""
        values = q.tolist()
        if values == self._at:
            return
        t = self._targets
        for k, v in enumerate(values):
            t[k][0] = v
        self._p.resetJointStatesMultiDof(self.robot, self.joint_indices, t, physicsClientId=self.client)
        self._at = values

    def ee_position(self, q: np.ndarray) -> np.ndarray:
        """End-effector frame origin in the base frame, m."""
        self.set_positions(q)
        state = self._p.getLinkState(self.robot, self.ee_index, computeForwardKinematics=True,
                                     physicsClientId=self.client)
        return np.array(state[4])

    def closest(self, q: np.ndarray, within: float) -> Clearance | None:
        """The closest self or scene pair at configuration ``q`` if nearer than ``within`` m, else None.

        Bounding boxes first (one cheap query per link): only pairs whose boxes, grown by ``within``,
        overlap get the exact distance query.
        """
        self.set_positions(q)
        p, cid, robot = self._p, self.client, self.robot
        box = {link: p.getAABB(robot, link, physicsClientId=cid) for link in self.solid_links}
        best, between = math.inf, ""
        for a, b in self.self_pairs:
            if _near(box[a], box[b], within):
                for pt in p.getClosestPoints(robot, robot, within, a, b, physicsClientId=cid):
                    if pt[8] < best:
                        best, between = pt[8], f"links {self.link_names[a]} and {self.link_names[b]}"
        for name, body, body_box in self.scene_bodies:
            for link in self.moving_links:
                if _near(box[link], body_box, within):
                    for pt in p.getClosestPoints(robot, body, within, link, -1, physicsClientId=cid):
                        if pt[8] < best:
                            best, between = pt[8], f"link {self.link_names[link]} and scene {name!r}"
        return None if best == math.inf else Clearance(float(best), between)

    def close(self) -> None:
        cid, self.client = getattr(self, "client", None), None
        if cid is not None:
            try:
                self._p.disconnect(physicsClientId=cid)
            except Exception:  # already gone (interpreter shutdown)
                pass

    def __del__(self) -> None:
        self.close()


def _near(a: tuple, b: tuple, within: float) -> bool:
    """Whether boxes ``a`` and ``b`` ((min xyz), (max xyz)) come within ``within`` of each other."""
    (a0, a1), (b0, b1) = a, b
    return (a0[0] - within <= b1[0] and b0[0] - within <= a1[0] and a0[1] - within <= b1[1]
            and b0[1] - within <= a1[1] and a0[2] - within <= b1[2] and b0[2] - within <= a1[2])
