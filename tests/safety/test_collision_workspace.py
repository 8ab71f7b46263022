"""Collision stop (the table, the robot itself) and the workspace edge, checked against a separate PyBullet plant."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_safety import Outcome

ZERO = np.zeros(7)
# every link pair that is not parent/child, except the wrist hulls the shipped YAML ignores (links 5 and 7)
SELF_PAIRS = [(a, b) for a in range(-1, 7) for b in range(a + 2, 7) if (a, b) != (4, 6)]


def test_straight_line_into_the_table_stops_before_contact(make_guard, make_plant, home):
    guard = make_guard(workspace_min=None, workspace_max=None, start_max_gap=2.0)
    plant = make_plant(table=True)
    target = np.array([0.0, 2.0, 0.0, -1.0, 0.0, 1.0, 0.0])  # swing the shoulder down
    plant.set(target)
    assert plant.table_distance() < -0.03, "the straight-line command really ends inside the table"

    plant.set(home)
    q, qd = plant.state()
    assert guard.reset(q, qd)
    clearance = []
    for _ in range(60):  # real physics: PyBullet position motors track each command for 50 ms
        cmd, status = guard(target, q, qd)
        plant.step(cmd)
        q, qd = plant.state()
        clearance.append(plant.table_distance())
        if status.outcome is Outcome.COLLISION:
            reason = status.summary
    assert guard.estopped and guard.estop_cause == "collision"
    assert "collision predicted: link" in reason and "and scene 'table'" in reason and "e-stop latched" in reason
    # the speed limit shortened that command too; the stop's own reason comes first, as the operator's log shows it
    assert reason.startswith("collision: collision predicted: link") and "rad/s" in reason, reason
    assert min(clearance) > 0.0, f"the robot touched the table: clearance {min(clearance):.4f} m"
    assert q[1] < 1.9, "it stopped well short of the target"
    cmd, status = guard(target, q, qd)
    assert np.array_equal(cmd, np.clip(q, guard.limits.lower, guard.limits.upper))
    assert status.outcome is Outcome.ESTOPPED and guard.counters["collision"] == 1


def test_straight_line_into_itself_stops_before_contact(make_guard, make_plant):
    guard = make_guard(scene=[], workspace_min=None, workspace_max=None, start_max_gap=2.0)
    plant = make_plant(table=False)
    start = np.array([0.0, 1.0, 0.0, -2.0, 0.0, 0.0, 0.0])
    target = np.array([0.0, 2.0, 0.0, -2.0, 0.0, 0.0, 0.0])  # folded back, link 5 into the base
    plant.set(target)
    assert plant.self_distance(SELF_PAIRS) < -0.01, "the straight-line command really ends in self-collision"

    q, qd = start, ZERO
    assert guard.reset(q, qd)
    for _ in range(60):  # perfect tracking, checked kinematically in the plant's own client
        cmd, status = guard(target, q, qd)
        qd, q = (cmd - q) / 0.05, cmd
        plant.set(q)
        assert plant.self_distance(SELF_PAIRS) > 0.0
        if guard.estopped:
            break
    assert guard.estop_cause == "collision"
    assert "links lbr_iiwa_link_0 and lbr_iiwa_link_5" in status.summary or "links lbr_iiwa_link_0 and lbr_iiwa_link_6" \
        in status.summary, status.summary
    assert q[1] < target[1]


def test_inside_the_margin_moving_away_is_allowed_moving_closer_is_not(make_guard, make_plant):
    guard = make_guard(workspace_min=None, workspace_max=None)
    plant = make_plant(table=True)

    def pose(shoulder: float) -> np.ndarray:
        return np.array([0.0, shoulder, 0.0, -1.0, 0.0, 1.0, 0.0])

    lo, hi = 0.5, 2.0  # find the shoulder angle where the arm is 10 mm above the table
    for _ in range(30):
        mid = (lo + hi) / 2
        plant.set(pose(mid))
        lo, hi = (mid, hi) if plant.table_distance() > 0.01 else (lo, mid)
    near = pose(lo)
    assert guard.reset(near, ZERO)
    cmd, status = guard(pose(lo - 0.02), near, ZERO)
    assert status.outcome is Outcome.PASSED and not guard.estopped
    cmd, status = guard(pose(lo + 0.01), near, ZERO)
    assert status.outcome is Outcome.COLLISION and guard.estopped
    assert np.array_equal(cmd, near)


def test_workspace_edge_stops_the_end_effector(make_guard, make_plant, home):
    guard = make_guard(collision_check=False, workspace_min=[-0.9, -0.9, 0.05], workspace_max=[0.70, 0.9, 1.3])
    plant = make_plant(table=False)
    target = np.array([0.0, 1.2, 0.0, -1.0, 0.0, 1.0, 0.0])
    plant.set(target)
    assert plant.ee_position()[0] > 0.705, "the target pose is outside the box"

    q, qd = home, ZERO
    assert guard.reset(q, qd)
    outcomes = []
    for _ in range(40):
        cmd, status = guard(target, q, qd)
        outcomes.append(status.outcome)
        qd, q = (cmd - q) / 0.05, cmd
        plant.set(q)
        assert plant.ee_position()[0] <= 0.70 + 1e-9
    assert Outcome.WORKSPACE in outcomes and not guard.estopped
    assert plant.ee_position()[0] == pytest.approx(0.70, abs=2e-3), "it stops at the edge, not short of it"
    assert "outside the workspace box [-0.9, -0.9, 0.05]..[0.7, 0.9, 1.3] m; step shortened" in status.summary
    assert guard.counters["workspace"] >= 1


def test_outside_the_workspace_only_steps_back_in_are_allowed(make_guard, make_plant, home):
    guard = make_guard(collision_check=False, workspace_min=[-0.9, -0.9, 0.05], workspace_max=[0.60, 0.9, 1.3])
    plant = make_plant(table=False)
    plant.set(home)
    assert plant.ee_position()[0] > 0.6  # home is outside this box
    assert guard.reset(home, ZERO)
    further = home + np.array([0, 0.04, 0, 0, 0, 0, 0])
    cmd, status = guard(further, home, ZERO)
    assert status.outcome is Outcome.WORKSPACE and np.allclose(cmd, home, atol=1e-3)
    back = home - np.array([0, 0.04, 0, 0, 0, 0, 0])
    cmd, status = guard(back, home, ZERO)
    assert status.outcome is Outcome.PASSED and np.allclose(cmd, back)


MOUNTED = """<robot name="mounted">
  <link name="base"><collision><geometry><box size="0.2 0.2 0.1"/></geometry></collision></link>
  <link name="mount"><collision><origin xyz="0 0 0.05"/><geometry><box size="0.3 0.3 0.1"/></geometry></collision></link>
  <link name="arm"><collision><origin xyz="0.3 0 0"/><geometry><box size="0.5 0.05 0.05"/></geometry></collision></link>
  <joint name="mount_fixed" type="fixed"><parent link="base"/><child link="mount"/></joint>
  <joint name="swing" type="revolute"><parent link="mount"/><child link="arm"/><origin xyz="0 0 0.5"/>
    <axis xyz="0 1 0"/><limit lower="-1.5" upper="1.5" velocity="2" effort="10"/></joint>
