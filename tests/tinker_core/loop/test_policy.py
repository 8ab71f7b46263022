"""The policy's cycle (no ROS): each cycle on its own state's pose, the chain restarted per episode."""

from __future__ import annotations

import numpy as np

from tinker_core.action_chain import ActionChain, ActionChainConfig
from tinker_core.loop.policy import PolicyCycle

LOWER, UPPER = -np.ones(2), np.ones(2)


def _cycle() -> PolicyCycle:
    return PolicyCycle(lambda feats, sha: feats[:2].astype(np.float64), ActionChain(ActionChainConfig(), LOWER, UPPER))


def test_features_wait_for_their_states_pose():
    pc = _cycle()
    assert pc.on_state(1, np.zeros(2)) is None
    assert pc.on_features(2, np.ones(3, np.float32), cycle=2, episode="0") is None  # state 2 is on its way
    step = pc.on_state(2, np.full(2, 0.5))
    assert (step.stamp_ns, step.cycle) == (2, 2)
    ref = ActionChain(ActionChainConfig(), LOWER, UPPER)
    ref.reset(np.full(2, 0.5))
    np.testing.assert_array_equal(step.target, ref(np.ones(2), np.full(2, 0.5)))  # from state 2's pose


def test_a_new_episode_restarts_the_chain_from_its_pose():
    pc = _cycle()
    for k in range(1, 4):
        pc.on_state(k, np.zeros(2))
        pc.on_features(k, np.ones(3, np.float32), k, "0")
    pc.on_state(4, np.full(2, -0.5))
    after_reset = pc.on_features(4, np.zeros(3, np.float32), 4, "1")
    ref = ActionChain(ActionChainConfig(), LOWER, UPPER)
    ref.reset(np.full(2, -0.5))
    np.testing.assert_array_equal(after_reset.target, ref(np.zeros(2), np.full(2, -0.5)))


def test_a_new_episode_calls_on_episode_before_the_actor_and_the_chain_takes_the_joint_dims():
    calls: list[str] = []

    def actor(features, sha):
        calls.append("actor")
        return np.array([0.5, -0.5, 1.0])  # two joints, then a task's extra action (suction)

    cycle = PolicyCycle(actor, ActionChain(ActionChainConfig(), -np.ones(2), np.ones(2)),
                        on_episode=lambda: calls.append("episode"))
    q = np.zeros(2)
    for stamp, episode in ((1, "0"), (2, "0"), (3, "1")):
        cycle.on_state(stamp, q)
        step = cycle.on_features(stamp, np.zeros(3), stamp, episode)
        assert step.raw.shape == (3,) and step.target.shape == (2,)
    assert calls == ["episode", "actor", "actor", "episode", "actor"]
    np.testing.assert_allclose(step.target, [0.05, -0.05])  # delta mode: q + action * max_delta (0.1 rad)
