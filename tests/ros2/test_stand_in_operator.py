"""The stand-in operator's rule (`tinker.stand_in_operator`: a script standing in for a person, used by
``tinker demo --operator scripted``): it takes over only when the arm heads away from the target, steers toward an
IK solution for the target within ``step_rad``, hands back at the target, and labels the episode that ended.

Fed with real ROS messages (a real rclpy node in its own context); the graph is not needed for the rule, the
measured run with the whole graph is in docs/sim2real/human_data.md."""

from __future__ import annotations

import time

import numpy as np
import pytest


@pytest.fixture
def operator(ros2):
    import rclpy
    from rclpy.context import Context
    from rclpy.signals import SignalHandlerOptions

    from tinker.stand_in_operator import StandInOperator

    ctx = Context()
    rclpy.init(context=ctx, args=[], domain_id=ros2.fresh_domain(),
               signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("stand_in_test", context=ctx)
    op = StandInOperator(node, "/stand_in_test", away_cycles=4, away_m=0.02, hold_s=30.0, release_m=0.04)
    yield op
    op.close()
    node.destroy_node()
    rclpy.shutdown(context=ctx)


def _task(episode: int, cycle: int, d: float, target=(0.5, 0.1, 0.4), success: bool = False, late: bool = False):
    from tinker.wire import task_msg

    return task_msg(time.time_ns() - (10**9 if late else 0), cycle, episode, -d, False, success, d,
                    [("ee_pos", [0.4, 0.0, 0.5]), ("target_pos", target), ("target_minus_ee", np.zeros(3))])


def test_it_takes_over_only_when_the_arm_heads_away_and_steers_toward_the_target(operator):
    from sensor_msgs.msg import JointState

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    sent = []
    operator.node.create_subscription(JointState, "/stand_in_test/intervention", sent.append, 10)
    ex = SingleThreadedExecutor(context=operator.node.context)
    ex.add_node(operator.node)

    def spin(n_expected: int) -> None:  # what it put on `intervention`, over DDS
        deadline = time.monotonic() + 5.0
        while len(sent) < n_expected and time.monotonic() < deadline:
            ex.spin_once(timeout_sec=0.05)
        for _ in range(5):
            ex.spin_once(timeout_sec=0.02)

    q = np.array([0.0, 0.5, 0.0, -1.2, 0.0, 1.0, 0.0])
    operator._on_joints(JointState(name=[f"j{i}" for i in range(7)], position=q.tolist()))
    for k, d in enumerate([0.30, 0.28, 0.26, 0.24, 0.22, 0.20]):  # closing in: nobody takes over
        operator._on_task(_task(1, k, d))
        operator.step()
    spin(0)
    assert operator.counts["takeovers"] == 0 and sent == [] and operator.counts["published"] == 0
    for k, d in enumerate([0.21, 0.22, 0.23, 0.24, 0.25], start=6):  # heading away by 5 cm over 4 cycles
        operator._on_task(_task(1, k, d))
    assert operator.counts["takeovers"] == 1 and operator.counts["episodes_taken_over"] == 1
    operator.step()
    spin(1)
    assert len(sent) == 1 and sent[0].name == [f"j{i}" for i in range(7)]
    goal = np.asarray(sent[0].position)
    assert np.all(np.abs(goal - q) <= 0.1 + 1e-9) and np.any(np.abs(goal - q) > 1e-3)  # a bounded step that moves
    q_ik = operator._kin.inverse_kinematics(np.array([0.5, 0.1, 0.4]), rest=q)
    assert np.all(np.sign(goal - q)[np.abs(q_ik - q) > 0.01] == np.sign(q_ik - q)[np.abs(q_ik - q) > 0.01])
    operator._on_task(_task(1, 11, 0.03))  # within release_m: handed back
    operator.step()
    spin(2)
    assert len(sent) == 1 and operator.counts["published"] == 1
    assert rclpy.ok(context=operator.node.context)


def test_it_says_success_when_it_sees_it_and_failure_when_an_episode_ends_without(operator):
    operator._on_task(_task(3, 0, 0.2))
    operator._on_task(_task(3, 1, 0.04, success=True))  # success: said at once
    operator._on_task(_task(3, 2, 0.03, success=True))  # (once)
    operator._on_task(_task(4, 3, 0.3))  # the robot moved on: episode 3 had its label
    operator._on_task(_task(5, 4, 0.3))  # episode 4 ended without reaching: failure
    # no experience bridge in this test: the calls are not made, and it says why (the service: test_human_in_loop)
    assert operator.counts["labels_sent"] == 0
    assert operator.counts["label_errors"] == ["episode 3: label service not ready", "episode 4: label service not ready"]
    assert operator.episode == 5 and not operator.seen_success
    operator._on_task(_task(6, 5, 0.3, late=True))  # handled 1 s after the robot sent it: no label (episode 5)
    assert operator.counts["labels_skipped_late"] == 1 and len(operator.counts["label_errors"]) == 2
