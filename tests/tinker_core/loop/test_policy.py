"""The policy's cycle (no ROS): each cycle on its own state's pose, the chain restarted per episode."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.action_chain import ActionChain, ActionChainConfig
from tinker_core.errors import ValidationError
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


def test_on_overrun_takes_hold_or_stop_and_names_both_otherwise():
    from tinker_core.errors import ConfigError
    from tinker_core.loop.policy import check_on_overrun

    assert check_on_overrun("stop") == "stop"
    with pytest.raises(ConfigError, match="policy.on_overrun: expected 'hold' or 'stop', got 'panic'"):
        check_on_overrun("panic")


def test_the_gate_commands_only_while_active_and_an_overrun_stop_lasts_until_the_next_activation():
    from tinker_core.loop.input_ages import Level
    from tinker_core.loop.policy import CommandGate

    g = CommandGate()
    assert g.level(None) == (Level.WARN, "unconfigured")
    assert g.level(3) == (Level.WARN, "inactive: not commanding")
    g.activate()
    assert g.active and g.level(3) == (Level.OK, "commanding with bundle v3")
    g.overran("hold")  # that command is dropped; commanding goes on
    assert g.active
    assert g.level(3, crowded="/tinker/channels/voice: 2 publishers") == (
        Level.WARN, "a second publisher on this robot's channel: /tinker/channels/voice: 2 publishers")
    g.refusals.note("policy.features: 3 values")
    level, message = g.level(3)
    assert level == Level.WARN and "policy.features: 3 values" in message
    g.overran("stop")
    assert not g.active and g.level(3) == (Level.ERROR, "stopped after an overrun (on_overrun: stop)")
    g.deactivate()
    assert g.stopped_by_overrun  # an ERROR until the next activation
    g.activate()
    assert g.active and not g.stopped_by_overrun
    assert g.stop_meta(3) == {"stamp_ns": 0, "cycle": 0, "version": 3, "stop": 1}


def test_with_latency_compensation_the_chain_steps_from_the_newest_command_and_the_extras_go_late():
    """Two periods of command latency: the chain steps from the newest safe command of the episode (within what two
    periods can move the arm), and the extra action (a suction) chosen at a cycle is sent two cycles later."""
    pc = PolicyCycle(lambda feats, sha: feats.astype(np.float64), ActionChain(ActionChainConfig(), LOWER, UPPER),
                     latency_compensation=2)
    pc.on_state(1, np.zeros(2))
    s1 = pc.on_features(1, np.array([1.0, 1.0, 1.0], np.float32), 1, "0")  # suction on
    np.testing.assert_allclose(s1.target, [0.1, 0.1])
    pc.on_command(1, s1.target)
    pc.on_state(2, np.zeros(2))  # the arm has not moved yet: the command is in flight
    s2 = pc.on_features(2, np.array([1.0, 1.0, -1.0], np.float32), 2, "0")
    np.testing.assert_allclose(s2.target, [0.2, 0.2])  # from the command, not from the lagged pose
    pc.on_command(2, s2.target)
    pc.on_state(3, np.zeros(2))
    s3 = pc.on_features(3, np.array([0.0, 0.0, -1.0], np.float32), 3, "0")
    assert [s1.extra[0], s2.extra[0], s3.extra[0]] == [-1.0, -1.0, 1.0]  # s1's suction lands with s3
    assert s1.raw[2] == 1.0  # the actor's own output stays the raw action (the learner's)
    np.testing.assert_allclose(s3.target, [0.2, 0.2])  # a zero action: the newest command again
    pc.on_command(3, np.array([0.9, 0.2]))
    pc.on_state(4, np.zeros(2))
    s4 = pc.on_features(4, np.zeros(3, np.float32), 4, "0")
    np.testing.assert_allclose(s4.target, [0.3, 0.2])  # a far command: no further than two periods (0.15) move it
    pc.on_state(10, np.full(2, 0.5))  # a new episode: the last episode's command is not where the arm goes
    s10 = pc.on_features(10, np.zeros(3, np.float32), 10, "1")
    np.testing.assert_allclose(s10.target, [0.5, 0.5])
    assert s10.extra[0] == -1.0  # nothing in flight at an episode's start
    for bad in (np.array([np.nan, 0.0]), np.zeros(3)):  # refused (the node counts it), never the chain's base
        with pytest.raises(ValidationError, match="policy.command"):
            pc.on_command(11, bad)


def test_the_cycle_follows_the_latency_its_features_were_compensated_for():
    """latency_auto: perception says in each features which latency it compensated; from that cycle on the chain steps
    from the same prediction and the extras go as late (here: 0, then 2 periods taken mid-episode)."""
    pc = PolicyCycle(lambda feats, sha: feats.astype(np.float64), ActionChain(ActionChainConfig(), LOWER, UPPER),
                     latency_auto=True)
    pc.on_state(1, np.zeros(2))
    s1 = pc.on_features(1, np.array([1.0, 1.0, 1.0], np.float32), 1, "0", compensated=0)
    assert s1.extra[0] == 1.0 and pc.latency_compensation == 0  # nothing compensated yet: at once
    pc.on_command(1, s1.target)
    pc.on_state(2, np.zeros(2))  # the command is in flight
    s2 = pc.on_features(2, np.array([1.0, 1.0, -1.0], np.float32), 2, "0", compensated=2)
    assert pc.latency_compensation == 2
    np.testing.assert_allclose(s2.target, [0.2, 0.2])  # from the command in flight
    assert s2.extra[0] == 1.0  # the suction sent last goes on for the two added periods
    pc.on_state(3, np.zeros(2))
    s3 = pc.on_features(3, np.array([0.0, 0.0, -1.0], np.float32), 3, "0", compensated=2)
    pc.on_state(4, np.zeros(2))
    s4 = pc.on_features(4, np.array([0.0, 0.0, -1.0], np.float32), 4, "0")  # None: as it was
    assert [s3.extra[0], s4.extra[0]] == [1.0, -1.0]  # s2's 'off' lands two cycles after it was chosen
    assert pc.latency_compensation == 2
    fixed = PolicyCycle(lambda feats, sha: feats.astype(np.float64), ActionChain(ActionChainConfig(), LOWER, UPPER))
    fixed.on_state(1, np.zeros(2))
    fixed.on_features(1, np.zeros(3, np.float32), 1, "0", compensated=3)
    assert fixed.latency_compensation == 0  # without latency_auto its own setting stays (the check pairs them)
