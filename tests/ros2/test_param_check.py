"""A graph's parameters are checked against what its nodes declare before any node starts: ROS 2 itself ignores an
undeclared name (a typo, or ``hold_estimate`` from before it became ``estimate``) and stops a node with a traceback
on a value of the wrong type."""

from __future__ import annotations


from pathlib import Path

import pytest
import yaml

from tinker.bringup import NODES, VIEW_NODE, Graph, default_params_file
from tinker.param_check import check_params_file, declared, typed_argument
from tinker_core.errors import ConfigError

ALL = [*NODES, VIEW_NODE]


def test_the_shipped_parameter_file_names_only_declared_parameters_of_the_declared_types():
    check_params_file(default_params_file(), ALL)
    data = yaml.safe_load(default_params_file().read_text())
    for node in ALL:  # and every declared parameter of a tinker node is in the file, with its default's type
        given = {**data["/**"]["ros__parameters"], **data[f"/**/{node}"]["ros__parameters"]}
        missing = sorted(set(declared()[node]) - set(given))
        assert not missing, f"{node}: declared but not in bringup.yaml: {missing}"


@pytest.mark.parametrize("overrides, message", [
    ({"perception": {"hold_estimate": True}}, r"perception.hold_estimate: no such parameter \(did you mean estimate\?\)"),
    ({"perception": {"estimate": True}}, r"perception.estimate: expected a string like its default 'auto', got True"),
    ({"/**": {"contrl_period": 0.05}}, r"/\*\*.contrl_period: no such parameter \(did you mean control_period\?\)"),
    ({"safety": {"hold_deadline": 2.0}}, r"safety.hold_deadline: 2.0 is outside its range \[0.05, 0.95\]"),
    ({"sim_robot": {"seed": 1.5}}, r"sim_robot.seed: expected an integer like its default 0, got 1.5"),
    ({"/**": {"camera_rate_hz": "fast"}}, r"/\*\*.camera_rate_hz \(for sim_robot\): expected a number"),
])
def test_a_parameter_no_node_takes_is_refused_before_anything_starts(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        Graph(overrides=overrides, run_dir=tmp_path)
    assert not any(tmp_path.iterdir())  # refused in the constructor: no process, no file


def test_a_users_parameter_file_is_checked_too(tmp_path):
    data = yaml.safe_load(default_params_file().read_text())
    data["/**/policy"]["ros__parameters"]["on_overun"] = "stop"
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"policy.on_overun: no such parameter \(did you mean on_overrun\?\)"):
        check_params_file(path, NODES)


VISION = str(Path(__file__).resolve().parents[2] / "pretrained" / "arm_reach_vision")


@pytest.mark.parametrize("perception, hold_target, message", [
    ({"estimate": "per_frame"}, False, r"sensor_hold_target: False does not pair with perception, which estimates per "
                                       r"frame \(estimate: per_frame\); set experience_bridge.sensor_hold_target: True"),
    ({"task_synced": False}, False, r"which estimates per frame \(estimate: auto, task_synced: false\)"),
    ({}, True, r"sensor_hold_target: True does not pair with perception, which holds its estimate over each episode"),
    ({"task_synced": False, "estimate": "held"}, True, r"perception.estimate: held needs the episodes"),
])
def test_a_success_sensor_that_contradicts_perceptions_estimate_is_refused(tmp_path, perception, hold_target, message):
    bridge = {"reward_source": "sensors", "sensor_hold_target": hold_target}
    with pytest.raises(ConfigError, match=message):
        Graph(overrides={"perception": {"bundle": VISION, **perception}, "experience_bridge": bridge}, run_dir=tmp_path)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("perception, hold_target", [({}, False), ({"estimate": "per_frame"}, True),
                                                     ({"task_synced": False}, True)])
def test_the_pairings_that_agree_pass(perception, hold_target):
    check_params_file(default_params_file(), ALL, {"perception": {"bundle": VISION, **perception},
                                                   "experience_bridge": {"reward_source": "sensors",
                                                                         "sensor_hold_target": hold_target}})


