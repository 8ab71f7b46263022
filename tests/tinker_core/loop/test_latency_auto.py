"""`LatencyFollow`: a measured command latency is compensated only once it has stood (no ROS)."""

from __future__ import annotations

import pytest

from tinker_core.errors import ConfigError
from tinker_core.loop.latency_auto import LatencyFollow
from tinker_core.loop.latency_estimate import LatencyEstimate


def est(periods):
    return LatencyEstimate(periods, 0.99 if periods is not None else 0.2, 0.5, 100.0,
                           "" if periods is not None else "the arm has hardly moved")


def feed(follow, estimates):
    """One estimate per look (each look is ``look_every`` states); what was taken at each look."""
    taken = []
    for e in estimates:
        out = None
        for _ in range(follow.look_every):
            out = follow.state(lambda: e) or out
        taken.append(None if out is None else out.periods)
    return taken


def test_a_measurement_is_taken_after_it_has_stood_for_standing_looks_in_a_row():
    f = LatencyFollow(0, look_every=5, standing=3)
    assert feed(f, [est(4)] * 4) == [None, None, 4, None]  # taken once, at the third look
    assert f.periods == 4 and f.adopted == 1 and f.states == 20


def test_a_look_that_cannot_tell_or_says_another_lag_starts_the_count_again_and_keeps_what_is_compensated():
    f = LatencyFollow(2, look_every=1, standing=3)
    assert feed(f, [est(4), est(4), est(None), est(4), est(5), est(4), est(4)]) == [None] * 7
    assert f.periods == 2 and f.adopted == 0
    assert feed(f, [est(2)] * 5) == [None] * 5  # what is compensated already: nothing to take
    assert feed(f, [est(4)] * 3) == [None, None, 4]
    assert feed(f, [est(1)] * 3) == [None, None, 1]  # a latency that changes again is followed again
    assert f.adopted == 2


def test_the_estimate_is_looked_at_only_every_look_every_states():
    looks = []
    f = LatencyFollow(0, look_every=5, standing=1)
    for _ in range(12):
        f.state(lambda: looks.append(1) or est(None))
    assert len(looks) == 2


def test_a_start_outside_the_compensated_range_is_refused():
    with pytest.raises(ConfigError, match="latency_compensation"):
        LatencyFollow(-1)
