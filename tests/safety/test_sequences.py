"""The safety property over sequences (safety/sequences.py): a true robot, an injected clock that stalls, runs
backwards and jumps, resets and e-stops at random moments, bad actions, bad states and bad stamps; 200,000 wrapper
calls with no violation. benchmarks/safety.py runs the same property and reports the count."""

from __future__ import annotations

import dataclasses

import pytest

from tinker_safety import JointLimits, default_urdf, load_safety_config
from tinker_safety.sequences import CI_CALLS, run_sequences, sequence_config


@pytest.fixture(scope="module")
def limits() -> JointLimits:
    return JointLimits.from_urdf(default_urdf())


def test_sequence_property_holds_over_200000_calls(limits):
    report = run_sequences(limits, sequence_config(load_safety_config()), CI_CALLS, seed=0)
    assert report.violations == [], "\n".join(report.violations)
    assert report.calls >= 200_000
    # the generated sequences really reach every branch
    out = report.outcomes
    assert out["passed"] and out["rate_limited"] and out["held"] and out["estopped"]
    assert report.no_command and report.refused_states and report.resets and report.feeds
    assert all(report.estops[c] for c in ("external", "invalid_input", "watchdog")), report.estops


def test_sequence_property_with_the_workspace_box_and_collision_check(limits):
    """The shipped YAML (geometry on) with the jump check on: slower per call, so fewer calls."""
    report = run_sequences(limits, dataclasses.replace(load_safety_config(), state_jump_scale=1.2), 2000, seed=1)
    assert report.violations == [], "\n".join(report.violations)


@pytest.mark.parametrize("weaker", [{"state_jump_scale": None}, {"watchdog_misses_to_estop": 5},
                                    {"velocity_scale": 0.6}, {"state_max_age": 100.0}])
def test_the_checks_catch_a_wrapper_weaker_than_its_configuration(limits, weaker):
    config = sequence_config(load_safety_config())
    report = run_sequences(limits, config, 50_000, seed=1, max_violations=1,
                           wrapper_config=dataclasses.replace(config, **weaker))
    assert report.violations, f"a wrapper with {weaker} passed the checks made for {config}"
