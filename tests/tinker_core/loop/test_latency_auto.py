"""`LatencyFollow`: a measured command latency is compensated only once it has stood (no ROS)."""

from __future__ import annotations

from tinker_core.loop.latency_auto import LatencyFollow
from tinker_core.loop.latency_estimate import LatencyEstimate


def est(periods):
    return LatencyEstimate(periods, 0.99 if periods is not None else 0.2, 0.5, 100.0,
                           "" if periods is not None else "the arm has hardly moved")


class Followed:
    """The owner of what is compensated (the safety stage): it takes each latency the follow returns."""

    def __init__(self, follow: LatencyFollow, compensated: int):
        self.follow, self.compensated = follow, compensated

    def feed(self, estimates) -> list:
        """One estimate per look (each look is ``look_every`` states); what was taken at each look."""
        taken = []
        for e in estimates:
            out = None
            for _ in range(self.follow.look_every):
                out = self.follow.state(lambda: e, self.compensated) or out
            if out is not None:
                self.compensated = out.periods
            taken.append(None if out is None else out.periods)
        return taken


def test_a_measurement_is_taken_after_it_has_stood_for_standing_looks_in_a_row():
    f = Followed(LatencyFollow(look_every=5, standing=3), 0)
    assert f.feed([est(4)] * 4) == [None, None, 4, None]  # taken once, at the third look
    assert f.compensated == 4 and f.follow.adopted == 1 and f.follow.states == 20


def test_a_look_that_cannot_tell_or_says_another_lag_starts_the_count_again_and_keeps_what_is_compensated():
    f = Followed(LatencyFollow(look_every=1, standing=3), 2)
    assert f.feed([est(4), est(4), est(None), est(4), est(5), est(4), est(4)]) == [None] * 7
    assert f.compensated == 2 and f.follow.adopted == 0
    assert f.feed([est(2)] * 5) == [None] * 5  # what is compensated already: nothing to take
    assert f.feed([est(4)] * 3) == [None, None, 4]
    assert f.feed([est(1)] * 3) == [None, None, 1]  # a latency that changes again is followed again
    assert f.follow.adopted == 2


def test_the_estimate_is_looked_at_only_every_look_every_states():
    looks = []
    f = LatencyFollow(look_every=5, standing=1)
    for _ in range(12):
        f.state(lambda: looks.append(1) or est(None), 0)
    assert len(looks) == 2
