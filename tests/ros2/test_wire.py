"""The wire format declared in `tinker.wire`: every topic once, and the task message read as it is written."""

from __future__ import annotations

import numpy as np
import pytest


def test_task_message_round_trip_and_a_layout_that_does_not_add_up_is_named():
    from tinker.wire import TASK_FIELDS, read_task, task_msg

    msg = task_msg(123, 7, 2, -0.25, True, False, 0.3, [("ee_pos", np.ones(3)), ("target_pos", [0.1, 0.2, 0.3])])
    t = read_task(msg)
    assert (t.stamp_ns, t.cycle, t.episode, t.reward, t.done, t.success) == (123, 7, "2", -0.25, True, False)
    assert list(t.terms) == ["ee_pos", "target_pos"] and t.terms["target_pos"].tolist() == [0.1, 0.2, 0.3]
    assert msg.layout.dim[0].size == len(TASK_FIELDS) + 6  # standard tools read a plain vector
    msg.data = msg.data[:-1]
    from tinker_core.errors import ValidationError

    with pytest.raises(ValidationError, match=r"^task\.terms: expected 5 values after the head, got terms of 6$"):
        read_task(msg)


def test_a_commands_metadata_says_how_it_was_made_and_every_edge_value_reads_back_as_written():
    from tinker.wire import Reader, WRITERS, command_meta
    from tinker_core.loop.edges import Action, Features, SafeCommand

    held = SafeCommand(12, 3, np.ones(7), "held", "v1", why="state refused; stamp=old")
    assert command_meta(held) == {"stamp_ns": 12, "cycle": 3, "version": "v1", "status": "held",
                                  "why": "state refused, stamp:old"}  # the wire's separators go
    served = SafeCommand(12, 3, np.ones(7), "passed", "v1", intervention=True)
    assert command_meta(served)["intervention"] == 1
    r = Reader("experience_bridge")
    back = r.command(WRITERS["command"](served))
    assert (back.stamp_ns, back.cycle, back.status, back.version, back.intervention) == (12, 3, "passed", "v1", True)
    f = Features(5, 2, "1", np.arange(4, dtype=np.float32), "abc")
    g = r.features(WRITERS["features"](f))
    assert (g.stamp_ns, g.cycle, g.episode, g.perception_sha256, g.features.tolist()) == (5, 2, "1", "abc", [0, 1, 2, 3])
    a = r.joint_target(WRITERS["joint_target"](Action(5, 2, np.full(7, 0.25), 3)))
    assert (a.stamp_ns, a.cycle, a.version, a.stop, a.values.tolist()) == (5, 2, "3", False, [0.25] * 7)
    assert g.latency_compensation is None  # perception compensates none: the key is not written
    f.latency_compensation = 4
    assert r.features(WRITERS["features"](f)).latency_compensation == 4


def test_the_latency_safety_measured_reads_back_and_a_bad_one_is_refused_naming_the_field():
    from diagnostic_msgs.msg import KeyValue

    from tinker.wire import Reader, command_latency_msg
    from tinker_core.errors import ValidationError
    from tinker_core.loop.edges import CommandLatency

    r = Reader("perception")
    msg = command_latency_msg("/safety", CommandLatency(4, 0.9991, 0.81))
    c = r.command_latency(msg)
    assert (c.periods, round(c.fit, 4), round(c.runner_up, 2)) == (4, 0.9991, 0.81)
    for bad in ("21", "-1", "four", ""):  # a second publisher, a typo in `ros2 topic pub`
        msg.values = [KeyValue(key="periods", value=bad)]
        with pytest.raises(ValidationError, match=r"perception.command_latency.periods: expected a whole number of "
                                                  r"control periods 0..20"):
            r.command_latency(msg)


def test_a_safe_command_sent_as_a_joint_trajectory_reads_by_joint_name_with_its_metadata():
    from tinker.wire import Reader, command_meta, command_type, trajectory_msg
    from tinker_core.errors import ConfigError, ValidationError
    from tinker_core.loop.edges import SafeCommand

    names = ["a", "b", "c"]
    sent = SafeCommand(12, 3, np.zeros(3), "rate_limited: b", "v2", intervention=True)
    msg = trajectory_msg(["c", "a", "b"], np.array([3.0, 1.0, 2.0]), command_meta(sent), 0.05)
    c = Reader("perception", names).trajectory_command(msg)  # a stage with joints: its order, by name
    assert c.q.tolist() == [1.0, 2.0, 3.0]
    assert (c.stamp_ns, c.cycle, c.status, c.version, c.intervention) == (12, 3, "rate_limited: b", "v2", True)
    assert Reader("experience_bridge").trajectory_command(msg).q.tolist() == [3.0, 1.0, 2.0]  # none: as sent
    with pytest.raises(ValidationError, match=r"policy\.command.*missing joints \['d'\]"):
        Reader("policy", [*names, "d"]).trajectory_command(msg)
    assert command_type("joint_trajectory", "x").__name__ == "JointTrajectory"
    with pytest.raises(ConfigError, match=r"policy.command_type: expected one of \['float64_array', "
                                          r"'joint_trajectory'\], got 'twist'"):
        command_type("twist", "policy.command_type")