def test_perception_and_the_policy_compensate_the_same_latency_over_a_safe_command_they_can_read():
    check_params_file(default_params_file(), ALL, {"/**": {"latency_compensation": 4}})  # set once: both agree
    with pytest.raises(ConfigError, match="latency_compensation: perception 4, policy 0, safety 0"):
        check_params_file(default_params_file(), ALL, {"perception": {"latency_compensation": 4}})
    with pytest.raises(ConfigError, match="perception 4, policy 4, safety 0"):  # it compares with what it measures
        check_params_file(default_params_file(), ALL, {"perception": {"latency_compensation": 4},
                                                       "policy": {"latency_compensation": 4}})
    # over a joint_trajectory_controller too: perception and the policy hear the JointTrajectory by joint name
    check_params_file(default_params_file(), ALL, {"/**": {"latency_compensation": 4,
                                                           "command_type": "joint_trajectory"}})
    # following the latency safety measures: all three, or none
    check_params_file(default_params_file(), ALL, {"/**": {"latency_auto": True}})
    with pytest.raises(ConfigError, match=r"latency_auto: perception False, policy False, safety True; safety sends "
                                          r"the latency it measures to perception"):
        check_params_file(default_params_file(), ALL, {"safety": {"latency_auto": True}})


def test_every_node_that_sends_runs_or_hears_the_safe_command_takes_one_message_type():
    check_params_file(default_params_file(), ALL, {"/**": {"command_type": "joint_trajectory"}})  # set once
    with pytest.raises(ConfigError, match=r"command_type: sim_robot float64_array, .*safety joint_trajectory.*"
                                          r"set it once, in the launch YAML's /\*\* section"):
        check_params_file(default_params_file(), ALL, {"safety": {"command_type": "joint_trajectory"}})
    with pytest.raises(ConfigError, match=r"experience_bridge.command_type: expected one of \['float64_array', "
                                          r"'joint_trajectory'\], got 'twist'"):
        check_params_file(default_params_file(), ALL, {"experience_bridge": {"command_type": "twist"}})


def test_the_float64_array_commands_joint_order_is_one_for_every_node_and_only_for_that_type():
    order = ",".join(f"lbr_iiwa_joint_{i}" for i in range(7, 0, -1))
    check_params_file(default_params_file(), ALL, {"/**": {"command_joints": order}})  # set once
    with pytest.raises(ConfigError, match=r"command_joints: sim_robot '', .*safety 'lbr_iiwa_joint_7,.*set it once"):
        check_params_file(default_params_file(), ALL, {"safety": {"command_joints": order}})
    with pytest.raises(ConfigError, match=r"with command_type joint_trajectory, whose message names its joints"):
        check_params_file(default_params_file(), ALL, {"/**": {"command_joints": order,
                                                               "command_type": "joint_trajectory"}})


def test_use_sim_time_true_is_refused_before_anything_starts():
    """rclpy declares use_sim_time on every node; tinker's stamps are the system clock's, and nothing publishes
    /clock: a launch YAML or override that sets it true stops the launch, named (false is taken)."""
    check_params_file(default_params_file(), ALL, {"/**": {"use_sim_time": False}})
    for overrides, where in (({"/**": {"use_sim_time": True}}, r"/\*\*\.use_sim_time"),
                             ({"safety": {"use_sim_time": True}}, r"safety\.use_sim_time")):
        with pytest.raises(ConfigError, match=where + r": use_sim_time stays false: tinker's nodes stamp"):
            check_params_file(default_params_file(), ALL, overrides)


def test_a_launch_argument_takes_its_parameters_type_from_the_nodes_tables():
    """``ros2 launch tinker bringup.launch.py latency_compensation:=4 latency_auto:=true command_type:=...``: each
    argument (text) becomes its parameter's type, checked against its range, before any node starts."""
    assert typed_argument("latency_compensation", "4") == 4
    assert typed_argument("latency_auto", "true") is True and typed_argument("latency_auto", "false") is False
    assert typed_argument("command_type", "joint_trajectory") == "joint_trajectory"
    assert typed_argument("command_joints", "j2,j1") == "j2,j1"  # text stays text
    for name, text, message in (("latency_auto", "maybe", r"latency_auto:=maybe: expected a boolean"),
                                ("latency_compensation", "4.5", r"latency_compensation:=4.5: expected an integer"),
                                ("latency_compensation", "99", r"latency_compensation:=99: 99 is outside its range"),
                                ("latency_compensaton", "4", r"no such parameter \(did you mean latency_compensation")):
        with pytest.raises(ConfigError, match=message):
            typed_argument(name, text)
