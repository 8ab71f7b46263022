"""`GuardSession`: the safety node's life around its cycle, without ROS (real SafetyWrapper from the shipped YAML and
URDF, real StateGate and Takeover); the host records what the node would publish."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.errors import ConfigError
from tinker_core.loop.input_ages import Level
from tinker_safety.guard_cycle import Command
from tinker_safety.guard_session import GuardSession

HOME = np.array([0.0, 0.5, 0.0, -1.0, 0.0, 1.0, 0.0])
GATE = (0.5, 0.1, 0.2, 0.5)
NOW = 1_000_000_000_000


class Host:
    def __init__(self):
        self.sent: list[Command] = []
        self.estop_changes = 0

    def send(self, command):
        self.sent.append(command)

    def arm_deadline(self):
        pass

    def cancel_deadline(self):
        pass

    def log(self, level, message):
        pass

    def estop_changed(self):
        self.estop_changes += 1

    def expect_commands(self, expected, arrived):
        pass


@pytest.fixture
def session():
    s = GuardSession(Host())
    yield s
    s.release()


def _configured(s: GuardSession, period: float = 0.05, teleop: str = "") -> GuardSession:
    s.configure(None, None, period, "/joint_states", GATE, teleop, (0.2, 0.1))
    return s


def _trusted_state(s: GuardSession) -> None:
    s.cycle.state(HOME, np.zeros(7), NOW, 1, None, 1, NOW, 5_000_000_000)


def test_an_unknown_command_type_is_refused_naming_the_choices():
    with pytest.raises(ConfigError, match=r"safety.command_type: expected one of \['float64_array', "
                                          r"'joint_trajectory'\], got 'ros1'"):
        GuardSession(Host(), "ros1")


def test_configure_builds_the_wrapper_at_the_nodes_period_and_names_the_joints(session):
    _configured(session, period=0.02)
    cfg = session.cycle.guard.config
    assert cfg.control_period == 0.02 and cfg.watchdog_timeout == 0.02  # the YAML's "one period" follows the node
    assert session.names == [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]
    assert session.cycle.takeover is None  # no teleop topic: nothing can take over
    assert _configured(GuardSession(Host()), teleop="/teleop").cycle.takeover is not None


def test_an_estop_latched_before_cleanup_is_latched_again_at_configure_until_reset(session):
    _configured(session)
    _trusted_state(session)
    assert session.estop("~/estop service call") == (True, "e-stop latched")
    session.release()
    assert "~/estop service call" in session.estop_carry
    _configured(session)
    assert session.cycle.guard.estopped and "latched before cleanup" in session.estop_reason()
    assert session.level()[0] == Level.ERROR
    _trusted_state(session)
    ok, message = session.reset()
    assert ok and "cleared" in message and session.estop_carry == "" and session.estop_reason() == ""


def test_the_estop_and_reset_calls_need_a_configured_node_and_a_measured_pose(session):
    assert session.estop("x") == (False, "not configured")
    ok, message = session.reset()
    assert not ok and "measured pose" in message


def test_urdf_and_config_change_only_while_unconfigured_and_must_name_a_file(session, tmp_path):
    assert "file not found: /no/such.yaml" in session.param_refusal("config", "/no/such.yaml")
    (tmp_path / "s.yaml").write_text("{}")
    assert session.param_refusal("config", str(tmp_path / "s.yaml")) == ""
    assert session.param_refusal("urdf", "") == ""  # '' = the default
    _configured(session)
    assert "deactivate and cleanup first" in session.param_refusal("urdf", "")
    assert session.param_refusal("hold_deadline", 0.9) == ""  # not a configure-time parameter


def test_a_teleop_cycle_is_recorded_with_the_pose_it_was_judged_at(session):
    """(The command's wire metadata: tests/ros2/test_wire.py.)"""
    q, teleop, measured = np.ones(7), np.full(7, 0.5), np.zeros(7)
    assert session.intervened(Command(q, 12, 3, "v1", "held", why="state refused")) is None
    served = Command(q, 12, 3, "v1", "passed", teleop=teleop, measured=measured)
    np.testing.assert_array_equal(session.intervened(served), np.concatenate([teleop, measured]))


def test_the_level_names_the_worst_condition_first(session):
    assert session.level() == (Level.WARN, "unconfigured")
    session.refuse(ValueError("safety.joint_states: 6 values"))
    session.last_error = "configure failed: no such file"
    assert session.level() == (Level.WARN, "unconfigured: configure failed: no such file")
    _configured(session)
    assert session.level() == (Level.WARN, "inactive: not commanding")
    session.cycle.activate()
    assert session.level() == (Level.OK, "guarding")
    session.cycle.policy_lifecycle(False, "inactive")
    assert session.level() == (Level.WARN, "holding: the policy is not active")
    assert session.level("1 other node(s) named /safety") == (Level.ERROR, "1 other node(s) named /safety")
    values = session.values("x")
    assert values["refused_inputs"] == 1 and values["namesake"] == "x" and values["estopped"] is False
    assert values["command_type"] == "float64_array" and "interventions.estops" in values


def test_commands_are_read_only_while_active_with_a_trusted_state(session):
    _configured(session)
    assert not session.takes_commands
    session.cycle.activate()
    assert not session.takes_commands  # no measured state yet
    _trusted_state(session)
    assert session.takes_commands


def test_a_simulated_tasks_fixtures_join_the_known_scene_and_bad_json_is_named(session):
    from tinker_safety.guard_session import read_scene_items

    table = {"name": "sort_table", "shape": "box", "size": [0.6, 1.2, 0.05], "position": [0.55, 0.0, 0.025],
             "rpy": [0.0, 0.0, 0.0]}
    items = read_scene_items(__import__("json").dumps([table]), "safety.task_fixtures")
    session.configure(None, None, 0.05, "/joint_states", GATE, extra_scene=items)
    names = [s.name for s in session.cycle.guard.config.scene]
    assert "sort_table" in names and len(names) >= 2  # the YAML's own scene (its mounting table) stays
    assert read_scene_items("", "x") == []
    with pytest.raises(ConfigError, match=r"safety.task_fixtures: not JSON"):
        read_scene_items("[{", "safety.task_fixtures")
    with pytest.raises(ConfigError, match=r"safety.task_fixtures: expected a JSON list of scene items .*dict"):
        read_scene_items('{"name": "t"}', "safety.task_fixtures")


def test_configure_from_reads_the_nodes_parameters_by_name(session):
    params = {"config": "", "urdf": "", "max_state_age": 0.3, "max_state_future": 0.1, "state_jump_tolerance": 0.2,
              "state_quarantine": 0.5, "intervention_max_age": 0.25, "intervention_max_future": 0.1,
              "task_fixtures": ""}
    session.configure_from(params.__getitem__, 0.05, "/joint_states", "/intervention")
    assert session.names and session.cycle.takeover is not None
    params["max_state_age"], params["intervention_max_age"] = 0.7, 0.4
    session.limits_from(params.__getitem__)
    assert session.cycle.gate.max_age_ns == 700_000_000 and session.cycle.takeover.max_age_ns == 400_000_000
    with pytest.raises(ConfigError, match="safety.task_fixtures: not JSON"):
        session.configure_from({**params, "task_fixtures": "[{"}.__getitem__, 0.05, "/joint_states")
