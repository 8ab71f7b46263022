"""The measured state is checked before it is trusted: no command before a first valid state, stamps from the future
or too old, jumps the robot cannot make, and a pose beyond a limit brought back at the speed limit, never by a jump."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_safety import Outcome

ZERO = np.zeros(7)
J4_UPPER = 2.0943951  # lbr_iiwa_joint_4's URDF upper limit, rad


@pytest.fixture
def guard(make_guard, clock, home):
    """Limits only on the manual clock, the jump check on (SafetyConfig's default 1.2), armed at HOME; the limits
    act from the measured state (these tests put the measured pose on each target: a robot that tracks at once)."""
    g = make_guard(clock=clock, collision_check=False, workspace_min=None, workspace_max=None, state_jump_scale=1.2,
                   limit_from="measured")
    assert g.reset(home, ZERO)
    return g


def test_no_command_at_all_before_a_first_valid_state(make_guard, clock, home):
    g = make_guard(clock=clock, collision_check=False, workspace_min=None, workspace_max=None,
                   invalid_inputs_to_estop=5)
    for cmd, status in (g(home, None, None), g(home, np.full(7, np.nan), ZERO), g.tick(clock(), None, None)):
        assert cmd is None, f"a command was made up before any valid state: {cmd}"
        assert status.outcome is Outcome.HELD and "no valid measured state yet: no command sent" in status.reasons
    assert g.forward({"action": home, "q": None, "qd": None}) is None
    assert g.last_status.outcome is Outcome.HELD
    assert "no valid measured state yet: no command sent" in g.last_status.reasons
    cmd, status = g(home + 0.01, home, ZERO)  # the first valid state: commands from here on
    assert status.outcome is Outcome.PASSED and np.allclose(cmd, home + 0.01)
    cmd2, status = g(home, None, None)  # an invalid state now holds the last command sent
    assert np.array_equal(cmd2, cmd) and status.outcome is Outcome.HELD


def test_an_internal_error_before_a_first_valid_state_sends_no_command(make_guard, home):
    def broken_clock() -> float:
        raise RuntimeError("clock died")

    g = make_guard(clock=broken_clock, collision_check=False, workspace_min=None, workspace_max=None)
    cmd, status = g(home, None, None)
    assert cmd is None and status.outcome is Outcome.ESTOPPED and "clock died" in status.reasons[0]


@pytest.mark.parametrize("offset, reason", [
    (1.0, "joint_state.stamp: 1000.0 ms ahead of the clock (tolerance 50.0 ms)"),
    (-2.0, "joint_state.stamp: 2000.0 ms old (max age 500.0 ms)"),
])
def test_a_state_stamped_in_the_future_or_too_old_is_refused(guard, clock, home, offset, reason):
    last, _ = guard(home + 0.01, home, ZERO, stamp=clock())
    q = home + 0.02
    cmd, status = guard(home + 0.03, q, ZERO, stamp=clock() + offset)
    assert status.outcome is Outcome.HELD and np.array_equal(cmd, last), "holds the last command, not the refused pose"
    assert status.reasons == [f"{reason}; holding the last command"]
    assert guard.counters["refused_states"] == 1
    cmd, status = guard(home + 0.03, q, ZERO, stamp=clock() - 0.04)  # 40 ms old: fine
    assert status.outcome is Outcome.PASSED and np.allclose(cmd, home + 0.03)


def test_a_jump_the_robot_cannot_make_is_refused(guard, clock, home):
    """The spoofed-state attack of issue 22: one joint reported 1.0 rad away from where it was 50 ms before."""
    last, _ = guard(home + 0.01, home, ZERO)
    clock.advance(0.05)
    spoofed = home.copy()
    spoofed[1] += 1.0
    cmd, status = guard(spoofed + 0.1, spoofed, ZERO)
    assert status.outcome is Outcome.HELD and np.array_equal(cmd, last)
    assert status.reasons == ["joint_positions: joint lbr_iiwa_joint_2 moved 1.000 rad in 50.0 ms since the last "
                              "accepted state, more than the 0.610 rad it can move (1.2 x its velocity limit "
                              "10.000 rad/s, plus 0.010 rad); implausible; holding the last command"]
    real = home + 0.01  # the true pose, next cycle: accepted again
    cmd, status = guard(home + 0.02, real, ZERO)
    assert status.outcome is Outcome.PASSED and np.allclose(cmd, home + 0.02)


def test_implausible_states_in_a_row_latch_the_estop(guard, clock, home):
    guard(home, home, ZERO)
    for k in range(3):
        clock.advance(0.05)
        _, status = guard(home, home + 0.9, ZERO)  # inside the limits, 0.9 rad in 50 ms
    assert guard.estopped and guard.estop_cause == "invalid_input" and status.outcome is Outcome.ESTOPPED


def test_a_stalled_or_backward_clock_never_widens_the_plausible_jump(guard, clock, home):
    """Elapsed time is at least one control period and never negative: a stall does not refuse a normal step, a
    backward clock does not refuse everything, and neither lets a large jump through."""
    guard(home, home, ZERO)
    step = home + 0.2  # 4 rad/s for one 50 ms period: a move the robot can make
    _, status = guard(step, step, ZERO)  # clock stalled
    assert status.outcome is Outcome.PASSED
    clock.advance(-10.0)
    jump = step.copy()
    jump[0] += 1.2
    _, status = guard(jump, jump, ZERO)
    assert status.outcome is Outcome.HELD and "moved 1.200 rad in 50.0 ms" in status.reasons[0]
    step = step + 0.2
    _, status = guard(step, step, ZERO)  # the clock still reads 10 s earlier: a normal step passes
    assert status.outcome is Outcome.PASSED


def test_a_pose_beyond_a_limit_is_brought_back_at_the_speed_limit_not_by_a_jump(make_guard, clock, home):
    g = make_guard(clock=clock, collision_check=False, workspace_min=None, workspace_max=None,
                   control_period=0.001, accel_limit=None)
    q = home.copy()
    q[3] = J4_UPPER + 0.09  # within state_tolerance (0.1 rad): a valid state, past the limit
    assert g.reset(q, ZERO)
    g.estop("test")  # held while beyond the limit: at the measured pose, not at the limit
    cmd, status = g(q, q, ZERO)
    assert np.array_equal(cmd, q) and status.outcome is Outcome.ESTOPPED
    assert g.reset(q, ZERO)
    cmd, status = g(q, q, ZERO)
    assert np.array_equal(cmd, q) and status.outcome is Outcome.PASSED
    target = q.copy()
    target[3] = 1.9
    step_max = 10.0 * 0.5 * 0.001  # velocity_scale 0.5 of the URDF 10 rad/s, one 1 ms period
    steps = []
    for _ in range(200):  # perfect tracking: each command becomes the next measured pose
        clock.advance(0.001)
        cmd, status = g(target, q, ZERO)
        steps.append(abs(cmd[3] - q[3]))
        q = cmd
    assert max(steps) <= step_max + 1e-12, max(steps)
    assert steps[0] > 0.004 and q[3] == pytest.approx(1.9)


def test_reset_needs_a_valid_state_including_its_stamp(guard, clock, home):
    guard.estop("operator")
    assert not guard.reset(home, ZERO, stamp=clock() - 5.0)
    assert guard.last_reset_refusal == "reset refused: joint_state.stamp: 5000.0 ms old (max age 500.0 ms)"
    assert guard.estopped
    guard.feed(home)
    guard.tick(clock(), home, ZERO)
    guard(home, home, ZERO, stamp=clock())
    assert guard.estopped, "nothing but a valid reset clears the e-stop"
    assert guard.reset(home, ZERO, stamp=clock()) and not guard.estopped


def test_rebase_takes_a_moved_robot_without_clearing_the_estop(guard, clock, home):
    """A simulator's episode reset moves the arm 1 rad at once: rebase accepts the new pose, the e-stop stays."""
    guard(home, home, ZERO)
    moved = home + 1.0
    _, status = guard(moved, moved, ZERO)
    assert status.outcome is Outcome.HELD and "implausible" in status.reasons[0]
    guard.estop("operator")
    assert guard.rebase(moved, ZERO) and guard.estopped and guard.phase == "await_first_target"
    assert np.array_equal(guard.last_command, moved)
    cmd, status = guard(moved + 0.01, moved, ZERO)
    assert status.outcome is Outcome.ESTOPPED and np.array_equal(cmd, moved)
    assert not guard.rebase(np.full(7, np.nan), ZERO)
    assert guard.last_reset_refusal.startswith("rebase refused: joint_positions: nan at joint lbr_iiwa_joint_1")
    assert guard.reset(moved, ZERO)
    cmd, status = guard(moved + 0.01, moved, ZERO)
    assert status.outcome is Outcome.PASSED


def test_last_command_is_what_to_hold_outside_a_call(make_guard, clock, home):
    g = make_guard(clock=clock, collision_check=False, workspace_min=None, workspace_max=None)
    assert g.last_command is None and not g.has_state
    g(home, None, None)
    assert g.last_command is None
    cmd, _ = g(home + 0.01, home, ZERO)
    held = g.last_command
    assert g.has_state and np.array_equal(held, cmd)
    held[0] = 99.0  # a copy: the wrapper's own is untouched
    assert g.last_command[0] == cmd[0]


@pytest.mark.parametrize("stamp, ok", [(np.float64(100.0), True), (np.int64(100), True), (float("nan"), False),
                                       ("100.0", False), (True, False)])
def test_a_stamp_is_any_finite_real_number_of_seconds(guard, clock, home, stamp, ok):
    _, status = guard(home, home, ZERO, stamp=stamp)  # the manual clock reads 100.0 s
    assert (status.outcome is Outcome.PASSED) == ok, status.summary
    if not ok:
        assert status.reasons[0].startswith("joint_state.stamp: expected a finite time in s, got ")
