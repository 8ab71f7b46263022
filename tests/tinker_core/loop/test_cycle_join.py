"""Control cycles joined into transitions, without ROS: episode ends, resets, dropped and late messages.

Each simulated cycle k carries its number in the features and in the reward (``-0.1 * k``), so a
transition shows which cycles it joined: its reward must be the one its next observation implies.
"""

from __future__ import annotations

import numpy as np

from tinker_core.loop.cycle_join import FIELDS, CycleJoiner, new_cycle, transitions


def _feed(j: CycleJoiner, cycle: int, episode: int, done: bool = False, drop: tuple[str, ...] = (),
          status: str = "passed"):
    stamp = 1_000_000 * cycle
    if "features" not in drop:
        j.features(stamp, np.full(5, cycle, np.float32))
    if "action" not in drop:
        j.action(stamp, np.full(7, 0.1 * cycle), "1")
    j.target(stamp, np.zeros(7))
    j.command(stamp, np.zeros(7), status)
    if "outcome" in drop:
        return []
    return j.outcome(stamp, cycle, episode, -0.1 * cycle, terminated=done, truncated=False)


def _run(plan, j: CycleJoiner | None = None) -> list:
    j = j or CycleJoiner()
    closed = []
    for args in plan:
        closed += _feed(j, *args)
    closed += j.flush()
    return closed


def _pairs(closed):
    out = [(int(c.transition.obs[0]), int(c.transition.next_obs[0]), c.transition.reward, c.transition.terminated)
           for c in closed if c.transition is not None]
    for obs, nxt, reward, _ in out:
        assert np.isclose(reward, -0.1 * nxt), (obs, nxt, reward)  # the reward of the state next_obs shows
    return [(a, b, t) for a, b, _, t in out]


def test_an_episodes_last_state_is_never_joined_to_the_next_episodes_first():
    closed = _run([(c, 0 if c <= 4 else 1, c == 4) for c in range(1, 10)])
    assert _pairs(closed) == [(1, 2, False), (2, 3, False), (3, 4, True), (5, 6, False), (6, 7, False),
                              (7, 8, False), (8, 9, False)]
    assert [c.record["cycle"] for c in closed] == list(range(1, 10))  # every cycle is recorded


def test_a_transition_carries_the_stamp_of_the_state_it_ends_in():
    """The learner measures the transitions edge's latency from it, as `tinker flow` does a topic's."""
    closed = _run([(c, 0) for c in range(1, 5)])
    ts = [c.transition for c in closed if c.transition is not None]
    assert [t.info["stamp_ns"] for t in ts] == [1_000_000 * int(t.next_obs[0]) for t in ts] == [2e6, 3e6, 4e6]


def test_a_reset_without_done_is_not_bridged():
    """The robot reset (episode 0 -> 1) on a cycle that did not report done: still no transition across it."""
    closed = _run([(1, 0), (2, 0), (3, 1), (4, 1)])
    assert _pairs(closed) == [(1, 2, False), (3, 4, False)]


def test_a_dropped_outcome_gives_no_transition_into_or_out_of_that_cycle():
    closed = _run([(1, 0), (2, 0), (3, 0, False, ("outcome",)), (4, 0), (5, 0), (6, 0), (7, 0)])
    assert _pairs(closed) == [(1, 2, False), (4, 5, False), (5, 6, False), (6, 7, False)]
    assert 3 not in [c.record["cycle"] for c in closed]


def test_a_held_cycle_and_lost_features_give_no_transition():
    closed = _run([(1, 0), (2, 0, False, ("action",)), (3, 0), (4, 0, False, ("features",)), (5, 0), (6, 0)])
    assert _pairs(closed) == [(1, 2, False), (5, 6, False)]  # 2 held; 3 -> 4 and 4 -> 5 lack features


def test_a_lost_cycle_is_not_skipped_over():
    """Cycle 3 never reached the bridge at all: 2 must not be joined to 4 (a reward two steps later)."""
    closed = _run([(1, 0), (2, 0), (4, 0), (5, 0)])
    assert _pairs(closed) == [(1, 2, False), (4, 5, False)]


