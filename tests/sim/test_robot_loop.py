"""`SimRobotLoop` and `FrameSchedule`: the sim_robot node's decisions without ROS, on the real PyBullet arm (the
publisher count and the camera are the host's: plain values and a recording callback here)."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.input_ages import Level
from tinker_sim.robot_loop import FrameSchedule, SimRobotConfig, SimRobotLoop

PERIOD = 0.05
MS = 1_000_000


@pytest.fixture
def make_loop():
    made: list[SimRobotLoop] = []

    def make(**kw) -> SimRobotLoop:
        host = kw.pop("host", {})
        cfg = SimRobotConfig(**{"camera": False, "seed": 3, **kw})
        loop = SimRobotLoop(cfg, PERIOD, publishers=lambda: host.get("publishers", 1),
                            log=lambda level, msg: host.setdefault("logs", []).append((level, msg)), topic="/cmd",
                            submit_frame=lambda *job: host.setdefault("frames", []).append(job))
        made.append(loop)
        return loop

    yield make
    for loop in made:
        loop.close()


def _cycle(loop: SimRobotLoop, t0: int):
    s, missed = loop.step(t0)
    loop.sent(s.stamp, t0)
    loop.end_cycle(s, t0)
    return s, missed


def test_settings_it_cannot_act_on_are_refused_before_the_robot_exists():
    with pytest.raises(ConfigError, match="camera_rate_hz: expected >= 0"):
        SimRobotConfig(camera_rate_hz=-1.0).check()
    with pytest.raises(ConfigError, match="only the sort task has objects, task is 'reach'"):
        SimRobotConfig(num_objects=2).check()
    assert SimRobotConfig(task="sort", num_objects=2).task_kwargs() == {"num_objects": 2}
    assert SimRobotConfig.from_values(lambda name: getattr(SimRobotConfig(seed=9), name)).seed == 9
    with pytest.raises(ConfigError, match=r"sim_robot.command_type: expected one of \['float64_array', "
                                          r"'joint_trajectory'\], got 'twist'"):
        SimRobotConfig(command_type="twist").check()


def test_the_dynamic_parameters_take_effect_at_the_next_cycle(make_loop):
    loop = make_loop(episode_cycles=0)
    loop.set_param("episode_cycles", 2)
    loop.set_param("hold_after_cycles", 7)
    loop.set_param("seed", 99)  # read-only on the node: not the loop's to change
    assert loop.episode_cycles == 2 and loop.arm.hold_after_cycles == 7 and loop.seed == 3
    states = [_cycle(loop, i * 50 * MS)[0] for i in range(1, 4)]
    assert [s.episode for s in states] == [0, 0, 1]


def test_a_cycle_gives_the_state_and_its_task_terms_and_an_episode_ends_after_its_cycles(make_loop):
    loop = make_loop(episode_cycles=3)
    assert loop.names == [f"lbr_iiwa_joint_{i}" for i in range(1, 8)] and loop.task_terms[0] == ("ee_pos", 3)
    states = [_cycle(loop, i * 50 * MS)[0] for i in range(1, 5)]
    assert [s.cycle for s in states] == [1, 2, 3, 4] and [s.episode for s in states] == [0, 0, 0, 1]
    assert [s.done for s in states] == [False, False, True, False]
    assert states[2].task[1] == 1.0 and states[0].task[1] == 0.0  # ``done`` in the task terms
    assert states[0].task.shape[0] == 4 + sum(k for _, k in loop.task_terms)
    assert states[0].image is None  # no camera


def test_the_success_sensor_ends_its_episode_at_the_next_cycle_and_nothing_else_does(make_loop):
    """``episode_end`` (the experience bridge's sensor saw the task done): that episode ends at the next state; one
    for another episode, or for a state before the last reset, changes nothing; ``end_on_sensor`` false ignores it."""
    loop = make_loop(episode_cycles=10, end_on_success=False)
    s1, _ = _cycle(loop, 50 * MS)
    assert not loop.end_episode("1", s1.stamp)  # not the running episode
    assert loop.end_episode("0", s1.stamp) and not loop.end_episode("0", s1.stamp)  # once
    s2, _ = _cycle(loop, 100 * MS)
    assert s2.done and s2.episode == 0 and not s2.success and loop.sensor_ends == 1
    s3, _ = _cycle(loop, 150 * MS)
    assert s3.episode == 1 and not s3.done
    assert not loop.end_episode("1", s1.stamp)  # a state of the episode before the reset
    assert not _cycle(loop, 200 * MS)[0].done
    off = make_loop(episode_cycles=10, end_on_success=False, end_on_sensor=False)
    t1, _ = _cycle(off, 50 * MS)
    assert not off.end_episode("0", t1.stamp) and not _cycle(off, 100 * MS)[0].done


def test_a_cycle_later_than_one_and_a_half_periods_is_a_deadline_miss(make_loop):
    loop = make_loop()
    assert _cycle(loop, 100 * MS)[1] is False  # the first has no predecessor
    assert _cycle(loop, 150 * MS)[1] is False
    assert _cycle(loop, 250 * MS)[1] is True


def test_a_command_for_a_state_before_the_episode_reset_is_stale_and_not_executed(make_loop):
    loop = make_loop(episode_cycles=2)
    _cycle(loop, 50 * MS)
    s, _ = _cycle(loop, 100 * MS)  # ends episode 0: the arm is reset
    q = s.q + 0.01
    assert loop.command(q, {"stamp_ns": str(s.stamp), "status": "passed"}) == 100 * MS  # when its state went out
    assert loop.stale == 1 and loop.step_max == 0.0  # not executed: no step measured
    s2, _ = _cycle(loop, 150 * MS)
    loop.command(s2.q, {"stamp_ns": str(s2.stamp), "status": "passed"})
    assert loop.stale == 1 and loop.step_max < 1.0


def test_a_second_command_publisher_stops_execution_and_holds_until_one_is_left(make_loop):
    host = {"publishers": 2}
    loop = make_loop(host=host)
    s, _ = _cycle(loop, 50 * MS)
    loop.command(s.q + 0.2, {"stamp_ns": str(s.stamp), "status": "passed"})
    assert loop.foreign.startswith("/cmd: 2 publishers (expected 1, the safety node)") and loop.foreign_holds == 1
    assert loop.step_max == 0.0  # nothing executed
    assert loop.level() == (Level.ERROR, loop.foreign)
    assert host["logs"] == [("error", loop.foreign)]
    host["publishers"] = 1
    _cycle(loop, 100 * MS)  # checked again at each cycle while foreign
    assert loop.foreign == "" and host["logs"][-1] == ("info", "/cmd: one publisher again; executing commands")
    assert loop.level("1 other node(s) named /sim_robot")[0] == Level.ERROR  # a namesake comes first


def test_the_step_of_each_executed_command_is_measured_against_the_true_pose(make_loop):
    loop = make_loop()
    s, _ = _cycle(loop, 50 * MS)
    vel_step = loop.env.robot.velocity_limits * PERIOD
    loop.accept(s.q + 2.0 * vel_step)  # twice the URDF's largest step per cycle
    assert loop.step_max == pytest.approx(2.0, rel=0.05) and loop.steps_over_limit == 1
    values = loop.values()
    assert float(values["max_command_step_window"]) == pytest.approx(2.0, rel=0.05)
    assert float(loop.values()["max_command_step_window"]) == 0.0  # the window starts again per heartbeat


def test_rejected_commands_warn_while_they_go_on(make_loop):
    loop = make_loop()
    loop.reject(ValidationError("sim_robot.command", "7 values", "6 values"))
    level, message = loop.level()
    assert level == Level.WARN and message.startswith("rejected 1 command(s)") and "6 values" in message
    assert loop.values()["rejected_commands"] == 1


def test_the_suction_goes_with_the_safe_command_of_its_state_and_never_with_a_hold(make_loop):
    loop = make_loop(task="sort")
    assert loop.suction
    s, _ = _cycle(loop, 50 * MS)
    with pytest.raises(ValidationError, match="tool_command"):
        loop.tool_command(np.zeros(0), {"stamp_ns": str(s.stamp)})  # no suction value
    loop.tool_command(np.array([1.0]), {"stamp_ns": str(s.stamp)})
    loop.command(s.q, {"stamp_ns": str(s.stamp), "status": "held"})
    assert not loop.arm.suction and loop.suction_switches == 0  # the safety node held: unchanged
    loop.command(s.q, {"stamp_ns": str(s.stamp), "status": "passed"})
    assert loop.arm.suction and loop.suction_switches == 1
    s2, _ = _cycle(loop, 100 * MS)
    loop.command(s2.q, {"stamp_ns": str(s2.stamp), "status": "passed"})  # no tool command for it: unchanged
    assert loop.arm.suction and loop.suction_switches == 1


def test_frames_go_at_the_camera_rate_the_first_of_an_episode_at_once_a_late_one_replaced():
    f = FrameSchedule(PERIOD, 100 * MS)  # 10 Hz camera, 20 Hz loop
    assert f.tick(0, 1, 7, 1) is True and f.take() == (1, 7, 1)  # the episode's first frame: now
    assert f.tick(50 * MS, 2, 7, 2) is False and f.job is None  # not due at 10 Hz
    assert f.tick(100 * MS, 3, 7, 3) is False and f.job == (3, 7, 3)  # due: taken in the quiet window
    assert f.take() == (3, 7, 3) and f.take() is None
    assert f.tick(150 * MS, 4, 7, 4) is False and f.job is None
    assert f.tick(200 * MS, 5, 7, 5) is False and f.job == (5, 7, 5)  # due; no command comes to take it
    assert f.tick(250 * MS, 6, 7, 6) is True and f.take() == (6, 7, 6)  # late: replaced by this state's, now
    f.episode_framed = False  # a reset
    assert f.tick(300 * MS, 7, 8, 7) is True and f.take() == (7, 8, 7)


def test_a_frame_due_at_an_episode_end_is_taken_before_the_reset(make_loop):
    host: dict = {}
    loop = make_loop(host=host, camera=True, camera_rate_hz=20.0, episode_cycles=2)
    assert loop.frames is not None
    s1, _ = _cycle(loop, 50 * MS)  # first frame of the episode: at once
    s2, _ = _cycle(loop, 100 * MS)  # due, and the episode ends: taken before the reset
    assert host["frames"] == [(s1.stamp, 3, 1), (s2.stamp, 3, 2)]
    s3, _ = _cycle(loop, 150 * MS)
    assert host["frames"][-1] == (s3.stamp, 4, 3)  # the new episode's first frame, its seed


def test_a_goal_a_person_sends_moves_the_reach_target_and_stays_for_the_episodes_after(make_loop):
    loop = make_loop(episode_cycles=3)
    goal = np.array([0.6, -0.2, 0.3])
    first = _cycle(loop, 50 * MS)[0]
    assert not np.allclose(loop.report(first).terms["target_pos"], goal)  # the episode's own, drawn at random
    home = first.q
    loop.command(home + np.array([0, 0.1, 0, 0, 0, 0, 0]), {"stamp_ns": str(first.stamp), "status": "passed"})
    moved = _cycle(loop, 100 * MS)[0].q  # the arm moved off its reset pose
    assert loop.set_goal(goal)
    states = [_cycle(loop, i * 50 * MS)[0] for i in range(3, 8)]  # the next cycle, then the episodes after it
    assert [s.episode for s in states] == [1, 1, 1, 2, 2]  # the goal starts an episode; its 3 cycles, then a reset
    assert np.abs(states[0].q - home).max() > np.abs(moved - home).max() > 0.01  # no reset: on from where it was
    assert loop.scene_seed == loop.seed + 2  # the camera's scene: reset with the robot's resets only
    for s in states:  # what the robot is told, and where it really is (nominal: no calibration error)
        assert np.allclose(loop.report(s).terms["target_pos"], goal) and np.allclose(loop.env.task.target, goal)
    assert loop.values()["goals"] == 1 and loop.values()["goal"] == "0.600,-0.200,0.300"


def test_a_goal_outside_the_reach_box_or_for_the_sorter_is_refused_and_the_target_stays(make_loop):
    host: dict = {}
    loop = make_loop(host=host)
    before = loop.env.task.target.copy()
    assert not loop.set_goal(np.array([0.6, -0.2, 1.5]))  # above the box targets are drawn from
    assert np.allclose(loop.env.task.target, before) and loop.goal is None
    level, message = loop.level()
    assert level == Level.WARN and "refused 1 goal(s)" in message and "reach.goal: expected a point within" in message
    assert loop.values()["refused_goals"] == 1
    assert ("warning", f"goal refused, the target stays: {loop.goal_refusals.last}") in host["logs"]
    sorter = make_loop(task="sort")
    assert not sorter.set_goal(np.array([0.5, 0.0, 0.3]))
    assert "a goal for the sort task, whose places are fixed" in sorter.goal_refusals.last
