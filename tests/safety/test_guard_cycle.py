"""`GuardCycle`: the safety node's decisions between topics, driven without ROS (real SafetyWrapper and StateGate).

The host below records what the node would publish; the deadline is fired by hand where the node's timer
would fire it."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_safety.guard_cycle import Command, GuardCycle
from tinker_safety.state_gate import StateGate

PERIOD_NS = 50_000_000
HOME = np.array([0.0, 0.5, 0.0, -1.0, 0.0, 1.0, 0.0])  # as in conftest: a collision-free pose
ZERO = np.zeros(7)


class Host:
    """What the safety node does with the cycle's outputs, recorded."""

    def __init__(self):
        self.sent: list[Command] = []
        self.armed = False
        self.logs: list[tuple[str, str]] = []
        self.estop_changes = 0
        self.expected: list[tuple[bool, bool]] = []

    def send(self, command: Command) -> None:
        self.sent.append(command)

    def arm_deadline(self) -> None:
        self.armed = True

    def cancel_deadline(self) -> None:
        self.armed = False

    def log(self, level: str, message: str) -> None:
        self.logs.append((level, message))

    def estop_changed(self) -> None:
        self.estop_changes += 1

    def expect_commands(self, expected: bool, arrived: bool) -> None:
        self.expected.append((expected, arrived))


class Loop:
    """A guard cycle on the kuka iiwa with a manual clock; ``state()`` sends the next measured state."""

    def __init__(self, make_guard, clock):
        self.clock, self.host = clock, Host()
        guard = make_guard(clock=clock, collision_check=False, workspace_min=None, workspace_max=None)
        gate = StateGate(guard.limits.velocity, "/joint_states", 0.5, 0.1, 0.2, 0.5)
        self.c = GuardCycle(self.host, clock=clock)
        self.c.configure(guard, gate)
        self.c.activate()
        self.stamp = 1_000_000_000_000
        self.q = HOME.copy()

    def state(self, q=None, publishers: int = 1, stamp: int | None = None, episode=None) -> int:
        self.clock.advance(0.05)
        self.stamp += PERIOD_NS
        s = self.stamp if stamp is None else stamp
        self.c.state(self.q if q is None else q, ZERO, s, None, episode, publishers, self.stamp,
                     int(self.clock.t * 1e9))
        return s

    def command(self, target, stamp: int, valid: bool = True) -> bool:
        return self.c.command(np.asarray(target, dtype=float), valid, {"stamp_ns": str(stamp), "cycle": "1"})

    def deadline(self) -> None:
        self.clock.advance(0.03)
        self.c.deadline()


@pytest.fixture
def loop(make_guard, clock) -> Loop:
    return Loop(make_guard, clock)


def test_no_command_before_a_measured_state_and_each_state_arms_the_deadline(loop):
    assert not loop.command(HOME, 1)  # no trusted state yet: nothing goes to the wrapper
    assert loop.host.sent == []
    s = loop.state()
    assert loop.host.armed
    assert loop.command(HOME + 0.001, s)
    assert not loop.host.armed and len(loop.host.sent) == 1 and loop.host.sent[0].stamp == s


def test_missed_cycles_in_a_row_latch_the_estop_and_a_served_cycle_resets_the_count(loop):
    s = loop.state()
    loop.command(HOME, s)
    for _ in range(2):  # two misses, then a served cycle: the count starts again
        loop.state()
        loop.deadline()
    assert loop.c.misses_in_row == 2 and not loop.c.guard.estopped
    s = loop.state()
    loop.command(HOME, s)
    assert loop.c.misses_in_row == 0
    for _ in range(3):
        loop.state()
        loop.deadline()
    assert loop.c.guard.estopped and loop.host.estop_changes == 1
    assert loop.host.sent[-1].status == "estopped"
    assert all(np.allclose(c.q, HOME, atol=1e-9) for c in loop.host.sent[-3:])  # holds at the measured pose