def test_late_messages_of_a_closed_cycle_are_ignored():
    j = CycleJoiner()
    closed = []
    for c in range(1, 7):
        closed += _feed(j, c, 0)
    assert [c.record["cycle"] for c in closed] == [1, 2, 3]
    j.features(1_000_000, np.full(5, 99, np.float32))  # cycle 1 is written: no new cycle opens for it
    j.command(2_000_000, np.ones(7), "late")
    closed += j.flush()
    assert [c.record["cycle"] for c in closed] == [1, 2, 3, 4, 5, 6]
    assert _pairs(closed) == [(1, 2, False), (2, 3, False), (3, 4, False), (4, 5, False), (5, 6, False)]


def test_replay_import_joins_recorded_cycles_by_the_same_rule():
    live = _run([(c, 0 if c <= 4 else 1, c == 4) for c in range(1, 10)])
    recorded = [dict(c.record) for c in live]
    assert set(recorded[0]) == set(FIELDS) and set(new_cycle()) == set(FIELDS)
    replayed = transitions(recorded)
    assert [(int(t.obs[0]), int(t.next_obs[0]), t.reward) for t in replayed] == \
           [(int(c.transition.obs[0]), int(c.transition.next_obs[0]), c.transition.reward)
            for c in live if c.transition is not None]


def test_newest_cycle_is_the_newest_state_whose_outcome_came():
    j = CycleJoiner()
    assert j.newest_cycle is None
    for k in range(6):
        _feed(j, k, 1)
    _feed(j, 6, 1, drop=("outcome",))  # its features and action are in, its outcome is not
    assert j.newest_cycle == 5


def test_a_persons_cycle_that_gives_no_transition_is_counted_by_reason():
    j = CycleJoiner()
    for k in range(3):
        _feed(j, k, 1)
    j.intervention(1_000_000 * 2, np.zeros(7))  # cycle 2: a person's, with their action
    _feed(j, 3, 1, drop=("features",))  # the next cycle has no features: no transition from 2
    for k in range(4, 8):
        _feed(j, k, 1)
    j.flush()
    assert j.interventions_lost == {"no_features": 1}


def test_cycles_the_guard_held_give_no_transition_and_its_stop_costs_the_estop_reward():
    """The policy still acts while the e-stop is latched (its actions never reach the robot): those cycles would teach
    that an action does nothing. The cycle whose command the guard stopped gives its transition, costing the stop."""
    statuses = {3: "collision", 4: "estopped", 5: "estopped", 6: "held", 7: "rate_limited"}
    j = CycleJoiner(estop_reward=-5.0)
    closed = _run([(c, 0, False, (), statuses.get(c, "passed")) for c in range(1, 10)], j)
    ts = [c.transition for c in closed if c.transition is not None]
    assert [(int(t.obs[0]), int(t.next_obs[0])) for t in ts] == [(1, 2), (2, 3), (3, 4), (7, 8), (8, 9)]
    stop = ts[2]
    assert stop.info["safety_stop"] is True and stop.info["safety_status"] == "collision"
    assert np.isclose(stop.reward, -0.1 * 4 - 5.0) and not stop.terminated  # bootstrapped: the robot goes on
    assert [bool(t.info.get("safety_stop")) for t in ts] == [False, False, True, False, False]
    assert np.isclose(ts[3].reward, -0.8)  # a shortened command was still run: its transition stays as it is
    assert (j.not_executed, j.stops) == (3, 1)
    assert len(closed) == 9  # every cycle is still recorded, held ones too
    replayed = transitions([dict(c.record) for c in closed], estop_reward=-5.0)
    assert [(int(t.obs[0]), t.reward) for t in replayed] == [(int(t.obs[0]), t.reward) for t in ts]


def test_a_stop_that_gives_no_transition_is_counted_by_reason():
    """A stop the learner never pays for shows in the bridge's /diagnostics (``stops_lost.REASON``): here one on the
    state that ended its episode (the robot reset after it), one whose next state's features were lost and one whose
    next outcome never came."""
    plan = [(1, 0, False, (), "passed"), (2, 0, True, (), "collision"),  # the ended state's command stopped
            (3, 1, False, (), "collision"), (4, 1, False, ("features",), "estopped"),
            (5, 1, False, (), "passed"), (6, 1, False, (), "collision"), (7, 1, False, ("outcome",), "estopped")]
    j = CycleJoiner()
    closed = _run(plan, j)
    assert j.stops == 0 and [c.record["cycle"] for c in closed] == [1, 2, 3, 4, 5, 6]
    assert j.stops_lost == {"episode_changed": 1, "no_features": 1, "no_next": 1}
    assert j.not_executed == 1  # cycle 4's (cycle 7's never closed with an outcome)