def test_a_float64_array_command_goes_in_the_controllers_joint_order_and_reads_back_in_each_stages():
    from tinker.wire import CommandOrder, Reader, command_msg
    from tinker_core.errors import ConfigError, ValidationError
    from tinker_core.loop.edges import SafeCommand

    robot, controller = ["j1", "j2", "j3"], "j3, j1,j2"  # forward_command_controller's joints: [j3, j1, j2]
    sent = command_msg(SafeCommand(12, 3, np.array([1.0, 2.0, 3.0]), "passed"),
                       CommandOrder.of(controller, robot, "safety.command_joints", sends=True))
    assert list(sent.data) == [3.0, 1.0, 2.0]  # what the controller gives j3, j1, j2
    for stage, joints in (("sim_robot", robot), ("policy", ["j2", "j3", "j1"]), ("perception", ["j1", "j3"])):
        r = Reader(stage, joints)
        r.set_command_joints(controller)
        assert r.command(sent).q.tolist() == [{"j1": 1.0, "j2": 2.0, "j3": 3.0}[j] for j in joints], stage
    assert Reader("policy", robot).command(sent).q.tolist() == [3.0, 1.0, 2.0]  # '' : read in the stage's own order
    r = Reader("policy", robot)
    r.set_command_joints(controller)
    short = command_msg(SafeCommand(12, 3, np.array([1.0, 2.0]), "passed"))
    with pytest.raises(ValidationError, match=r"policy\.command: expected 3 values, got 2 values"):
        r.command(short)
    with pytest.raises(ConfigError, match=r"safety\.command_joints: \['j3', 'j1'\] is not an order of this stage's "
                                          r"joints \['j1', 'j2', 'j3'\]; missing \['j2'\]"):
        CommandOrder.of("j3,j1", robot, "safety.command_joints", sends=True)
    with pytest.raises(ConfigError, match=r"extra \['j4'\]"):  # a sender commands every joint it lists
        CommandOrder.of("j3,j1,j2,j4", robot, "safety.command_joints", sends=True)
    with pytest.raises(ConfigError, match=r"twice \['j1'\]"):
        CommandOrder.of("j1,j1,j2,j3", robot, "sim_robot.command_joints")
    assert CommandOrder.of("j1,j2,j3", robot, "x", sends=True).to_wire is None  # the robot's own order: no map


def test_a_goal_in_another_frame_than_the_robots_base_is_refused_naming_both():
    from geometry_msgs.msg import PointStamped

    from tinker.robot_model import RobotModel
    from tinker.wire import Reader
    from tinker_core.errors import ValidationError

    base = RobotModel().root
    assert base == "lbr_iiwa_link_0"  # the KUKA iiwa's root link
    r = Reader("perception", base_frame=base)
    msg = PointStamped()
    msg.point.x, msg.point.y, msg.point.z = 0.5, 0.1, 0.3
    for frame in ("", base, f"robot1/{base}"):  # unnamed, the base link, a fleet's prefixed base link
        msg.header.frame_id = frame
        assert r.goal(msg).point.tolist() == [0.5, 0.1, 0.3]
    msg.header.frame_id = "world"
    with pytest.raises(ValidationError, match=r"perception\.goal\.header\.frame_id: expected the robot's base frame "
                                              r"'lbr_iiwa_link_0' \(or empty\), got 'world' \(transform the goal"):
        r.goal(msg)


def test_every_topic_is_declared_once_with_its_type_and_qos():
    from rclpy.qos import ReliabilityPolicy

    from tinker.wire import TOPICS
    from tinker_core.loop.graph import ROBOT_LOOP

    names = [t.name for t in TOPICS.values()]
    assert len(set(names)) == len(names)
    assert set(TOPICS) == {e.port for e in ROBOT_LOOP.topics}  # one wire format per edge of the loop's graph
    # state: best effort, so a reliable publisher (a ros2_control broadcaster) and a best-effort one both connect
    assert TOPICS["joint_states"].qos.reliability == ReliabilityPolicy.BEST_EFFORT
    assert TOPICS["command"].type.__name__ == "Float64MultiArray"  # what forward_command_controller reads
    assert TOPICS["goal"].type.__name__ == "PointStamped"
    assert TOPICS["command_latency"].qos.durability == TOPICS["estop_state"].qos.durability  # latched: a restarted
    # perception hears the latency taken before it started


def test_a_node_can_only_publish_and_subscribe_the_edges_the_loops_graph_gives_it(ros2):
    """`NodeRuntime.subscribe` / ``advertise`` go through `tinker_core.loop.graph.ROBOT_LOOP`: a node that would grow
    an edge the description lacks (the policy publishing the robot's command) stops, naming what it may use."""
    import rclpy

    from tinker.policy import PolicyNode
    from tinker_core.errors import PipelineError

    ctx = rclpy.Context()
    rclpy.init(context=ctx, domain_id=ros2.fresh_domain())
    node = PolicyNode(context=ctx)
    try:
        with pytest.raises(PipelineError, match=r"stage 'policy' cannot publish 'command': the graph gives it "
                                                r"\['joint_target', 'raw_action', 'tool_command'\]"):
            node.advertise("command_topic", "command")
        with pytest.raises(PipelineError, match=r"stage 'policy' cannot subscribe 'task'"):
            node.subscribe("features_topic", "task", lambda m: None)
        assert node.advertise("command_topic", "joint_target").topic_name.endswith("policy/joint_target")
    finally:
        node.destroy_node()
        rclpy.shutdown(context=ctx)
