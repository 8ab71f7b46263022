"""Joint limits from the URDF and the SafetyConfig YAML: values, order, and errors that name the field."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_safety import DEFAULT_CONFIG_PATH, JointLimits, SafetyConfig, ScenePrimitive, default_urdf, load_safety_config
from tinker_core.config import load_config
from tinker_core.errors import ConfigError

BRANCHED = """<robot name="two_arms">
  <link name="base"/><link name="a1"/><link name="a2"/><link name="b1"/><link name="tool"/>
  <joint name="b_joint" type="prismatic"><parent link="base"/><child link="b1"/>
    <limit lower="0" upper="0.3" velocity="0.2" effort="50"/></joint>
  <joint name="a_joint_2" type="revolute"><parent link="a1"/><child link="a2"/>
    <limit lower="-1" upper="1" velocity="2" effort="10"/></joint>
  <joint name="a_joint_1" type="revolute"><parent link="base"/><child link="a1"/>
    <limit lower="-2" upper="2" velocity="3" effort="20"/></joint>
  <joint name="tool_fixed" type="fixed"><parent link="a2"/><child link="tool"/></joint>
</robot>"""


def test_kuka_limits_come_from_the_urdf(joints):
    lim = JointLimits.from_urdf(default_urdf())
    assert lim.names == joints and lim.dof == 7
    assert lim.upper[1] == pytest.approx(2.09439510239) and lim.lower[6] == pytest.approx(-3.05432619099)
    assert np.all(lim.velocity == 10.0) and np.all(lim.effort == 300.0)
    assert lim.links[-1] == "lbr_iiwa_link_7" and lim.units == ["rad"] * 7
    with pytest.raises(ValueError):
        lim.lower[0] = 0.0  # limits are read-only


def test_chain_order_selection_and_units(tmp_path):
    path = tmp_path / "branched.urdf"
    path.write_text(BRANCHED)
    lim = JointLimits.from_urdf(path)
    # depth first from the root link, children in file order; fixed joints carry no limits
    assert lim.names == ["b_joint", "a_joint_1", "a_joint_2"]
    assert lim.units == ["m", "rad", "rad"]
    picked = JointLimits.from_urdf(path, ["a_joint_2", "b_joint"])
    assert picked.names == ["a_joint_2", "b_joint"] and picked.upper.tolist() == [1.0, 0.3]
    with pytest.raises(ConfigError, match=r"joint\(s\) \['tool_fixed', 'nope'\] are not revolute/prismatic"):
        JointLimits.from_urdf(path, ["tool_fixed", "nope"])


@pytest.mark.parametrize("urdf, message", [
    ("<robot><link name='a'/><link name='b'/><joint name='j' type='revolute'><parent link='a'/>"
     "<child link='b'/></joint></robot>", "joint j: revolute joint without a <limit> element"),
    ("<robot><link name='a'/><link name='b'/><joint name='j' type='revolute'><parent link='a'/><child link='b'/>"
     "<limit lower='0' upper='1' effort='1'/></joint></robot>", "joint j: <limit> has no 'velocity' attribute"),
    ("<robot><link name='a'/><link name='b'/><joint name='j' type='revolute'><parent link='a'/><child link='b'/>"
     "<limit lower='1' upper='0' velocity='1' effort='1'/></joint></robot>", "expected lower < upper, got lower 1, upper 0"),
    ("<robot><link name='a'/></robot>", "no revolute or prismatic joint"),
    ("<robot><link", "not valid URDF XML"),
])
def test_bad_urdf_is_refused_with_the_joint_named(tmp_path, urdf, message):
    path = tmp_path / "bad.urdf"
    path.write_text(urdf)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        JointLimits.from_urdf(path)
    with pytest.raises(ConfigError, match="URDF file not found"):
        JointLimits.from_urdf(tmp_path / "missing.urdf")


def test_shipped_yaml_loads_through_tinker_core():
    config = load_config(SafetyConfig, DEFAULT_CONFIG_PATH)
    assert config == load_safety_config()
    assert config.scene == [ScenePrimitive("table", "box", [2.4, 2.4, 0.05], [0.0, 0.0, -0.025], [0.0, 0.0, 0.0])]
    assert config.workspace_enabled and config.control_period == 0.05 and config.watchdog_timeout == 0.05
    assert config.self_collision_ignore == [["lbr_iiwa_link_5", "lbr_iiwa_link_7"]]


@pytest.mark.parametrize("values, message", [
    ({"velocity_scale": 0}, r"SafetyConfig.velocity_scale: expected a finite number > 0, got 0"),
    ({"velocity_scale": 1.5}, r"must be <= 1"),
    ({"workspace_min": [0, 0, 0]}, r"workspace_min and workspace_max must be given together"),
    ({"workspace_min": [0, 0, 1], "workspace_max": [1, 1, 1]}, r"expected workspace_min < workspace_max"),
    ({"accel_limit": [1.0, -2.0]}, r"accel_limit: expected values > 0"),
    ({"scene": [{"name": "t", "shape": "cone"}]}, r"ScenePrimitive 't'.shape: expected one of"),
    ({"scene": [{"name": "t", "shape": "box", "size": [1, 1]}]}, r"ScenePrimitive 't'.size: expected 3 numbers"),
    ({"scene": [{"name": "t", "shape": "sphere", "size": [1], "colour": "red"}]}, r"scene\[0\]: unknown key"),
    ({"watchdog_misses_to_estop": 0}, r"watchdog_misses_to_estop: expected an integer >= 1, got 0"),
    ({"self_collision_ignore": [["a"]]}, r"expected pairs of link names"),
    ({"margin": 0.1}, r"unknown key\(s\) \['margin'\]"),
])
def test_bad_config_names_the_field(values, message):
    with pytest.raises(ConfigError, match=message):
        load_safety_config(values)


def test_config_against_the_robot_is_checked_when_the_wrapper_is_built(make_guard):
    with pytest.raises(ConfigError, match=r"position_margin: 2.1 leaves no range on joint lbr_iiwa_joint_2"):
        make_guard(position_margin=2.1)
    with pytest.raises(ConfigError, match=r"accel_limit: expected 1 or 7 values"):
        make_guard(accel_limit=[1.0, 2.0])
    with pytest.raises(ConfigError, match=r"ee_link: no link 'gripper'"):
        make_guard(ee_link="gripper")
    with pytest.raises(ConfigError, match=r"self_collision_ignore: no link\(s\) \['flange'\]"):
        make_guard(self_collision_ignore=[["flange", "lbr_iiwa_link_7"]])
