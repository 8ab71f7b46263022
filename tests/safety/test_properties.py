"""The safety property under hypothesis: whatever the action, for any valid state, the command is DoF-shaped
float64, inside the position limits, and no faster than the speed limit (safety/testing.py holds the property;
benchmarks/safety.py runs it with 100,000 cases)."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_safety.testing import CI_EXAMPLES, check_command, property_test


@pytest.mark.parametrize("limit_from", ["measured", "command"])
def test_property_limits_only(make_guard, limit_from):
    guard = make_guard(collision_check=False, workspace_min=None, workspace_max=None, state_jump_scale=None,
                       limit_from=limit_from)
    calls = []
    property_test(guard, CI_EXAMPLES, on_case=lambda: calls.append(1))()
    assert len(calls) >= CI_EXAMPLES
    counters = guard.counters
    # the generated inputs really exercise every branch
    assert counters["passed"] and counters["clipped"] and counters["rate_limited"] and counters["invalid_inputs"]


@pytest.mark.parametrize("limit_from", ["measured", "command"])
def test_property_with_workspace_and_collision_check(make_guard, limit_from):
    guard = make_guard(state_jump_scale=None, limit_from=limit_from)  # the shipped kuka_iiwa.yaml, each call an independent state
    property_test(guard, CI_EXAMPLES // 3)()
    assert guard.counters["collision"] or guard.counters["workspace"]


def test_checker_catches_an_unsafe_command(make_guard):
    """The property itself can fail: a pass-through of a far target violates it."""
    guard = make_guard(collision_check=False, workspace_min=None, workspace_max=None)
    q = np.zeros(7)
    for bad in (np.full(7, 3.0), np.full(7, 0.5), np.zeros(6), np.zeros(7, dtype=np.float32)):
        try:
            check_command(guard, bad, q, bad, guard.last_status)
        except AssertionError:
            continue
        raise AssertionError(f"check_command accepted {bad!r}")
