"""A reach policy's hold at its goal (`tinker_core.loop.goal_hold.GoalHold` in `PolicyCycle`, no ROS): the pose
reached is held until the goal moves or the arm is pushed off; the actor acts again from the measured pose."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.action_chain import ActionChain, ActionChainConfig
from tinker_core.errors import ConfigError
from tinker_core.loop.goal_hold import GoalHold, check_at_goal
from tinker_core.loop.policy import PolicyCycle

TERMS = [{"name": "joint_pos", "size": 2, "scale": [1.0, 1.0], "offset": [0.0, 0.0]},
         {"name": "ee_pos", "size": 3, "scale": [2.0, 2.0, 2.0], "offset": [0.5, 0.0, 0.3]},
         {"name": "target_pos", "size": 3, "scale": [2.0, 2.0, 2.0], "offset": [0.5, 0.0, 0.3]}]
LOWER, UPPER = -np.ones(2), np.ones(2)
SUCCESS = 0.05


def feats(ee, target) -> np.ndarray:
    """Features as perception scales them: (raw - offset) * scale."""
    return np.concatenate([np.zeros(2), (np.asarray(ee) - [0.5, 0.0, 0.3]) * 2.0,
                           (np.asarray(target) - [0.5, 0.0, 0.3]) * 2.0]).astype(np.float32)


def test_the_arm_holds_where_it_reached_the_goal_until_the_goal_moves_or_it_is_pushed_off():
    acted: list[int] = []
    actor = lambda f, sha: (acted.append(1), np.full(2, 0.5))[1]  # noqa: E731
    chain = ActionChain(ActionChainConfig(), LOWER, UPPER)
    pc = PolicyCycle(actor, chain, goal_hold=GoalHold(TERMS, SUCCESS))  # the actor runs every cycle, held or not
    goal = [0.6, 0.1, 0.4]

    def step(k, q, ee, target, episode="0"):
        pc.on_state(k, np.asarray(q, dtype=np.float64))
        return pc.on_features(k, feats(ee, target), k, episode)

    far = step(1, [0.0, 0.0], [0.5, 0.0, 0.3], goal)  # 17 cm away: the actor acts
    assert not far.held
    assert not step(2, [0.1, 0.1], [0.6, 0.1, 0.44], goal).held  # 4 cm: within, and closer: the actor goes on
    assert not step(3, [0.2, 0.1], [0.6, 0.1, 0.42], goal).held  # 2 cm: closer still
    at = step(4, [0.25, 0.1], [0.6, 0.1, 0.43], goal)  # 3 cm: no closer, so the closest pose (cycle 3's) is held
    assert at.held and at.target.tolist() == [0.2, 0.1]
    np.testing.assert_allclose(chain.invert(at.target, np.array([0.25, 0.1])), at.raw)  # the action the robot ran
    still = step(5, [0.21, 0.12], [0.6, 0.1, 0.46], goal)  # 6 cm (within 2 x 5 cm): the same pose still
    assert still.held and still.target.tolist() == [0.2, 0.1] and pc.goal_hold.holds == 1
    moved = step(6, [0.21, 0.12], [0.6, 0.1, 0.43], [0.6, -0.1, 0.4])  # a new goal: the actor acts again
    assert not moved.held
    ref = ActionChain(ActionChainConfig(), LOWER, UPPER)
    ref.reset(np.array([0.21, 0.12]))  # the chain restarted from the measured pose, not from the held one
    np.testing.assert_array_equal(moved.target, ref(np.full(2, 0.5), np.array([0.21, 0.12])))
    assert not step(7, [0.3, 0.3], [0.6, -0.1, 0.42], [0.6, -0.1, 0.4]).held  # 2 cm from the new one
    assert step(8, [0.3, 0.3], [0.6, -0.1, 0.42], [0.6, -0.1, 0.4]).held  # and no closer: held
    pushed = step(9, [0.5, 0.5], [0.6, -0.1, 0.52], [0.6, -0.1, 0.4])  # 12 cm off: pushed beyond 2 x 5 cm
    assert not pushed.held and pc.goal_hold.holds == 2
    step(10, [0.5, 0.5], [0.6, -0.1, 0.42], [0.6, -0.1, 0.4])
    assert step(11, [0.5, 0.5], [0.6, -0.1, 0.42], [0.6, -0.1, 0.4]).held
    assert not step(12, [0.5, 0.5], [0.6, -0.1, 0.48], [0.6, -0.1, 0.4], episode="1").held  # a new episode acts
    assert len(acted) == 12  # every cycle: a hot-swapped bundle goes live (its version reported) while holding


def test_a_hold_needs_the_end_effector_and_target_in_the_features_and_a_known_setting():
    with pytest.raises(ConfigError, match=r"policy.at_goal: the features have no \['ee_pos'\]"):
        GoalHold([TERMS[0], TERMS[2]], SUCCESS)
    with pytest.raises(ConfigError, match=r"policy.at_goal: expected one of \['hold', 'act'\], got 'stop'"):
        check_at_goal("stop")
    hold = GoalHold(TERMS, SUCCESS)
    assert hold.step(np.zeros(5, np.float32), np.zeros(2)) is None  # not this layout: never a hold
