"""The parameters of the graph's nodes: every key of bringup.yaml is declared by its node, and every
parameter any node declares has a ParameterDescriptor that a ROS user can read (description; a number its
range; read-only where a change needs a restart). Real nodes in this process (rclpy, their own context and
domain), built from the launch YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

NODES = {"perception": "PerceptionNode", "policy": "PolicyNode", "experience_bridge": "ExperienceBridgeNode"}
ALL_NODES = {**NODES, "safety": "SafetyNode", "sim_robot": "SimRobotNode", "view": "ViewNode"}
"""every node class of the package (`tinker.bringup.NODES` and the view)"""
BUILT_IN = {"use_sim_time"}
"""rclpy's own parameter, declared by every node (no description of ours)"""


@pytest.fixture(scope="module")
def nodes(ros2):
    import importlib

    import rclpy
    from rclpy.context import Context
    from rclpy.signals import SignalHandlerOptions

    from tinker.bringup import default_params_file

    ctx = Context()
    rclpy.init(context=ctx, domain_id=ros2.fresh_domain(), signal_handler_options=SignalHandlerOptions.NO,
               args=["--ros-args", "--params-file", str(default_params_file())])
    made = {n: getattr(importlib.import_module(f"tinker.{n}"), cls)(context=ctx) for n, cls in NODES.items()}
    yield made
    for n in made.values():
        n.close_runtime()
        n.destroy_node()
    rclpy.shutdown(context=ctx)


@pytest.fixture(scope="module")
def each_node(ros2):
    """A builder of any node class from the launch YAML (sim_robot without its camera: no render process)."""
    import importlib

    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter
    from rclpy.signals import SignalHandlerOptions

    from tinker.bringup import default_params_file

    ctx = Context()
    rclpy.init(context=ctx, domain_id=ros2.fresh_domain(), signal_handler_options=SignalHandlerOptions.NO,
               args=["--ros-args", "--params-file", str(default_params_file())])
    made = []

    def build(name: str):
        kw = {"parameter_overrides": [Parameter("camera", value=False)]} if name == "sim_robot" else {}
        made.append(getattr(importlib.import_module(f"tinker.{name}"), ALL_NODES[name])(context=ctx, **kw))
        return made[-1]

    yield build
    for n in made:
        n.close_runtime()
        n.destroy_node()
    rclpy.shutdown(context=ctx)


def _section(name: str) -> dict:
    import yaml

    from tinker.bringup import default_params_file

    doc = yaml.safe_load(default_params_file().read_text())
    return (doc.get(name) or {}).get("ros__parameters", {})


def test_every_key_for_all_nodes_is_declared_by_the_nodes_it_serves(nodes):
    """``/**`` keys go to every node; each must be one a node reads (``camera_rate_hz``: perception and
    sim_robot; the rest: every node, `tinker.runtime.RUNTIME_PARAMS`)."""
    from tinker.runtime import RUNTIME_PARAMS

    shared = set(_section("/**"))
    assert set(RUNTIME_PARAMS) <= shared
    for key in shared:
        users = [n for n, node in nodes.items() if node.has_parameter(key)]
        assert users, f"bringup.yaml /** key {key!r} is declared by none of {list(nodes)}"
        if key in RUNTIME_PARAMS:
            assert users == list(nodes)


@pytest.mark.parametrize("name", list(NODES))
def test_every_yaml_key_is_declared_with_a_description(nodes, name):
    from tinker.bringup import default_params_file, node_parameters

    node = nodes[name]
    keys = set(_section(f"/**/{name}"))
    assert keys, f"bringup.yaml has no /**/{name} section"
    undeclared = sorted(k for k in keys if not node.has_parameter(k))
    assert not undeclared, f"{name}: bringup.yaml keys its node never declares: {undeclared}"
    for k in keys - {"bundle"}:  # an empty bundle shows the default that runs (the test below)
        assert node.get_parameter(k).value == node_parameters(default_params_file(), name)[k]  # the YAML's value ran
    own = [p for p in node._parameters if not p.startswith("qos_overrides") and p != "use_sim_time"]
    missing = [p for p in own if not node.describe_parameter(p).description]
    assert not missing, f"{name}: parameters without a description: {missing}"


