"""A person's labels on episodes (`EpisodeLabels`) and intervention cycles through `CycleJoiner`, without ROS."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.errors import ConfigError
from tinker_core.loop.cycle_join import CycleJoiner
from tinker_core.loop.episode_label import EpisodeLabels
from tinker_core.transition import Transition


def _t(k: int, done: bool = False) -> Transition:
    return Transition(obs=np.full(3, k, np.float32), action=np.zeros(2, np.float32), reward=-0.1 * k,
                      terminated=done, info={"cycle": k}, next_obs=np.full(3, k + 1, np.float32))


def _run(labels: EpisodeLabels, plan, label_at=None) -> list[Transition]:
    """``plan``: (cycle, episode, done, time); ``label_at``: (time, success) applied before that time's add."""
    out, answer = [], None
    for k, ep, done, now in plan:
        if label_at is not None and now >= label_at[0] and answer is None:
            answer, got = labels.label(label_at[1], label_at[0])
            out += got
        out += labels.add(_t(k, done), ep, now)
    return out + labels.flush(), answer


PLAN = [(0, 1, False, 0.0), (1, 1, False, 0.1), (2, 1, True, 0.2), (10, 2, False, 0.3), (11, 2, False, 0.4),
        (12, 2, False, 5.0)]


def test_without_a_label_every_transition_goes_out_once_unchanged():
    out, _ = _run(EpisodeLabels(window_s=1.0), PLAN)
    assert sorted(int(t.obs[0]) for t in out) == [0, 1, 2, 10, 11, 12]
    assert [bool(t.terminated) for t in sorted(out, key=lambda t: t.obs[0])] == [False, False, True, False, False, False]
    assert not any("human_label" in t.info for t in out)


def test_the_last_transition_is_held_until_the_window_closes():
    labels = EpisodeLabels(window_s=1.0)
    got = []
    for k, ep, done, now in PLAN[:4]:
        got += labels.add(_t(k, done), ep, now)
    assert [int(t.obs[0]) for t in got] == [0, 1]  # 2 ended episode 1 at t=0.2: held until 1.2
    assert [int(t.obs[0]) for t in labels.release(1.19)] == []
    assert [int(t.obs[0]) for t in labels.release(1.2)] == [2]


def test_a_label_within_the_window_goes_on_the_ended_episode():
    labels = EpisodeLabels(window_s=1.0, success_reward=5.0, failure_reward=-1.0)
    out, answer = _run(labels, PLAN, label_at=(0.35, False))
    assert answer.episode == 1 and "failure" in answer.message
    last = [t for t in out if int(t.obs[0]) == 2]
    # a failure is penalised and stays bootstrapped: its own reward (-0.2) plus the penalty, truncated, not terminal
    assert len(last) == 1 and not last[0].terminated and last[0].truncated and last[0].info["human_label"] == "failure"
    assert abs(last[0].reward - (-0.2 - 1.0)) < 1e-9
    assert sorted(int(t.obs[0]) for t in out) == [0, 1, 2, 10, 11, 12]  # nothing twice, nothing lost


def test_a_label_after_the_window_goes_on_the_running_episode_and_ends_it_for_the_learner():
    labels = EpisodeLabels(window_s=1.0, success_reward=5.0)
    out, answer = _run(labels, PLAN, label_at=(2.0, True))
    assert answer.episode == 2
    by = {int(t.obs[0]): t for t in out}
    assert by[11].terminated and by[11].reward == 5.0 and by[11].info["human_label"] == "success"
    assert 12 not in by and labels.after_label == 1  # after the label, episode 2 gives the learner nothing more
    assert not by[2].info.get("human_label")
    answer2, _ = labels.label(True, 6.0)
    assert answer2.episode is None and "labelled already" in answer2.message


def test_a_persons_transitions_dropped_after_a_label_are_counted_apart():
    labels = EpisodeLabels(window_s=1.0)
    labels.add(_t(10), 2, 0.3)
    assert labels.label(True, 0.4)[0].episode == 2
    person = _t(11)
    person.info["intervention"] = True
    labels.add(person, 2, 0.5)
    labels.add(_t(12), 2, 0.6)
    assert (labels.after_label, labels.after_label_interventions) == (2, 1)


def test_a_label_with_nothing_to_label_says_so():
    answer, out = EpisodeLabels().label(True, 0.0)
    assert answer.episode is None and "no episode" in answer.message and out == []


