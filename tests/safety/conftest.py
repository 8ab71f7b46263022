"""Shared fixtures for the safety tests: wrappers built from the shipped YAML, a test clock, a PyBullet plant."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tinker_safety import SafetyWrapper, default_urdf, load_safety_config

JOINTS = [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]
HOME = np.array([0.0, 0.5, 0.0, -1.0, 0.0, 1.0, 0.0])
ZERO = np.zeros(7)


class ManualClock:
    """An injectable time source: the watchdog logic is tested without sleeping."""

    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> float:
        self.t += dt
        return self.t


@pytest.fixture
def joints() -> list[str]:
    return list(JOINTS)


@pytest.fixture
def home() -> np.ndarray:
    """A collision-free pose inside the workspace, end effector at about (0.65, 0, 0.69) m."""
    return HOME.copy()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def make_guard():
    """``make_guard(**overrides)``: a SafetyWrapper on the kuka iiwa with the shipped YAML plus overrides."""
    made: list[SafetyWrapper] = []

    def make(clock=None, **overrides) -> SafetyWrapper:
        config = dataclasses.replace(load_safety_config(), **overrides)
        kwargs = {} if clock is None else {"clock": clock}
        guard = SafetyWrapper.from_urdf(default_urdf(), config, **kwargs)
        made.append(guard)
        return guard

    yield make
    for g in made:
        g.close()


@pytest.fixture
def fast_guard(make_guard):
    """Limits only (no workspace, no collision check), armed at HOME."""
    g = make_guard(collision_check=False, workspace_min=None, workspace_max=None)
    assert g.reset(HOME, ZERO)
    return g


class Plant:
    """The robot stand-in: the kuka iiwa in its own PyBullet client (with the table top at z = 0 if asked)."""

    def __init__(self, table: bool):
        import pybullet as p

        self.p = p
        self.cid = p.connect(p.DIRECT)
        self.robot = p.loadURDF(str(default_urdf()), useFixedBase=True, physicsClientId=self.cid)
        self.table = None
        if table:  # same geometry as the 'table' in safety/config/kuka_iiwa.yaml
            shape = p.createCollisionShape(p.GEOM_BOX, halfExtents=[1.2, 1.2, 0.025], physicsClientId=self.cid)
            self.table = p.createMultiBody(0, shape, basePosition=[0, 0, -0.025], physicsClientId=self.cid)
        p.setGravity(0, 0, -9.81, physicsClientId=self.cid)
        self.joints = list(range(7))

    def set(self, q: np.ndarray) -> None:
        for j, v in zip(self.joints, q):
            self.p.resetJointState(self.robot, j, float(v), 0.0, physicsClientId=self.cid)

    def step(self, command: np.ndarray, substeps: int = 12) -> None:
        """Track ``command`` with PyBullet's position motors for one 50 ms period (12 x 1/240 s)."""
        self.p.setJointMotorControlArray(self.robot, self.joints, self.p.POSITION_CONTROL,
                                         targetPositions=command.tolist(), forces=[300.0] * 7,
                                         physicsClientId=self.cid)
        for _ in range(substeps):
            self.p.stepSimulation(physicsClientId=self.cid)

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        s = self.p.getJointStates(self.robot, self.joints, physicsClientId=self.cid)
        return np.array([x[0] for x in s]), np.array([x[1] for x in s])

    def ee_position(self) -> np.ndarray:
        """Frame origin of lbr_iiwa_link_7 in the base frame, m."""
        return np.array(self.p.getLinkState(self.robot, 6, computeForwardKinematics=True, physicsClientId=self.cid)[4])

    def table_distance(self) -> float:
        pts = [pt[8] for link in range(7)
               for pt in self.p.getClosestPoints(self.robot, self.table, 1.0, link, -1, physicsClientId=self.cid)]
        return min(pts)

    def self_distance(self, pairs: list[tuple[int, int]]) -> float:
        return min(pt[8] for a, b in pairs
                   for pt in self.p.getClosestPoints(self.robot, self.robot, 1.0, a, b, physicsClientId=self.cid))

    def close(self) -> None:
        self.p.disconnect(physicsClientId=self.cid)


@pytest.fixture
def make_plant():
    made: list[Plant] = []

    def make(table: bool = True) -> Plant:
        made.append(Plant(table))
        return made[-1]

    yield make
    for p in made:
        p.close()