</robot>"""


def test_links_fixed_to_the_root_are_not_checked_against_the_scene_or_each_other(tmp_path):
    from tinker_safety import SafetyConfig, SafetyWrapper

    path = tmp_path / "mounted.urdf"
    path.write_text(MOUNTED)
    # the base and its mount rest on (and overlap) the table: that must not stop the arm
    table = {"name": "table", "shape": "box", "size": [2.0, 2.0, 0.1], "position": [0.0, 0.0, -0.04]}
    with SafetyWrapper.from_urdf(path, SafetyConfig(scene=[table], accel_limit=None)) as guard:
        q = np.zeros(1)
        assert guard.reset(q, q)
        cmd, status = guard(np.array([0.02]), q, q)
        assert status.outcome is Outcome.PASSED and cmd[0] == 0.02
        # swinging the arm down to the table still stops it (the arm tip reaches z = 0.5 - 0.55 sin(q))
        q = np.array([0.8])
        assert guard.reset(q, np.zeros(1))
        for _ in range(40):
            cmd, status = guard(np.array([1.4]), q, np.zeros(1))
            q = cmd
        assert guard.estop_cause == "collision" and "link arm and scene 'table'" in status.summary
    # it stopped before the arm touched the table, though the mount penetrates the table all along
    import pybullet as p

    cid = p.connect(p.DIRECT)
    try:
        robot = p.loadURDF(str(path), useFixedBase=True, physicsClientId=cid)
        box = p.createMultiBody(0, p.createCollisionShape(p.GEOM_BOX, halfExtents=[1.0, 1.0, 0.05], physicsClientId=cid),
                                basePosition=[0, 0, -0.04], physicsClientId=cid)
        p.resetJointState(robot, 1, float(q[0]), physicsClientId=cid)
        arm = min(pt[8] for pt in p.getClosestPoints(robot, box, 1.0, 1, -1, physicsClientId=cid))
        mount = min(pt[8] for pt in p.getClosestPoints(robot, box, 1.0, 0, -1, physicsClientId=cid))
    finally:
        p.disconnect(physicsClientId=cid)
    assert mount < 0 < arm