@pytest.mark.parametrize("name", ALL_NODES)
def test_every_parameter_any_node_declares_has_a_description_and_a_number_its_range(each_node, name):
    """What ``ros2 param describe`` shows a user, for every parameter of every node (`tinker.runtime`'s too)."""
    node = each_node(name)
    own = [p for p in node._parameters if not p.startswith("qos_overrides") and p not in BUILT_IN]
    assert {"control_period", "input_timeout", "input_startup_grace"} <= set(own)
    missing = [p for p in own if not node.describe_parameter(p).description.strip()]
    assert not missing, f"{name}: parameters without a description: {missing}"
    numbers = [p for p in own if type(node.get_parameter(p).value) in (int, float)]
    unbounded = [p for p in numbers
                 if not (node.describe_parameter(p).floating_point_range or node.describe_parameter(p).integer_range)]
    assert not unbounded, f"{name}: numeric parameters without a range: {unbounded}"


def test_the_view_joins_a_safe_command_sent_as_a_joint_trajectory_into_its_cycle(each_node):
    """The view's recording and live view take the command of either type (its handler called directly here, with
    the message safety sends: a graph over a joint_trajectory_controller is `tests/ros2/test_attacks.py`'s)."""
    import numpy as np

    from tinker.wire import command_meta, trajectory_msg
    from tinker_core.loop.edges import SafeCommand

    view = each_node("view")
    names = [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]
    sent = SafeCommand(1_000_123, 4, np.arange(7.0), "rate_limited: joint 2", "v1")
    view._on_command(trajectory_msg(names, sent.q, command_meta(sent), 0.05), 1_000_200)
    rec = view.join.pending_record(1_000_123)
    assert rec is not None and rec["safety_status"] == "rate_limited: joint 2" and rec["command_recv_ns"] == 1_000_200
    assert rec["safe_command"].tolist() == list(range(7))


def test_the_input_limits_take_effect_at_once_and_out_of_range_is_refused(nodes):
    from rclpy.parameter import Parameter

    policy = nodes["policy"]
    r = policy.set_parameters([Parameter("input_timeout", value=0.0)])[0]
    assert not r.successful and "input_timeout" in r.reason
    assert policy.set_parameters([Parameter("input_timeout", value=2.5)])[0].successful
    assert policy.inputs.timeout_s == 2.5  # took effect
    assert policy.set_parameters([Parameter("input_timeout", value=0.5)])[0].successful
    assert policy.set_parameters([Parameter("input_startup_grace", value=3.0)])[0].successful
    assert policy.inputs.startup_grace_s == 3.0


def test_a_change_out_of_range_or_to_a_read_only_parameter_is_refused_with_the_reason(nodes):
    from rclpy.parameter import Parameter

    perception = nodes["perception"]
    r = perception.set_parameters([Parameter("max_frame_age", value=-1.0)])[0]
    assert not r.successful and "max_frame_age" in r.reason
    r = perception.set_parameters([Parameter("control_period", value=0.001)])[0]
    assert not r.successful and "read-only" in r.reason
    r = perception.set_parameters([Parameter("max_frame_age", value=0.5)])[0]
    assert r.successful and perception.cycle.max_frame_age_ns == 500_000_000  # took effect
    r = nodes["policy"].set_parameters([Parameter("on_overrun", value="panic")])[0]
    assert not r.successful and "expected 'hold' or 'stop', got 'panic'" in r.reason


def test_the_calibration_deadband_is_a_parameter_a_person_can_tune_while_it_runs(each_node):
    """A real camera's hand error may differ from the simulated one: the deadband of the held estimate's camera
    calibration is the perception node's ``calibration_deadband`` (m, 0..0.5), the library's default in the YAML,
    taken by a model loaded later and by the running one from its next cycle."""
    from rclpy.parameter import Parameter

    from tinker_core.loop.held_estimate import CALIBRATION_DEADBAND_M

    perception = each_node("perception")
    assert perception.get_parameter("calibration_deadband").value == CALIBRATION_DEADBAND_M  # YAML = the default
    assert perception.set_parameters([Parameter("calibration_deadband", value=0.03)])[0].successful
    vision = str(REPO / "pretrained" / "arm_reach_vision")
    assert perception.set_parameters([Parameter("bundle", value=vision)])[0].successful
    assert perception.cycle.hand is not None and perception.cycle.hold.deadband_m == 0.03  # a model loaded later
    assert perception.set_parameters([Parameter("calibration_deadband", value=0.05)])[0].successful
    assert perception.cycle.hold.deadband_m == 0.05  # the running one
    r = perception.set_parameters([Parameter("calibration_deadband", value=-0.01)])[0]
    assert not r.successful and "calibration_deadband" in r.reason and perception.cycle.hold.deadband_m == 0.05


