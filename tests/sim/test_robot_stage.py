"""`SimRobotStage`: the simulated robot as every runtime hosts it, on the real PyBullet arm (no ROS): a tick sends
the state as edge values, the safe command comes back as one."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.errors import ValidationError
from tinker_core.loop.edges import Action, SafeCommand
from tinker_core.loop.graph import ROBOT, ROBOT_LOOP
from tinker_sim.robot_loop import SimRobotConfig, SimRobotLoop
from tinker_sim.robot_stage import SimRobotStage

PERIOD = 0.05
MS = 1_000_000


@pytest.fixture
def stage():
    loop = SimRobotLoop(SimRobotConfig(camera=False, seed=3, episode_cycles=3, task="sort", num_objects=2), PERIOD)
    answered: list = []
    st = SimRobotStage(loop, answered=lambda c, sent: answered.append((c.cycle, sent)))
    out: list = []

    def emit(port, value):
        ROBOT_LOOP.check_port(ROBOT, port, "out")
        out.append((port, value))

    st.emit, st.out, st.answered_log = emit, out, answered
    yield st
    loop.close()


def test_every_handler_is_an_edge_into_the_robot_in_the_loops_graph(stage):
    assert set(stage.inputs()) == {e.port for e in ROBOT_LOOP.inputs(ROBOT)}


def test_a_tick_sends_the_task_terms_first_then_the_state_of_the_same_stamp(stage):
    s, missed = stage.tick(50 * MS)
    (p1, task), (p2, state) = stage.out
    assert (p1, p2) == ("task", "joint_states") and not missed
    assert task.stamp_ns == state.stamp_ns == s.stamp and (state.cycle, state.episode) == (1, 0)
    np.testing.assert_array_equal(state.q, s.q)
    assert list(task.terms)[0] == "ee_pos" and sum(v.size for v in task.terms.values()) == s.task.shape[0] - 4


def test_a_safe_command_is_executed_and_answers_its_state_and_one_for_a_state_before_a_reset_is_stale(stage):
    s, _ = stage.tick(50 * MS)
    stage.on_command(SafeCommand(s.stamp, s.cycle, s.q + 0.01, "passed"))
    assert stage.answered_log and stage.answered_log[0][0] == s.cycle
    stage.end_cycle(s, 50 * MS)
    for k in (2, 3):  # the episode's last cycle (3): the robot resets after it
        last, _ = stage.tick(k * 50 * MS)
        stage.end_cycle(last, k * 50 * MS)
    stage.on_command(SafeCommand(last.stamp, last.cycle, last.q, "passed"))
    assert stage.loop.stale == 1


def test_a_tool_command_without_its_suction_value_is_refused_and_counted_by_the_robot(stage):
    with pytest.raises(ValidationError, match="sim_robot.tool_command"):
        stage.on_tool_command(Action(5, 1, np.zeros(0)))
    stage.refuse(ValidationError("sim_robot.command", "7 values", "6 values"), "command")
    assert stage.loop.rejections.count == 1 and stage.refusals.count == 1


def test_a_goal_refused_on_the_wire_is_counted_as_a_refused_goal_not_a_rejected_command(stage):
    stage.refuse(ValidationError("sim_robot.goal.header.frame_id", "the robot's base frame", "'world'"), "goal")
    assert stage.loop.goal_refusals.count == 1 and stage.loop.rejections.count == 0
    assert "world" in stage.loop.goal_refusals.last


def test_a_command_of_the_wrong_length_or_not_finite_is_refused_never_executed(stage):
    s, _ = stage.tick(50 * MS)
    before = stage.loop.step_max
    for q in (np.zeros(6), np.full(7, np.nan), np.zeros(1)):
        with pytest.raises(ValidationError, match=r"sim_robot\.command: expected 7 finite joint positions"):
            stage.on_command(SafeCommand(s.stamp, s.cycle, q, "passed"))
    assert stage.loop.step_max == before and not stage.answered_log