def _cycle(j: CycleJoiner, k: int, person=None):
    s = 1_000 * (k + 1)
    j.features(s, np.full(4, k, np.float32))
    j.action(s, np.array([0.1, 0.2, 0.9]), "1")  # two joints and a suction
    j.command(s, np.zeros(2), "passed")
    if person is not None:
        j.intervention(s, person)
    return j.outcome(s, k, 0, -0.1 * k, terminated=False, truncated=False)


def test_intervention_cycles_carry_the_persons_action_and_the_flag():
    j = CycleJoiner()
    closed = []
    for k in range(6):
        closed += _cycle(j, k, np.array([-0.5, 0.5]) if k in (2, 3) else None)
    closed += j.flush()
    ts = {int(c.transition.obs[0]): c.transition for c in closed if c.transition is not None}
    assert set(ts) == {0, 1, 2, 3, 4}
    for k in (2, 3):
        assert ts[k].info["intervention"] is True
        assert np.allclose(ts[k].action, [-0.5, 0.5, 0.9])  # the person's joints, the policy's suction
    for k in (0, 1, 4):
        assert "intervention" not in ts[k].info and np.allclose(ts[k].action, [0.1, 0.2, 0.9])
    recs = {int(c.record["cycle"]): c.record for c in closed}
    assert recs[2]["intervention"] and not recs[1]["intervention"]


def test_a_persons_action_that_comes_before_its_cycle_opened_is_kept_for_it():
    """The bridge's executor takes ready topics in its own order: safety's ``intervened`` and command can be handled
    before the cycle's features and action opened it (a CI run recorded flagged cycles without the person's
    action). They wait for their cycle; a stop's command, which never gets a cycle, ages out."""
    j = CycleJoiner()
    closed = []
    for k in range(6):
        s = 1_000 * (k + 1)
        if k in (2, 3):
            j.intervention(s, np.array([-0.5, 0.5]))
            j.command(s, np.zeros(2), "passed")
        j.command(10**9 + k, np.zeros(2), "stop")  # stamps no cycle ever has
        closed += _cycle(j, k)
    closed += j.flush()
    ts = {int(c.transition.obs[0]): c.transition for c in closed if c.transition is not None}
    assert set(ts) == {0, 1, 2, 3, 4} and j.interventions_without_action == 0
    for k in (2, 3):
        assert ts[k].info["intervention"] is True and np.allclose(ts[k].action, [-0.5, 0.5, 0.9])
    assert j.incomplete == 0 and len(j._early) <= 8  # the stops opened no cycle and are bounded


def test_a_flagged_cycle_without_the_persons_action_gives_no_transition():
    from tinker_core.loop.cycle_join import new_cycle, transition

    cur, nxt = new_cycle(1), new_cycle(2)
    for r, k in ((cur, 0), (nxt, 1)):
        r.update(cycle=k, policy_input=[k], raw_action=[0.1])
    assert transition(cur, nxt) is not None
    cur["intervention"] = True
    assert transition(cur, nxt) is None


def test_a_zero_window_turns_labels_off_and_nothing_waits():
    labels = EpisodeLabels(window_s=0.0)
    assert [int(t.obs[0]) for t in labels.add(_t(0), 1, 0.0)] == [0]
    answer, _ = labels.label(True, 0.1)
    assert answer.episode is None and "off" in answer.message


def test_a_failure_label_never_looks_better_than_failing_on():
    """A failure label only lowers what the learner sees: the labelled transition's reward drops by the penalty and
    its value is still bootstrapped (a terminal 0 would beat per-step rewards of -distance); a positive penalty is
    refused."""
    for reward in (-0.7, -0.05, 0.3):
        labels = EpisodeLabels(window_s=1.0, failure_reward=-0.5)
        t = Transition(obs=np.zeros(3, np.float32), action=np.zeros(2, np.float32), reward=reward, terminated=False, truncated=True,
                       info={"cycle": 0}, next_obs=np.ones(3, np.float32))
        labels.add(t, 0, 0.0)
        answer, out = labels.label(False, 0.1)
        assert answer.episode == 0 and "bootstrapped" in answer.message
        assert out[0].reward <= reward - 0.5 + 1e-9 and not out[0].terminated and out[0].truncated
    with pytest.raises(ConfigError, match="label_failure_reward: expected <= 0"):
        EpisodeLabels(failure_reward=0.5)
