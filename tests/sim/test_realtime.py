"""RealTimeArm: the simulated robot behind the ROS 2 stack, stepped against the wall clock."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_sim.realtime import RealTimeArm
from tinker_core.errors import ConfigError, ValidationError


@pytest.fixture
def arm():
    a = RealTimeArm(task="reach", camera=True, image_size=32, seed=3, hold_after_cycles=3)
    yield a
    a.close()


def test_commands_move_the_arm_on_the_wall_clock(arm):
    assert arm.joint_names == [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]
    q0, qd0, stamp0 = arm.state()
    target = q0 + np.array([0.2, 0.1, 0, -0.1, 0, 0.1, 0])
    for _ in range(6):
        arm.set_command(target)  # a fresh command every cycle, like the policy node
        arm.spin(cycles=1)
    q1, _, stamp1 = arm.state()
    assert arm.cycles == 6
    assert stamp1 > stamp0
    assert np.abs(q1 - target).max() < 0.03
    assert not arm.holding
    img = arm.image()
    assert img.shape == (32, 32, 3) and img.dtype == np.uint8
    ts = arm.task_state()
    assert set(ts) == {"target", "distance", "success"} and len(ts["target"]) == 3


def test_robot_holds_when_commands_stop():
    arm = RealTimeArm(camera=False, seed=3, hold_after_cycles=1)
    q0, _, _ = arm.state()
    target = q0.copy()
    target[0] += 1.0
    arm.set_command(target)  # a big step, then silence
    arm.step()
    assert not arm.holding
    q_at_hold, _, _ = arm.state()
    for _ in range(6):
        arm.step()
    q_end, _, _ = arm.state()
    assert arm.holding and arm.holds == 1
    assert np.abs(q_end - q_at_hold).max() < 0.05  # stayed where it was when commands stopped ...
    assert np.abs(q_end - target).max() > 0.1  # ... instead of finishing the stale command
    arm.close()


def test_timing_misses_are_counted():
    now = [0]
    arm = RealTimeArm(camera=False, clock_ns=lambda: now[0])  # a controlled clock, so the test needs no timing luck
    period = arm.period_ns
    assert arm.run_cycle() and arm.misses == 0
    now[0] = period + period // 2  # woke half a period late: still inside its slot
    assert arm.run_cycle() and arm.misses == 0
    now[0] = 5 * period  # the next call comes 3 periods late: the slots in between are lost
    assert not arm.run_cycle()
    assert arm.misses == 3 and arm.cycles == 3
    arm.close()


def test_bad_command_is_rejected(arm):
    with pytest.raises(ValidationError, match=r"RealTimeArm.command: expected float\[7\], got float\[3\]"):
        arm.set_command([0.0, 0.0, 0.0])
    with pytest.raises(ValidationError, match="NaN"):
        arm.set_command([np.nan] * 7)


def test_reset_draws_a_new_target(arm):
    a = arm.task_state()["target"]
    arm.reset(seed=4)
    assert arm.task_state()["target"] != a and arm.holding


def test_sort_arm_has_a_suction_input_and_reach_has_none(arm):
    with pytest.raises(ConfigError, match="has no suction"):
        arm.set_suction(True)
    sorter = RealTimeArm(task="sort", camera=False, seed=0)
    try:
        sorter.set_suction(True)
        sorter.step()
        ts = sorter.task_state()
        assert ts["holding"] is False and len(ts["objects"]) == 2 and set(ts["kinds"]) == {0, 1}
    finally:
        sorter.close()