def test_an_empty_bundle_runs_the_shipped_default_and_says_which(nodes):
    from pathlib import Path

    bundle = Path(nodes["perception"].get_parameter("bundle").value)
    assert bundle.parts[-3:] == ("pretrained", "arm_reach", "bundle") and (bundle / "manifest.json").is_file()


def test_a_nodes_status_names_each_input_waits_for_it_during_the_grace_then_errors(nodes):
    """The runtime's input watch as /diagnostics shows it (no message has come: nothing publishes here)."""
    from diagnostic_msgs.msg import DiagnosticStatus
    from rclpy.parameter import Parameter

    perception, bridge = nodes["perception"], nodes["experience_bridge"]
    js, teleop = perception.resolve_topic_name("joint_states"), bridge.resolve_topic_name("safety/intervened")
    st = perception.diagnostics()
    values = {kv.key: kv.value for kv in st.values}
    assert values[f"input_age_s.{js}"] == "never"
    assert {kv.key: kv.value for kv in bridge.diagnostics().values}[f"input_age_s.{teleop}"] == "never"
    assert st.level == DiagnosticStatus.WARN and f"waiting for {js}" in st.message, st.message
    try:
        for node in (perception, bridge):
            assert node.set_parameters([Parameter("input_startup_grace", value=0.0)])[0].successful
        st = perception.diagnostics()
        assert st.level == DiagnosticStatus.ERROR and f"{js}: no message in" in st.message, st.message
        assert teleop not in bridge.diagnostics().message  # only when a person takes over: its age is never judged
    finally:
        for node in (perception, bridge):
            node.set_parameters([Parameter("input_startup_grace", value=20.0)])


@pytest.mark.parametrize("task,camera,dynamics,refused", [
    ("reach", False, "shifted_camera", "camera_shift_m = 0.08: the policy's observation has no camera image"),
    ("reach", False, "worn_robot", "friction = 0.8: friction acts only through contact with task bodies"),
    ("sort", False, "shifted_miscalibrated", "target_bias_x_m = 0.04: it biases the reach target the robot is told"),
    ("sort", False, "worn_robot", None),
    ("reach", False, "far_latency_reach", None),
])
def test_sim_robot_refuses_a_dynamics_key_it_cannot_act_on_at_start(ros2, task, camera, dynamics, refused):
    """Read-only, at construction (before the robot exists or a loop runs): a key the robot cannot act on with its
    task and camera setting is a ConfigError that names it and why; one it can act on starts the robot."""
    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter
    from rclpy.signals import SignalHandlerOptions

    from tinker.bringup import default_params_file
    from tinker.sim_robot import SimRobotNode
    from tinker_sim.dynamics import DYNAMICS_DIR
    from tinker_core.errors import ConfigError

    ctx = Context()
    rclpy.init(context=ctx, domain_id=ros2.fresh_domain(), signal_handler_options=SignalHandlerOptions.NO,
               args=["--ros-args", "--params-file", str(default_params_file())])
    path = str(DYNAMICS_DIR / f"{dynamics}.yaml")
    overrides = [Parameter("camera", value=camera), Parameter("task", value=task), Parameter("dynamics", value=path)]
    try:
        if refused:
            with pytest.raises(ConfigError, match="cannot act on the " + task + " task") as e:
                SimRobotNode(context=ctx, parameter_overrides=overrides)
            assert refused in str(e.value) and f"sim_robot.dynamics {path}" in str(e.value)
        else:
            node = SimRobotNode(context=ctx, parameter_overrides=overrides)
            assert node.env.unwrapped.fixed_dynamics is not None
            node.close_runtime()
            node.destroy_node()
    finally:
        rclpy.shutdown(context=ctx)
