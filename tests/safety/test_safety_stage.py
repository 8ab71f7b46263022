"""`SafetyStage`: the safety stage as every runtime hosts it, without ROS (real SafetyWrapper from the shipped YAML
and URDF, real StateGate and Takeover): edge values in, the safe command, a person's cycles and the e-stop state out."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.errors import ValidationError
from tinker_core.loop.edges import Action, RobotState
from tinker_core.loop.graph import ROBOT_LOOP
from tinker_core.loop.latency_estimate import MIN_CYCLES as MIN_FITTED
from tinker_safety.safety_stage import SafetyStage

HOME = np.array([0.0, 0.5, 0.0, -1.0, 0.0, 1.0, 0.0])
GATE = (0.5, 0.1, 0.2, 0.5)
NOW = 1_000_000_000_000


class Host:
    def __init__(self):
        self.deadline_armed = False
        self.logs: list[tuple[str, str]] = []

    def arm_deadline(self):
        self.deadline_armed = True

    def cancel_deadline(self):
        self.deadline_armed = False

    def log(self, level, message):
        self.logs.append((level, message))

    def expect_commands(self, expected, arrived):
        pass


@pytest.fixture
def stage():
    host = Host()
    mono = [5_000_000_000]
    st = SafetyStage(host, wall_ns=lambda: NOW, mono_ns=lambda: mono[0])
    out: list = []

    def emit(port, value):
        ROBOT_LOOP.check_port("safety", port, "out")
        out.append((port, value))

    st.emit, st.out, st.mono = emit, out, mono
    st.session.configure(None, None, 0.05, "/joint_states", GATE, "/intervention", (0.2, 0.1))
    st.cycle.activate()
    yield st
    st.session.release()


def test_every_handler_is_an_edge_into_safety_in_the_loops_graph(stage):
    assert set(stage.inputs()) == {e.port for e in ROBOT_LOOP.inputs("safety")}


def test_a_policy_target_answers_its_state_with_a_safe_command(stage):
    stage.on_state(RobotState(NOW, HOME, np.zeros(7), 1, None))
    done = stage.on_target(Action(NOW, 1, HOME + 0.01, 3))
    ports = [p for p, _ in stage.out]
    assert done is not None and ports[-1] == "command"
    c = stage.out[-1][1]
    assert (c.stamp_ns, c.cycle, c.version, c.intervention) == (NOW, 1, "3", False)
    assert np.abs(c.q - HOME).max() <= 0.01 + 1e-9 and stage.last_command.stamp == NOW


def test_a_target_that_cannot_be_a_command_is_refused_and_still_counts_as_its_cycles_hold(stage):
    stage.on_state(RobotState(NOW, HOME, np.zeros(7), 1, None))
    for bad in (np.full(6, 0.1), np.array([np.nan] * 7)):
        stage.on_target(Action(NOW, 1, bad, 3))
    assert stage.session.refused == 2 and stage.refusals.count == 2
    assert "safety.policy_command" in stage.session.last_error
    commands = [v for p, v in stage.out if p == "command"]
    assert commands and all(c.status == "held" and np.allclose(c.q, HOME) for c in commands)
    assert any("input refused, holding" in m for _, m in stage.host.logs)


def test_a_person_s_target_that_cannot_be_read_is_counted_by_the_takeover_not_as_a_refused_input(stage):
    stage.refuse(ValidationError("safety.intervention", "joints [...]", "joints ['x']"), "intervention")
    assert stage.cycle.takeover.refused["shape"] == 1 and stage.session.refused == 0


def test_the_estop_state_goes_out_when_it_latches_and_clears(stage):
    notes = []
    stage.on_estop = notes.append
    stage.on_state(RobotState(NOW, HOME, np.zeros(7), 1, None))
    stage.session.estop("test")
    stage.on_state(RobotState(NOW + 50_000_000, HOME, np.zeros(7), 2, None))
    stage.mono[0] += 50_000_000
    ok, _ = stage.session.reset()
    states = [v for p, v in stage.out if p == "estop_state"]
    assert ok and [s.estopped for s in states] == [True, False] and "test" in states[0].reason
    assert notes[0] and notes[-1] == ""


def test_a_hosts_failed_callback_latches_the_estop_once_with_a_hold(stage):
    stage.on_state(RobotState(NOW, HOME, np.zeros(7), 1, None))
    stage.internal_error("/joint_states", RuntimeError("boom"))
    stage.internal_error("/joint_states", RuntimeError("again"))
    latched = [v for p, v in stage.out if p == "estop_state"]
    assert len(latched) == 1 and "internal error in the callback on /joint_states" in latched[0].reason
    assert "boom" in latched[0].reason
    holds = [v for p, v in stage.out if p == "command"]
    assert holds and holds[-1].status == "estopped" and np.allclose(holds[-1].q, HOME)


def test_shutdown_sends_the_hold_last_and_no_command_after_it(stage):
    stage.on_state(RobotState(NOW, HOME, np.zeros(7), 1, None))
    stage.shutdown()
    last = [v for p, v in stage.out if p == "command"][-1]
    assert last.status == "held" and last.why == "shutdown" and not stage.cycle.active
    n = len(stage.out)
    stage.shutdown(hold=False)  # a node that refused to run sends nothing
    assert len(stage.out) == n


def test_the_safety_stages_life_is_the_same_on_every_runtime(stage):
    """The steps a lifecycle node's transitions and the in-process loop both drive: configured and activate send
    the e-stop state (a latched topic's first value), deactivate holds no cycle, release carries a latched e-stop
    to the next configure."""
    stage.configure_failed("configure failed: no URDF")
    assert stage.session.values("")["last_error"] == "configure failed: no URDF"
    stage.configured()
    assert stage.session.values("")["last_error"] == ""
    stage.deactivate()
    stage.activate()
    assert [v.estopped for p, v in stage.out if p == "estop_state"] == [False, False] and stage.cycle.active
    stage.on_state(RobotState(NOW, HOME, np.zeros(7), 1, None))
    stage.session.estop("test")
    stage.release()
    assert stage.cycle.guard is None and "test" in stage.session.estop_carry
    stage.session.configure(None, None, 0.05, "/joint_states", GATE, "/intervention", (0.2, 0.1))
    assert stage.session.estop_reason()  # still latched: only reset from a measured pose clears it


def _servo(stage, lag: int, periods: int, heard=lambda t: True) -> None:
    """A servo that takes its target ``lag`` periods after the stage sent it (a few lines of numpy standing in for the
    robot); the policy's targets wander. ``heard(t)``: whether the stage hears state ``t`` (a dropped one is not)."""
    wall = [NOW]
    stage.wall_ns = lambda: wall[0]
    q, sent = HOME.copy(), [HOME.copy()] * (lag + 1)
    goal = HOME.copy()
    rng = np.random.default_rng(0)
    for t in range(1, periods + 1):
        wall[0] += 50_000_000
        stage.mono[0] += 50_000_000
        if heard(t):
            stage.on_state(RobotState(wall[0], q.copy(), np.zeros(7), t, 1))
            if t % 15 == 1:
                goal = HOME + rng.uniform(-0.3, 0.3, 7)
            last = stage.last_command.q if stage.last_command is not None else HOME
            stage.on_target(Action(wall[0], t, last + np.clip(goal - last, -0.02, 0.02), 1))
        sent.append(stage.last_command.q.copy())  # what the motors were last sent (unheard: the old command)
        q = q + 0.6 * (sent[-1 - lag] - q)  # the motors hold what was sent lag periods ago


def test_it_measures_the_command_latency_and_warns_while_the_compensation_differs(stage):
    """The stage's own commands and the states it hears are all it reads."""
    from tinker_core.loop.input_ages import Level

    _servo(stage, 2, 120)
    values = stage.latency_values()
    assert values["command_latency_periods"] == 2, values
    level, why = stage.level()
    assert level == Level.WARN and "measured 2 control periods, compensated 0" in why, why
    stage.compensated = 2
    assert stage.level()[0] == Level.OK and stage.latency_mismatch() == ""


def test_with_latency_auto_it_sends_the_latency_it_measured_once_it_has_stood_and_compensates_it(stage):
    """latency_auto: the measured 2 periods go out once as ``command_latency`` (to perception), the stage compares
    with it from then on (OK), and says so in its log; without latency_auto nothing goes out."""
    from tinker_core.loop.input_ages import Level
    from tinker_core.loop.latency_auto import LOOK_EVERY, STANDING

    stage.compensate(0, auto=True)
    _servo(stage, 2, 160)
    sent = [v for p, v in stage.out if p == "command_latency"]
    assert [c.periods for c in sent] == [2] and sent[0].fit > sent[0].runner_up, sent
    assert stage.compensated == 2 and stage.level()[0] == Level.OK and stage.latency_values()["latency_auto"] is True
    taken = [m for _, m in stage.host.logs if "(latency_auto)" in m]
    assert len(taken) == 1 and "command latency measured 2 control periods" in taken[0] and "was 0" in taken[0]
    states = int(taken[0].split(" states heard")[0].rsplit(" ", 1)[1])  # not before an estimate, and it has stood
    assert states >= MIN_FITTED + LOOK_EVERY * (STANDING - 1), taken


def test_a_start_outside_the_compensated_range_is_refused(stage):
    from tinker_core.errors import ConfigError

    for auto in (False, True):
        with pytest.raises(ConfigError, match="safety.latency_compensation"):
            stage.compensate(-1, auto)


def test_without_latency_auto_the_measured_latency_is_only_a_warning(stage):
    from tinker_core.loop.input_ages import Level

    stage.compensate(0)
    _servo(stage, 2, 160)
    assert not [v for p, v in stage.out if p == "command_latency"] and stage.compensated == 0
    level, why = stage.level()
    assert level == Level.WARN and "set latency_compensation: 2" in why and "latency_auto: true" in why, why


def test_dropped_states_are_not_fitted_as_one_period(stage):
    """One state in 7 lost on the way: the two periods around a gap are not one period's motion, and the motors
    kept the last command through it. What is left still gives the latency. (With every third state lost, lags 1
    and 2 see the same command in every fitted period, and it says it cannot tell them apart.)"""
    _servo(stage, 2, 300, heard=lambda t: t % 7 != 0)
    assert stage.latency_values()["command_latency_periods"] == 2, stage.latency_values()


def test_a_refused_state_does_not_feed_the_latency_estimate(stage):
    """A stamp from the future (a second publisher, a clock that jumped) is refused by the gate, and tells the
    latency estimate nothing; a trusted one does."""
    stage.on_state(RobotState(NOW + 60_000_000_000, HOME, np.zeros(7), 1, 1))
    assert stage.cycle.untrusted and stage.latency is None
    stage.on_state(RobotState(NOW, HOME, np.zeros(7), 2, 1))
    assert stage.latency is not None and stage.latency_values()["command_latency_periods"].startswith("unknown")
