"""InputAges and RecentFaults on an injected clock: what a node's /diagnostics says of its inputs."""

from __future__ import annotations

import pytest

from tinker_core.errors import ConfigError
from tinker_core.loop.input_ages import InputAges, Level, RecentFaults

S = 1_000_000_000


class Clock:
    def __init__(self) -> None:
        self.ns = 10 * S

    def __call__(self) -> int:
        return self.ns

    def advance(self, s: float) -> None:
        self.ns += int(s * S)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_an_unseen_input_is_waited_for_during_the_grace_then_an_error_naming_it(clock):
    ages = InputAges(timeout_s=0.5, startup_grace_s=5.0, clock=clock)
    ages.declare("/robot/joint_states")
    clock.advance(4.0)
    level, msg = ages.level()
    assert level == Level.WARN and msg.startswith("waiting for /robot/joint_states")
    clock.advance(1.5)
    level, msg = ages.level()
    assert level == Level.ERROR and "/robot/joint_states: no message in 5.5 s" in msg
    assert ages.values()["input_age_s./robot/joint_states"] == "never"


def test_a_silent_input_goes_stale_after_the_timeout_and_clears_when_messages_return(clock):
    ages = InputAges(timeout_s=0.5, startup_grace_s=5.0, clock=clock)
    ages.declare("/features")
    ages.declare("/joint_states")
    for _ in range(10):  # both flowing at 20 Hz
        ages.seen("/features")
        ages.seen("/joint_states")
        clock.advance(0.05)
    assert ages.level() == (Level.OK, "inputs fresh")
    for _ in range(9):  # the features' publisher stops; the state keeps coming
        ages.seen("/joint_states")
        clock.advance(0.05)
    assert ages.level()[0] == Level.OK  # the newest features are 0.5 s old: at the limit, not past it
    clock.advance(0.1)
    ages.seen("/joint_states")
    level, msg = ages.level()
    assert level == Level.ERROR and msg == "/features: last message 0.60 s ago (limit 0.5 s)"
    assert ages.values()["input_age_s./features"] == "0.600" and ages.values()["input_age_s./joint_states"] == "0.000"
    ages.seen("/features")
    assert ages.level() == (Level.OK, "inputs fresh")


def test_the_age_comes_from_the_injected_clock_only(clock):
    """No message stamp enters: an input's age is the time since `seen`, on the node's own clock."""
    ages = InputAges(timeout_s=1.0, clock=clock)
    ages.declare("/x")
    ages.seen("/x")
    clock.advance(0.25)
    assert ages.age_s("/x") == pytest.approx(0.25)


def test_each_input_has_its_own_stale_level_and_the_worst_one_is_the_nodes(clock):
    ages = InputAges(timeout_s=0.5, startup_grace_s=1.0, clock=clock)
    ages.declare("/state", Level.ERROR)
    ages.declare("/last_action", Level.WARN)
    ages.declare("/goal", None)  # published on change: its age is reported, never judged
    for t in ("/state", "/last_action", "/goal"):
        ages.seen(t)
    clock.advance(0.3)
    ages.seen("/state")
    clock.advance(0.3)
    level, msg = ages.level()
    assert level == Level.WARN and msg.startswith("/last_action:")
    clock.advance(0.3)
    level, msg = ages.level()
    assert level == Level.ERROR and msg.startswith("/state:") and "/last_action" not in msg
    ages.seen("/state")
    ages.seen("/last_action")
    clock.advance(100.0)
    ages.seen("/state")
    ages.seen("/last_action")
    assert ages.level()[0] == Level.OK and ages.values()["input_age_s./goal"] == "100.900"
    ages.set_stale_level("/goal", Level.ERROR)  # the running model needs it now
    assert ages.level()[0] == Level.ERROR


def test_two_stale_inputs_at_the_same_level_are_both_named(clock):
    ages = InputAges(timeout_s=0.5, clock=clock)
    ages.declare("/a")
    ages.declare("/b")
    ages.seen("/a")
    ages.seen("/b")
    clock.advance(1.0)
    level, msg = ages.level()
    assert level == Level.ERROR and "/a: last message 1.00 s" in msg and "/b: last message 1.00 s" in msg


def test_forget_redeclare_and_restart_grace(clock):
    ages = InputAges(timeout_s=0.5, startup_grace_s=2.0, clock=clock)
    ages.declare("/cmd")
    ages.seen("/cmd")
    clock.advance(3.0)
    assert ages.level()[0] == Level.ERROR
    ages.declare("/cmd")  # a re-made subscription (or a peer expected back): waited for again
    assert ages.level()[0] == Level.WARN
    ages.forget("/cmd")
    assert ages.level()[0] == Level.OK and ages.topics == []
    ages.declare("/s")
    clock.advance(3.0)
    assert ages.level()[0] == Level.ERROR
    ages.restart_grace()
    assert ages.level()[0] == Level.WARN
    ages.seen("/unknown")  # a topic never declared is ignored


def test_changed_limits_apply_at_once_and_bad_limits_are_refused(clock):
    ages = InputAges(timeout_s=0.5, clock=clock)
    ages.declare("/a")
    ages.seen("/a")
    clock.advance(0.8)
    assert ages.level()[0] == Level.ERROR
    ages.configure(1.0, 10.0)
    assert ages.level()[0] == Level.OK and ages.values()["input_timeout_s"] == "1"
    with pytest.raises(ConfigError, match="input_timeout: expected > 0 s, got 0"):
        ages.configure(0, 1.0)
    with pytest.raises(ConfigError, match="input_startup_grace: expected >= 0 s, got -1"):
        InputAges(0.5, -1, clock=clock)


def test_refusals_warn_while_recent_and_clear_once_they_stop(clock):
    faults = RecentFaults(memory_s=2.0, clock=clock)
    assert faults.level() == (Level.OK, "")
    faults.note("perception.image: expected rgb8, got bgr8")
    clock.advance(0.5)
    faults.note("perception.image: expected rgb8, got mono8")
    level, msg = faults.level()
    assert level == Level.WARN
    assert msg == "refused 2 input(s), last 0.0 s ago: perception.image: expected rgb8, got mono8"
    clock.advance(2.5)
    assert faults.level() == (Level.OK, "")  # the WARN of the issue that never cleared
    assert faults.count == 2 and faults.last.endswith("mono8")  # the record stays
    faults.note("again")
    assert faults.level()[1].startswith("refused 1 input(s)")  # a new run counts from 1
    assert faults.level("rejected", "command")[1].startswith("rejected 1 command(s), last 0.0 s ago: again")


def test_an_input_that_must_flow_only_at_times_is_judged_only_then(clock):
    """A policy's commands: ERROR when quiet while it is active, age only while it is not; waited for again on
    re-activation (its grace starts then)."""
    ages = InputAges(timeout_s=0.5, startup_grace_s=2.0, clock=clock)
    ages.declare("/cmd", Level.ERROR)
    ages.seen("/cmd")
    ages.expect("/cmd", flowing=False, arrived=False)
    clock.advance(3.0)
    assert ages.level()[0] == Level.OK  # not expected: its silence is no fault
    ages.expect("/cmd", flowing=True, arrived=False)
    clock.advance(1.0)
    level, message = ages.level()
    assert level == Level.WARN and "waiting for /cmd" in message  # within the new grace
    clock.advance(1.5)
    assert ages.level()[0] == Level.ERROR
    ages.seen("/cmd")
    ages.expect("/cmd", flowing=True, arrived=True)
    assert ages.level()[0] == Level.OK
    clock.advance(0.6)
    assert ages.level()[0] == Level.ERROR and "/cmd" in ages.level()[1]
