"""``limit_from``: the speed and acceleration limits from the measured state, or on the command stream.

A robot whose commands act L control periods after they are sent (network, driver buffering): from the measured
state, the acceleration limit lets a command lead the measured position by about one acceleration step, so the
arm creeps; on the command stream the commands follow the speed and acceleration limits themselves and stay within
one speed-limit step of the measured position (the same bound). The arm here is a test double: an ideal joint
that reaches each command exactly L periods after it was sent (no physics needed to show the limiter's
arithmetic; the PyBullet run is in docs/sim2real/variants.md).
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from tinker_core.errors import ConfigError
from tinker_safety.safety_wrapper import SafetyWrapper
from tinker_safety.testing import check_command

LATENCY = 7


def _drive(guard: SafetyWrapper, home: np.ndarray, target: np.ndarray, cycles: int) -> list[np.ndarray]:
    """Commands the guard sends towards ``target`` while the arm reaches each one LATENCY periods later."""
    dt = guard.config.control_period
    assert guard.reset(home, np.zeros(7))
    guard(home.copy(), home, np.zeros(7))  # the first target at the measured pose ends the start ramp
    in_flight = deque([home.copy()] * LATENCY)
    q, q_prev, sent = home.copy(), home.copy(), []
    for _ in range(cycles):
        cmd, status = guard(target, q, (q - q_prev) / dt)
        check_command(guard, target, q, cmd, status)  # the safety property holds in both modes
        sent.append(cmd)
        in_flight.append(cmd)
        q_prev, q = q, in_flight.popleft()
    return sent


def test_on_the_command_stream_a_laggy_arm_moves_at_up_to_the_speed_limit(make_guard, home):
    target = home + np.array([0.0, 0.0, 0.0, 0.0, 1.5, 0.0, 0.0])
    moved = {}
    for mode in ("measured", "command"):
        guard = make_guard(collision_check=False, workspace_min=None, workspace_max=None, limit_from=mode)
        sent = _drive(guard, home, target, 40)
        moved[mode] = sent[-1][4] - home[4]
        steps = np.diff(np.array(sent)[:, 4])
        if mode == "command":  # the command stream itself obeys the speed and the acceleration limit
            assert np.all(np.abs(steps) <= guard._vmax[4] * guard.config.control_period + 1e-12)
            acc = guard.config.accel_limit * guard.config.control_period ** 2
            assert np.all(np.diff(steps) <= acc + 1e-12), np.diff(steps).max()
    # from the measured state: a command leads the arm by one acceleration step (0.05 rad), advanced every
    # LATENCY periods; on the stream: by one speed-limit step (0.25 rad)
    assert moved["measured"] < 0.35, moved
    assert moved["command"] > 3 * moved["measured"], moved


def test_a_hold_stops_the_command_stream(make_guard, home):
    guard = make_guard(collision_check=False, workspace_min=None, workspace_max=None, limit_from="command")
    target = home + 0.5
    _drive(guard, home, np.clip(target, guard.command_lower, guard.command_upper), 10)
    q = guard.last_command
    held, status = guard(np.full(7, np.nan), q, np.zeros(7))  # an invalid action: hold at the measured pose
    np.testing.assert_array_equal(held, q)
    cmd, _ = guard(np.clip(target, guard.command_lower, guard.command_upper), q, np.zeros(7))
    acc = guard.config.accel_limit * guard.config.control_period ** 2
    assert np.all(np.abs(cmd - q) <= acc + 1e-12)  # from a stop: one acceleration step, not the stream's speed


def test_an_unknown_mode_is_refused(make_guard):
    with pytest.raises(ConfigError, match="limit_from: expected 'measured' or 'command', got 'stream'"):
        make_guard(limit_from="stream")