def test_a_served_cycle_is_not_missed_when_its_deadline_fires_late(loop):
    s = loop.state()
    loop.command(HOME, s)
    n = len(loop.host.sent)
    loop.deadline()  # the timer fired anyway (a race with the command): nothing more goes out
    assert len(loop.host.sent) == n and loop.c.deadline_misses == 0


def test_a_second_publisher_refuses_states_and_the_robot_holds_at_the_last_command_sent(loop):
    s = loop.state()
    loop.command(HOME + 0.01, s)
    last = loop.host.sent[-1].q.copy()
    loop.state(q=HOME + 0.05, publishers=2)  # a second source: its pose is never used, never held at
    assert loop.c.untrusted and loop.c.refused_states == {"publishers": 1} and not loop.host.armed
    assert not loop.command(HOME + 0.5, s)
    assert np.array_equal(loop.host.sent[-1].q, last) and loop.host.sent[-1].status == "held"
    assert loop.c.reset() == (False, f"reset refused: the measured state is not trusted: {loop.c.untrusted}")
    loop.state()
    assert loop.c.untrusted == "" and ("info", "/joint_states: states trusted again") in loop.host.logs


def test_a_state_from_the_future_is_refused(loop):
    loop.state(stamp=loop.stamp + 10 * 10**9)
    assert loop.c.refused_states == {"future": 1}
    assert "future" in loop.host.logs[-1][1] or "ahead" in loop.host.logs[-1][1]


def test_a_command_two_cycles_late_is_dropped(loop):
    s1 = loop.state()
    s2 = loop.state()
    s3 = loop.state()
    assert loop.command(HOME, s2)  # one cycle late: goes on
    assert not loop.command(HOME, s1) and loop.c.order.dropped == 1
    assert loop.command(HOME, s3)


def test_a_deactivated_policy_is_held_without_misses_and_comes_back_through_the_ramp(loop):
    s = loop.state()
    loop.command(HOME, s)
    loop.c.policy_lifecycle(False, "inactive")
    assert loop.host.expected[-1] == (False, False) and loop.host.sent[-1].why == "policy inactive"
    for _ in range(5):
        loop.state()
        loop.deadline()
    assert loop.c.deadline_misses == 0 and not loop.c.guard.estopped
    ramps = loop.c.ramp_restarts
    s = loop.state()
    assert loop.command(HOME + 0.3, s)  # a command before the activation event: the policy is back
    assert loop.host.expected[-1] == (True, True) and loop.c.ramp_restarts == ramps + 1
    step = np.abs(loop.host.sent[-1].q - HOME).max()
    assert step < 0.3 and loop.host.sent[-1].status != "passed"  # ramped, not a jump to the target


def test_invalid_commands_latch_the_estop_and_the_host_hears_of_it(loop):
    for _ in range(3):
        s = loop.state()
        loop.command(np.full(7, np.nan), s, valid=False)
    assert loop.c.guard.estopped and loop.host.estop_changes == 1
    assert any(level == "error" and "e-stop latched" in m for level, m in loop.host.logs)
    s = loop.state()
    loop.command(HOME, s)
    assert loop.host.sent[-1].status == "estopped"  # latched: valid commands no longer go on
    ok, message = loop.c.reset()
    assert ok and "cleared" in message and not loop.c.guard.estopped and loop.host.estop_changes == 2


def test_deactivate_holds_and_release_keeps_the_counters(loop):
    s = loop.state()
    loop.command(HOME, s)
    loop.c.deactivate()
    assert loop.host.sent[-1].why == "deactivated" and not loop.c.active
    holds = loop.c.holds
    loop.c.release()
    assert loop.c.guard is None and loop.c.q is None and loop.c.holds == holds
    loop.c.hold("shutdown")  # no measured state: nothing is commanded
    assert loop.host.sent[-1].why == "deactivated"
