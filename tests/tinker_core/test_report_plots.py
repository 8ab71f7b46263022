"""The report figure: it draws what it is given (read back from the plot), in the shared bins, into a real PNG.

The inputs are plain values as the demo and ``tinker eval`` hand them over; the intervention counters are
a real SafetyWrapper's, driven through commands that it clips, rate-limits, holds and e-stops.
"""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.errors import ConfigError
from tinker_core.report_data import (INTERVENTION_KINDS, LATENCY_EDGES_MS, EpisodeSeries, InterventionSeries,
                                     LatencyHistogram, ReportFigureData, safety_counts)
from tinker_core.report_plots import draw_report


def _guard_with_marks():
    """A real SafetyWrapper (the kuka iiwa's limits and the shipped config), its counters marked after each of
    four 'episodes' of commands that it passes, rate-limits, clips, holds and e-stops."""
    from tinker_cli._compose import make_guard

    guard = make_guard()
    q0 = np.zeros(guard.dof)
    assert guard.reset(q0, np.zeros(guard.dof))
    series = InterventionSeries()
    rng = np.random.default_rng(0)
    for ep in range(4):
        for _ in range(10 + 5 * ep):
            a = q0 + rng.normal(0.0, 0.2 * (ep + 1), guard.dof)  # big steps: rate-limited
            if ep == 2:
                a = np.full(guard.dof, 9.0)  # beyond every limit: clipped (and rate-limited)
            guard(a, q0, np.zeros(guard.dof))
        if ep == 3:
            guard(np.full(guard.dof, np.nan), q0, np.zeros(guard.dof))  # invalid: held
            guard.estop("test")
            guard(q0, q0, np.zeros(guard.dof))  # latched: held
        series.mark(ep, guard.counters)
    return guard, series


def test_the_interventions_per_episode_add_up_to_the_safety_wrappers_counters():
    guard, series = _guard_with_marks()
    try:
        final = safety_counts(guard.counters)
        assert series.totals == final
        assert final["rate_limited"] > 0 and final["clipped"] > 0 and final["held"] >= 2 and final["estop"] == 1
        assert series.per_interval["estop"] == [0, 0, 0, 1] and series.per_interval["clipped"][2] > 0
        assert series.since_last(guard.counters) == dict.fromkeys(INTERVENTION_KINDS, 0)
    finally:
        guard.close()


def test_a_live_series_keeps_the_newest_intervals_and_counts_them_all():
    kept = InterventionSeries(keep=2)
    for i, c in enumerate([{"clipped": 1}, {"clipped": 3}, {"clipped": 6}, {"clipped": 2}]):  # then a restart
        kept.mark(i, c)
    assert kept.labels == [2, 3] and kept.per_interval["clipped"] == [3, 2] and kept.totals["clipped"] == 8
    eps = EpisodeSeries(keep=2)
    for ok in (True, False, True):
        eps.add(ok, 1)
    assert [r["index"] for r in eps.rows] == [1, 2] and (eps.total, eps.successes) == (3, 2)


def test_the_figure_draws_the_histogram_of_its_latencies_and_the_interventions_it_got(tmp_path):
    guard, series = _guard_with_marks()
    guard.close()
    lat = np.concatenate([np.random.default_rng(1).lognormal(np.log(2.0), 0.3, 500), [0.5, 31.0, 52.6]])
    episodes = EpisodeSeries()
    for i, (ok, v) in enumerate([(False, 0), (True, 0), (True, 3), (False, 4)]):
        episodes.add(ok, v, ret=-1.0 + i, phase="before" if i < 2 else "after")
    data = ReportFigureData(title="test", episodes=episodes, latency=LatencyHistogram.of(lat, "state -> command (ms)"),
                            interventions=series, deadline_ms=50.0,
                            phases={"before": "before", "after": "after"})
    drawn = draw_report(data, tmp_path / "figure.png")

    png = (tmp_path / "figure.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    assert drawn["latency"]["counts"] == np.histogram(lat, LATENCY_EDGES_MS)[0].tolist()
    assert sum(drawn["latency"]["counts"]) == len(lat)
    assert {k: sum(drawn["interventions"][k]) for k in INTERVENTION_KINDS} == safety_counts(guard.counters)
    assert drawn["success"]["success"] == [0.0, 1.0, 1.0, 0.0]
    assert drawn["success"]["version_changes"] == [2, 3]
    assert drawn["success"]["return"] == [-1.0, 0.0, 1.0, 2.0]


def test_a_sorting_run_draws_the_share_of_objects_sorted_beside_full_success(tmp_path):
    episodes = EpisodeSeries()
    for ok, share in [(False, 0.5), (True, 1.0), (False, 0.0), (False, 0.5)]:
        episodes.add(ok, 0, objects=share)
    drawn = draw_report(ReportFigureData(title="sort", episodes=episodes, latency=LatencyHistogram(),
                                         interventions=None), tmp_path / "sort.png")
    assert drawn["success"]["objects"] == [0.5, 1.0, 0.0, 0.5]
    assert drawn["success"]["objects_rolling"] == [0.5, 0.75, 0.5, 0.5]
    reach = EpisodeSeries()
    reach.add(True, 0)
    assert not reach.sorting and "objects" not in draw_report(
        ReportFigureData(title="reach", episodes=reach, latency=LatencyHistogram(), interventions=None),
        tmp_path / "reach.png")["success"]


def test_without_a_safety_wrapper_the_figure_says_so_and_still_draws(tmp_path):
    data = ReportFigureData(title="no guard", episodes=EpisodeSeries(), latency=LatencyHistogram(), interventions=None)
    drawn = draw_report(data, tmp_path / "empty.png")
    assert drawn["interventions"] == {} and sum(drawn["latency"]["counts"]) == 0
    assert (tmp_path / "empty.png").stat().st_size > 5_000


def test_a_live_histogram_has_the_same_bins_and_brackets_its_percentiles():
    lat = np.random.default_rng(2).lognormal(np.log(3.0), 0.5, 2000)
    exact, live = LatencyHistogram.of(lat), LatencyHistogram(keep_values=False)
    live.extend(lat)
    assert live.counts.tolist() == exact.counts.tolist()
    for q in (50, 99):
        hi = live.percentile(q)
        lo = LATENCY_EDGES_MS[np.searchsorted(LATENCY_EDGES_MS, hi) - 1]
        assert lo <= exact.percentile(q) <= hi


def test_bad_latencies_and_counters_are_refused_with_their_value():
    with pytest.raises(ConfigError, match="nan"):
        LatencyHistogram().add(float("nan"))
    with pytest.raises(ConfigError, match="-1"):
        LatencyHistogram().add(-1.0)
    with pytest.raises(ConfigError, match="'clipped'.*'many'"):
        safety_counts({"clipped": "many"})
