"""StateGate (ROS-free): the trust rules the safety node applies to states that arrive over a topic."""

import numpy as np
import pytest

from tinker_safety.state_gate import StateGate

MS = 1_000_000
VMAX = np.full(3, 1.0)  # rad/s


def gate(**kw) -> StateGate:
    args = dict(max_age_s=0.5, max_future_s=0.05, jump_tolerance=0.05, quarantine_s=1.0) | kw
    return StateGate(VMAX, "/joint_states", **args)


def feed(g: StateGate, q, t_ms: int, *, publishers=1, episode=None, stamp_ms=None):
    """One state arriving at t_ms (monotonic and stamp clock alike unless stamp_ms says otherwise)."""
    stamp = (t_ms if stamp_ms is None else stamp_ms) * MS
    return g.check(np.asarray(q, dtype=float), stamp, publishers, t_ms * MS, t_ms * MS, episode)


def test_plausible_motion_is_trusted_and_a_jump_is_refused_naming_the_joint():
    g = gate()
    assert feed(g, [0, 0, 0], 1000) == ("", "")
    assert feed(g, [0.05, 0, 0], 1050) == ("", "")  # 1 rad/s x 50 ms + 0.05
    kind, why = feed(g, [0.05, 0.8, 0], 1100)
    assert kind == "implausible" and "joint 1 moved 0.800 rad" in why and "/joint_states" in why


def test_a_declared_episode_start_skips_the_jump_check_once_and_is_flagged_for_a_rebase():
    g = gate()
    assert feed(g, [0, 0, 0], 1000, episode=3) == ("", "") and not g.new_episode
    assert feed(g, [0.9, -0.9, 0.5], 1050, episode=4) == ("", "")
    assert g.new_episode and g.episode_starts == 1
    assert feed(g, [0.9, -0.9, 0.5], 1100, episode=4) == ("", "") and not g.new_episode
    # the same episode number again: no declaration, the jump check applies
    assert feed(g, [0, 0, 0], 1150, episode=4)[0] == "implausible"


def test_a_declaration_does_not_excuse_a_second_publisher_or_a_bad_stamp():
    g = gate()
    feed(g, [0, 0, 0], 1000, episode=0)
    assert feed(g, [1, 1, 1], 1050, episode=1, publishers=2)[0] == "publishers"
    assert not g.new_episode
    assert feed(g, [1, 1, 1], 1100, episode=1, stamp_ms=5000)[0] == "future"
    assert feed(g, [1, 1, 1], 1150, episode=1, stamp_ms=100)[0] == "too_old"
    # the first trusted state of the new episode is still the declared start
    assert feed(g, [1, 1, 1], 1200, episode=1) == ("", "") and g.new_episode


def test_a_driver_without_episode_numbers_never_declares_a_reset():
    g = gate()
    feed(g, [0, 0, 0], 1000)
    assert feed(g, [1, 0, 0], 1050)[0] == "implausible" and not g.new_episode


def test_two_interleaved_sources_are_quarantined():
    g = gate(quarantine_s=1.0)
    feed(g, [0, 0, 0], 1000)
    assert feed(g, [1, 0, 0], 1050)[0] == "implausible"
    kind, why = feed(g, [0, 0, 0], 1100)  # back: a second jump within the quarantine
    assert kind == "implausible" and "refused for 1 s" in why
    assert feed(g, [0, 0, 0], 1150)[0] == "quarantine"
    assert feed(g, [0, 0, 0], 2200) == ("", "")


@pytest.mark.parametrize("pubs", [2, 5])
def test_more_than_one_publisher_refuses_even_a_plausible_state(pubs):
    g = gate()
    feed(g, [0, 0, 0], 1000)
    assert feed(g, [0, 0, 0], 1050, publishers=pubs)[0] == "publishers"
