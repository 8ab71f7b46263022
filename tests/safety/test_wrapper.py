"""SafetyWrapper behaviour: limits with reasons, invalid input, the e-stop latch and reset rules, the watchdog,
safe start, and the ModuleBase interface."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from tinker_safety import EstopCause, Outcome, SafetyWrapper

ZERO = np.zeros(7)


def run_in(guard, q, target, cycles):
    """Perfect tracking: each command becomes the next measured position. Returns the positions visited."""
    qd = np.zeros(7)
    visited = [q]
    for _ in range(cycles):
        cmd, status = guard(target, q, qd)
        qd, q = (cmd - q) / guard.config.control_period, cmd
        visited.append(q)
    return np.array(visited)


def test_clipping_to_limits_minus_margin_names_value_and_unit(fast_guard, home):
    target = home.copy()
    target[1] = 2.31  # lbr_iiwa_joint_2 limit is 2.094 rad, minus the 0.05 rad margin
    q = home.copy()
    q[1] = 2.0
    assert fast_guard.reset(q, ZERO)  # the robot is there (a jump from HOME would be refused as implausible)
    fast_guard(q, q, ZERO)  # a first target at the measured pose ends the start ramp at once
    cmd, status = fast_guard(target, q, ZERO)
    assert status.outcome is Outcome.CLIPPED and status.intervened
    assert status.reasons == ["joint lbr_iiwa_joint_2: target 2.310 rad above limit 2.044 rad, clipped"]
    assert cmd[1] == pytest.approx(2.094395 - 0.05) and cmd.dtype == np.float64 and cmd.shape == (7,)
    assert fast_guard.counters["clipped"] == 1
    assert status.summary.startswith("clipped: joint lbr_iiwa_joint_2")


def test_speed_and_acceleration_limits_from_the_measured_state(make_guard, home):
    guard = make_guard(collision_check=False, workspace_min=None, workspace_max=None, start_max_gap=3.0,
                       limit_from="measured")  # on the command stream: tests/safety/test_limit_from.py
    assert guard.reset(home, ZERO)
    guard(home, home, ZERO)  # a first target at the measured pose ends the start ramp at once
    assert guard.phase == "running"
    far = home + 1.0
    # at rest, speeding up is bounded by accel_limit: 20 rad/s² * 0.05 s = 1 rad/s, a 0.05 rad step
    cmd, status = guard(far, home, ZERO)
    assert np.allclose(cmd - home, 0.05) and status.outcome is Outcome.RATE_LIMITED
    assert "changing speed from 0.000 to 20.000 rad/s needs 400.0 rad/s², above the acceleration limit 20.0" \
        in status.reasons[0]
    # already moving at 4.8 rad/s: the speed limit (0.5 * 10 rad/s) binds
    cmd, status = guard(far, home, np.full(7, 4.8))
    assert np.allclose(cmd - home, 0.25)
    assert "requested 20.000 rad/s above speed limit 5.000 rad/s, limited to 5.000 rad/s" in status.reasons[0]
    # slowing to a stop is always allowed, even harder than the acceleration limit
    cmd, status = guard(home, home, np.full(7, 4.8))
    assert np.array_equal(cmd, home) and status.outcome is Outcome.PASSED


@pytest.mark.parametrize("action, reason", [
    (None, "action: missing (None)"),
    ([0.0] * 7, "action: expected a numpy float array of shape (7,), got list"),
    ("0.1", "action: expected a numpy float array of shape (7,), got str"),
    (np.zeros(6), "action: expected shape (7,), got (6,)"),
    (np.zeros((1, 7)), "action: expected shape (7,), got (1, 7)"),
    (np.zeros(7, dtype=np.int64), "action: expected a floating-point dtype, got int64"),
    (np.array([0.1, np.nan, 0, 0, 0, 0, 0]), "action: nan at joint lbr_iiwa_joint_2 (expected finite values)"),
    (np.array([0, 0, 0, 0, 0, 0, -np.inf], dtype=np.float32), "action: -inf at joint lbr_iiwa_joint_7"),
])
def test_invalid_action_holds_the_measured_position_with_a_reason(fast_guard, home, action, reason):
    q = home + 0.01
    cmd, status = fast_guard(action, q, ZERO)
    assert status.outcome is Outcome.HELD
    assert status.reasons[0].startswith(reason) and status.reasons[0].endswith("holding the current position")
    assert np.array_equal(cmd, q) and cmd.dtype == np.float64


def test_invalid_state_holds_the_last_command(fast_guard, home):
    cmd, _ = fast_guard(home + 0.01, home, ZERO)
    for q, qd, reason in [
        (None, ZERO, "joint_positions: missing (None)"),
        (home, None, "joint_velocities: missing (None)"),
        (np.full(7, np.nan), ZERO, "joint_positions: nan at joint lbr_iiwa_joint_1"),
        (home, np.full(7, np.inf), "joint_velocities: inf at joint lbr_iiwa_joint_1"),
    ]:
        out, status = fast_guard(home, q, qd)
        assert status.outcome is Outcome.HELD and status.reasons[0].startswith(reason), status.reasons
        assert np.array_equal(out, cmd), "an invalid state holds the last command sent"
        assert not fast_guard.estopped
        cmd, _ = fast_guard(home + 0.01, home, ZERO)  # valid input resets the invalid streak
    far = home.copy()
    far[3] = 2.5  # more than state_tolerance (0.1 rad) beyond the 2.094 rad limit
    out, status = fast_guard(home, far, ZERO)
    assert "joint lbr_iiwa_joint_4 measured 2.500 rad, more than 0.100 rad outside its limits -2.094..2.094 rad" \
        in status.reasons[0]


def test_repeated_invalid_input_latches_and_only_a_valid_reset_clears(fast_guard, home):
    for i in range(2):
        _, status = fast_guard(np.full(7, np.nan), home, ZERO)
        assert status.outcome is Outcome.HELD and not fast_guard.estopped
    fast_guard(home, home, ZERO)  # a valid action in between resets the streak
    for i in range(3):
        _, status = fast_guard(np.full(7, np.nan), home, ZERO)
    assert fast_guard.estopped and fast_guard.estop_cause == "invalid_input"
    assert status.outcome is Outcome.ESTOPPED and "e-stop latched (cause invalid_input)" in status.summary
    # latched: a good action still gets the hold command
    cmd, status = fast_guard(home + 0.05, home + 0.01, ZERO)
    assert np.array_equal(cmd, home + 0.01) and status.outcome is Outcome.ESTOPPED
    # reset refuses an invalid state and stays latched
    assert not fast_guard.reset(np.full(7, np.nan), ZERO)
    assert "reset refused: joint_positions: nan at joint lbr_iiwa_joint_1" in fast_guard.last_reset_refusal
    assert not fast_guard.reset(home, None) and not fast_guard.reset() and fast_guard.estopped
    assert fast_guard.reset(home, ZERO) and not fast_guard.estopped and fast_guard.estop_cause is None
    cmd, status = fast_guard(home + 0.01, home, ZERO)
    assert status.outcome is Outcome.PASSED and np.allclose(cmd, home + 0.01)
    assert fast_guard.counters["estops"]["invalid_input"] == 1


def test_external_estop_latches_until_reset(fast_guard, home):
    fast_guard.estop("operator pressed the button")
    assert fast_guard.estopped and fast_guard.estop_cause is EstopCause.EXTERNAL
    for _ in range(3):
        cmd, status = fast_guard(home + 0.1, home, np.full(7, 1.0))
        assert np.array_equal(cmd, home) and status.outcome is Outcome.ESTOPPED
    assert "cause external: operator pressed the button" in status.reasons[0]
    assert fast_guard.counters["estops"]["external"] == 1 and fast_guard.counters["held"] == 3
    assert fast_guard.reset(home, ZERO) and not fast_guard.estopped


def test_watchdog_holds_when_stale_and_latches_after_n_misses(make_guard, home, clock):
    guard = make_guard(clock=clock, collision_check=False, workspace_min=None, workspace_max=None,
                       watchdog_timeout=0.05, watchdog_misses_to_estop=3)
    assert guard.reset(home, ZERO)
    # before the first action: hold, no miss counted (the policy may not be up yet)
    cmd, status = guard.tick(clock(), home, ZERO)
    assert status.reasons == ["watchdog: no action received yet; holding"] and guard.counters["watchdog_misses"] == 0
    guard.feed(home + 0.01, now=clock())
    cmd, status = guard.tick(clock.advance(0.05), home, ZERO)  # exactly at the deadline: still fresh
    assert status.outcome is Outcome.PASSED and np.allclose(cmd, home + 0.01)
    cmd, status = guard.tick(clock.advance(0.001), home, ZERO)  # 51 ms old: stale
    assert status.outcome is Outcome.HELD and np.array_equal(cmd, home)
    assert status.reasons[0].startswith("watchdog: newest action is 51.0 ms old (timeout 50.0 ms), stale tick 1/3")
    guard.feed(home + 0.02)  # a fresh action: the miss streak restarts
    _, status = guard.tick(clock.advance(0.01), home, ZERO)
    assert status.outcome is Outcome.PASSED
    for k in range(1, 4):
        _, status = guard.tick(clock.advance(0.05), home, ZERO)
        assert f"stale tick {k}/3" in status.reasons[0]
    assert guard.estopped and guard.estop_cause == "watchdog" and status.outcome is Outcome.ESTOPPED
    guard.feed(home + 0.01, now=clock())  # fresh again, but the latch holds
    cmd, status = guard.tick(clock(), home, ZERO)
    assert status.outcome is Outcome.ESTOPPED and np.array_equal(cmd, home)
    assert guard.reset(home, ZERO)
    _, status = guard.tick(clock(), home, ZERO)
    assert status.reasons == ["watchdog: no action received yet; holding"], "reset drops the old action"


def test_watchdog_with_real_time(make_guard, home):
    guard = make_guard(collision_check=False, workspace_min=None, workspace_max=None,
                       watchdog_timeout=0.02, watchdog_misses_to_estop=2)
    assert guard.reset(home, ZERO)
    guard.feed(home + 0.01)
    _, fresh = guard.tick(time.monotonic(), home, ZERO)
    time.sleep(0.03)
    _, stale = guard.tick(time.monotonic(), home, ZERO)
    time.sleep(0.03)
    guard.tick(time.monotonic(), home, ZERO)
    assert fresh.outcome is Outcome.PASSED and stale.outcome is Outcome.HELD
    assert guard.estopped and guard.estop_cause == "watchdog"


def test_start_ramp_never_exceeds_the_velocity_limit_even_for_a_far_first_target(make_guard, home):
    guard = make_guard(collision_check=False, workspace_min=None, workspace_max=None)
    assert guard.reset(home, ZERO)
    target = home + np.array([0.9, -0.9, 0.9, 0.9, -0.9, 0.9, 0.9])  # within start_max_gap (1.0 rad)
    visited = run_in(guard, home, target, 30)
    speeds = np.abs(np.diff(visited, axis=0)) / 0.05
    ramp_limit = guard.limits.velocity * guard.config.start_velocity_scale
    assert np.all(speeds <= ramp_limit + 1e-9), "the start ramp runs at start_velocity_scale of the URDF limit"
    assert np.allclose(visited[-1], target) and guard.phase == "running"
    # after the ramp, the normal (faster) speed limit applies
    visited = run_in(guard, target, home, 20)
    assert np.abs(np.diff(visited, axis=0)).max() / 0.05 > ramp_limit.max()


def test_start_refuses_a_first_target_beyond_the_gap(fast_guard, home):
    far = home.copy()
    far[0] += 1.5
    for _ in range(2):
        cmd, status = fast_guard(far, home, ZERO)
        assert np.array_equal(cmd, home) and status.outcome is Outcome.HELD
    assert status.reasons == ["start: first target is 1.500 rad from the measured pose on joint lbr_iiwa_joint_1, "
                              "above start_max_gap 1.000 rad; refusing to move, holding"]
    assert fast_guard.counters["start_refusals"] == 2 and fast_guard.phase == "await_first_target"
    cmd, status = fast_guard(home + 0.01, home, ZERO)  # a near target starts the ramp
    assert np.allclose(cmd, home + 0.01) and fast_guard.phase == "running"


def test_resume_after_estop_release_ramps_again(fast_guard, home):
    run_in(fast_guard, home, home + 0.01, 2)
    assert fast_guard.phase == "running"
    fast_guard.estop("test")
    assert fast_guard.reset(home, ZERO) and fast_guard.phase == "await_first_target"
    far = home.copy()
    far[2] += 1.2
    _, status = fast_guard(far, home, ZERO)
    assert status.outcome is Outcome.HELD and "start_max_gap" in status.reasons[0]


def test_never_raises_even_when_the_wrapper_itself_fails(make_guard, home):
    def broken_clock() -> float:
        raise RuntimeError("clock died")

    guard = make_guard(clock=broken_clock, collision_check=False, workspace_min=None, workspace_max=None)
    assert guard.reset(home, ZERO)
    cmd, status = guard(home + 0.1, home, ZERO)
    assert np.array_equal(cmd, home) and status.outcome is Outcome.ESTOPPED
    assert guard.estop_cause == "internal_error" and "clock died" in status.reasons[0]


def test_before_any_valid_state_there_is_no_command(make_guard):
    guard = make_guard(collision_check=False, workspace_min=None, workspace_max=None)
    cmd, status = guard(np.zeros(7), None, None)
    assert cmd is None and status.outcome is Outcome.HELD and "no valid measured state yet" in status.summary


def test_module_interface_counters_report_and_save_load(fast_guard, home, tmp_path):
    out = fast_guard.forward({"action": home + 0.01, "q": home, "qd": ZERO})
    assert np.allclose(out, home + 0.01) and fast_guard.last_status.outcome is Outcome.PASSED
    assert fast_guard.forward({"action": None, "q": home, "qd": ZERO}).shape == (7,)
    out = fast_guard({"action": home + 0.02, "q": home + 0.01, "qd": ZERO})  # what Pipeline calls: module(x)
    assert isinstance(out, np.ndarray) and np.allclose(out, home + 0.02)
    fast_guard.input_spec.check({"action": home, "q": home, "qd": ZERO}, "safety.request")
    fast_guard.output_spec.check(out, "safety.command")
    report = json.loads(json.dumps(fast_guard.report()))
    assert report["counters"]["calls"] == 3 and report["counters"]["passed"] == 2
    assert report["counters"]["held"] == 1 and report["last_status"]["outcome"] == "PASSED"
    assert report["limits"]["names"][0] == "lbr_iiwa_joint_1" and report["max_speed"] == [5.0] * 7
    path = fast_guard.save(tmp_path / "safety.safetensors")
    meta, _ = SafetyWrapper.read_file(path)
    assert meta["config"]["position_margin"] == 0.05 and meta["output_spec"]["shape"] == [7]
    fast_guard.load(path)


def test_is_a_command_filter_for_the_sim_env(fast_guard, home):
    def env_step(command_filter, q_target, q, qd):  # the sim env's contract: (q_target, q, qd) -> (command, status)
        return command_filter(q_target, q, qd)

    cmd, status = env_step(fast_guard, home + 0.01, home, ZERO)
    assert np.allclose(cmd, home + 0.01) and status.outcome is Outcome.PASSED
