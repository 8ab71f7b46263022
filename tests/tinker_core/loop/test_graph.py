"""The robot loop's one description (`tinker_core.loop.graph`): who publishes what, the cycle's path, the order the
commanding stages are activated in, and the errors a wrong description or a wrong use of it gets."""

from __future__ import annotations

import pytest

from tinker_core.errors import PipelineError
from tinker_core.loop.graph import OUTSIDE, ROBOT, ROBOT_LOOP, LoopGraph


def test_a_cycle_runs_robot_perception_policy_safety_and_safety_is_activated_first():
    assert [s.name for s in ROBOT_LOOP.command_path(ROBOT)] == [ROBOT, "perception", "policy", "safety"]
    assert ROBOT_LOOP.activation_order(ROBOT) == ("safety", "policy")
    assert ROBOT_LOOP.start_order[0] == ROBOT
    assert set(ROBOT_LOOP.start_order) == {s.name for s in ROBOT_LOOP.stages} - {"learner"}  # bringup starts nodes
    cycle = [e.port for e in ROBOT_LOOP.edges if e.every_cycle]
    assert cycle == ["joint_states", "features", "joint_target", "command"]


def test_each_stage_sees_only_its_edges_and_the_bridge_hears_every_stream_of_a_cycle():
    assert {e.port for e in ROBOT_LOOP.outputs("safety")} == {"command", "intervened", "estop_state",
                                                              "command_latency"}  # measured: latency_auto
    assert ROBOT_LOOP.edge("command_latency").targets == ("perception",)  # the policy follows perception's features
    assert {e.port for e in ROBOT_LOOP.inputs("policy")} == {"features", "joint_states", "command"}  # command: compensating latency
    bridge = {e.port for e in ROBOT_LOOP.inputs("experience_bridge")}
    assert {"task", "features", "raw_action", "joint_target", "command"} <= bridge
    goal = ROBOT_LOOP.edge("goal")
    assert goal.source == OUTSIDE and str(goal) == "(outside) -> sim_robot, perception (goal)"
    assert ROBOT_LOOP.check_port("policy", "joint_target", "out").targets == ("safety", "experience_bridge")
    with pytest.raises(PipelineError, match=r"stage 'policy' cannot publish 'command': the graph gives it "
                                            r"\['joint_target', 'raw_action', 'tool_command'\]"):
        ROBOT_LOOP.check_port("policy", "command", "out")
    with pytest.raises(PipelineError, match=r"stage 'perception' cannot subscribe 'joint_target'"):
        ROBOT_LOOP.check_port("perception", "joint_target", "in")
    with pytest.raises(PipelineError, match=r"no edge 'odom'; edges: \['joint_states'"):
        ROBOT_LOOP.edge("odom")


def test_a_wrong_description_is_refused_where_it_is_written():
    g = LoopGraph("g").add("a", "source").add("b", "sink", commanding=True)
    with pytest.raises(PipelineError, match=r"g.connect\('x'\): unknown stage\(s\) \['c'\]; stages: \['a', 'b'\]"):
        g.connect("a", "x", "c")
    g.connect("a", "x", "b", every_cycle=True)
    with pytest.raises(PipelineError, match=r"port 'x' is already the edge a -> b \(x\)"):
        g.connect("b", "x", "a")
    with pytest.raises(PipelineError, match="at least one stage"):
        g.connect("a", "y")
    with pytest.raises(PipelineError, match="stage 'a' is already in the graph"):
        g.add("a", "again")
    g.connect("b", "back", "a", every_cycle=True)
    assert [s.name for s in g.command_path("a")] == ["a", "b"] and g.activation_order("a") == ("b",)
    # a stage off the cycle (it never leads back to the start) is not on the command path
    g2 = LoopGraph("g2").add("r", "robot").add("p", "p").add("log", "log")
    g2.connect("r", "s", "log", "p", every_cycle=True).connect("p", "c", "r", every_cycle=True)
    assert [s.name for s in g2.command_path("r")] == ["r", "p"]


def test_the_learner_is_a_stage_reached_over_zeromq_and_its_edges_are_no_topics():
    learner = next(s for s in ROBOT_LOOP.stages if s.name == "learner")
    assert not learner.node and "learner" not in ROBOT_LOOP.start_order
    assert {(e.port, e.transport) for e in ROBOT_LOOP.inputs("learner") + ROBOT_LOOP.outputs("learner")} == {
        ("transitions", "zmq"), ("bundles", "zmq")}
    assert str(ROBOT_LOOP.edge("transitions")) == "experience_bridge -> learner (transitions)"
    assert {e.port for e in ROBOT_LOOP.topics} == {e.port for e in ROBOT_LOOP.edges} - {"transitions", "bundles"}
    g = LoopGraph("g").add("a", "node").add("far", "a process", node=False)
    with pytest.raises(PipelineError, match=r"g.connect\('x'\): \['far'\] is not a ROS node: the edge needs "
                                            r"transport='zmq'"):
        g.connect("a", "x", "far")
    with pytest.raises(PipelineError,
                       match=r"g.connect\('x'\): transport 'udp'; expected one of \('ros', 'zmq', 'process'\)"):
        g.connect("a", "x", "far", transport="udp")
    g.connect("a", "x", "far", transport="zmq")
    assert g.start_order == ("a",) and g.topics == ()
