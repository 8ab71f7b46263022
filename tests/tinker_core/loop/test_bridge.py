"""`ExperienceBridge`, without ROS: a cycle's streams in, transitions to a real ZeroMQ receiver (the learner's end) out.

What the ``experience_bridge`` node does with each message, fed here as the graph would publish them: the join
across an episode boundary, the success sensor's counters-only path, a person's label and a person's cycle.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from tinker_core.action_chain import ActionChain, ActionChainConfig
from tinker_core.errors import ValidationError
from tinker_core.loop.bridge import ExperienceBridge
from tinker_core.loop.episode_label import EpisodeLabels
from tinker_core.transport import TransitionReceiver, TransitionSender


@pytest.fixture
def link():
    learner = TransitionReceiver("tcp://127.0.0.1:0")
    sender = TransitionSender(learner.endpoint, hwm=1000)
    yield sender, learner
    sender.close(linger_ms=200)
    learner.close()


def _received(learner: TransitionReceiver, n: int) -> list:
    got = []
    for _ in range(30):
        got += learner.recv_many(64, timeout_ms=100)
        if len(got) >= n:
            break
    return got


def _cycle(b: ExperienceBridge, cycle: int, episode: int, done: bool, now: float = 0.0) -> None:
    stamp = 1_000_000 * cycle
    b.features(stamp, np.full(5, cycle, np.float32), now)  # the features carry their cycle number
    b.action(stamp, np.full(7, 0.1 * cycle), "1")
    b.task(stamp, cycle, episode, -0.1 * cycle, success=done, done=done, now=now)


def test_no_transition_joins_an_episodes_last_state_to_the_next_episode(link):
    sender, learner = link
    b = ExperienceBridge(EpisodeLabels(window_s=0.0), sender)  # labels off: nothing waits
    # episode 0: cycles 1..4, done (success) at cycle 4; the robot then resets: episode 1 from cycle 5
    for cycle in range(1, 10):
        _cycle(b, cycle, 0 if cycle <= 4 else 1, cycle == 4)
    got = _received(learner, 5)
    pairs = [(int(t.obs[0]), int(t.next_obs[0]), bool(t.terminated)) for t in got]
    # cycles 1..6 are final (the joiner keeps the last 3 open); 4 -> 5 would teleport across the reset
    assert pairs == [(1, 2, False), (2, 3, False), (3, 4, True), (5, 6, False), (6, 7, False)], pairs
    assert b.transitions == 5 and b.values()["sent"] == 5 and b.values()["reward_source"] == "sim"


def test_a_label_goes_out_with_the_episodes_last_transition(link):
    sender, learner = link
    b = ExperienceBridge(EpisodeLabels(window_s=60.0, success_reward=1.0), sender)
    for cycle in range(1, 8):  # one episode, never ended by the robot
        _cycle(b, cycle, 0, False, now=time.monotonic())
    assert b.transitions == 3  # 1 -> 2 .. 3 -> 4 sent; 4 -> 5, the newest joined, waits for a label
    done = b.label(True, time.monotonic())
    assert done.episode == 0 and b.last_labelled is not None
    got = _received(learner, 4)
    assert len(got) == 4 and got[-1].reward == 1.0 and got[-1].terminated and int(got[-1].obs[0]) == 4
    assert b.values()["labels"] == 1


def test_a_persons_cycle_needs_the_running_chain(link):
    sender, learner = link
    b = ExperienceBridge(EpisodeLabels(window_s=0.0), sender)
    lower, upper = -np.ones(7) * 3, np.ones(7) * 3
    with pytest.raises(ValidationError, match="none known yet"):
        b.intervened(1_000_000, np.zeros(14))
    b.chain = ActionChain(ActionChainConfig(), lower, upper)
    stamp = 2_000_000
    b.features(stamp, np.full(5, 2, np.float32), 0.0)
    b.action(stamp, np.zeros(7), "1")
    b.command(stamp, np.zeros(7), "passed", intervention=True)
    b.intervened(stamp, np.concatenate([np.full(7, 0.05), np.zeros(7)]))  # target 0.05 rad from the pose
    b.task(stamp, 2, 0, -0.2, success=False, done=False, now=0.0)
    for cycle in range(3, 7):
        _cycle(b, cycle, 0, False)
    got = _received(learner, 3)
    first = [t for t in got if int(t.obs[0]) == 2]
    assert first and first[0].info.get("intervention") is True
    np.testing.assert_allclose(first[0].action, np.full(7, 0.5))  # 0.05 rad / max_delta 0.1: the chain inverted
    assert b.interventions == 1 and b.intervention_transitions == 1
