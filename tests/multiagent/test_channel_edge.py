"""Both ends of a declared channel without ROS (`tinker_core.multiagent.channel_edge`): the sender's split and check,
the receiver's inbox (refusals by reason, hold, zero-fill when nothing came or it is stale), the in-process wrapper
on the same rule, and the loop's perception and policy cycles with channel slots."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv

from tinker_core.action_chain import ActionChain, ActionChainConfig
from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.perception import PerceptionCycle
from tinker_core.loop.policy import PolicyCycle
from tinker_core.multiagent.channel_edge import ChannelInbox, ChannelOutbox, agent_channels
from tinker_core.multiagent.channels import (ChannelSpec, Channels, channels_from_json, channels_to_json,
                                             parse_channels)

VOICE = ChannelSpec("voice", "speaker", ("listener",), 2, -1.0, 1.0, 0.5)
BEEP = ChannelSpec("beep", "other", ("listener",), 1, 0.0, 2.0, 0.2)
MS = 1_000_000


def test_max_age_parses_round_trips_and_names_the_field():
    (ch,) = parse_channels({"voice": {"from": "speaker", "to": "listener", "size": 2, "max_age": 0.3}})
    assert ch.max_age == 0.3 and ch.max_age_ns == 300 * MS and ch.term == "channel/voice"
    assert parse_channels({"v": {"from": "a", "to": "b", "size": 1}})[0].max_age == 0.5  # the default
    assert channels_from_json(channels_to_json((ch, BEEP))) == (ch, BEEP)
    assert channels_from_json("") == ()
    with pytest.raises(ConfigError, match=r"channels\.voice\.max_age: expected a finite number of seconds > 0, got 0"):
        parse_channels({"voice": {"from": "speaker", "to": "listener", "size": 2, "max_age": 0}})
    with pytest.raises(ConfigError, match=r"policy\.channels: expected the channels section as JSON"):
        channels_from_json("{voice", "policy.channels")
    with pytest.raises(ConfigError, match=r"channels: 'a' sends on \['x', 'y'\]; one channel per sender"):
        agent_channels(parse_channels({"x": {"from": "a", "to": "b", "size": 1}, "y": {"from": "a", "to": "c",
                                                                                     "size": 1}}), "a")
    says, heard = agent_channels((VOICE, BEEP), "listener")
    assert says is None and heard == (VOICE, BEEP)


def test_the_outbox_splits_checks_and_clips_the_message():
    box = ChannelOutbox(VOICE, 3)
    act, msg = box.split(np.array([0.1, 0.2, 0.3, 0.5, 4.0]))
    np.testing.assert_array_equal(act, [0.1, 0.2, 0.3])
    np.testing.assert_array_equal(msg, np.array([0.5, 1.0], np.float32))
    assert msg.dtype == np.float32 and box.clipped == 1
    with pytest.raises(ValidationError, match=r"channel 'voice' \(from 'speaker'\).*3 action \+ 2 message values"):
        box.split(np.zeros(4))
    with pytest.raises(ValidationError, match=r"channel 'voice' \(from 'speaker'\)"):
        box.split(np.array([0.0, 0.0, 0.0, np.nan, 0.0]))


def test_the_inbox_refuses_by_reason_holds_the_last_good_message_and_zero_fills_when_stale():
    inbox = ChannelInbox((VOICE, BEEP))
    np.testing.assert_array_equal(inbox.append(np.ones(2, np.float32), 0), [1, 1, 0, 0, 0])  # nothing yet: zeros
    assert inbox.deliver("voice", [0.25, -0.5], 100 * MS, "speaker") == ""
    assert inbox.deliver("beep", [1.5], 100 * MS) == ""  # in process: no sender to check
    refusals = {
        "size": inbox.deliver("voice", [0.1, 0.2, 0.3], 110 * MS, "speaker"),
        "non_finite": inbox.deliver("voice", [np.inf, 0.0], 120 * MS, "speaker"),
        "bounds": inbox.deliver("voice", [0.0, -1.5], 130 * MS, "speaker"),
        "sender": inbox.deliver("voice", [0.0, 0.0], 140 * MS, "intruder"),
        "channel": inbox.deliver("shout", [0.0], 150 * MS, "speaker"),
    }
    assert "expected 2 values, got 3" in refusals["size"] and "NaN/inf at index [0]" in refusals["non_finite"]
    assert "outside [-1, 1]" in refusals["bounds"] and "from 'intruder', declared sender 'speaker'" in refusals["sender"]
    assert "not heard here" in refusals["channel"]
    assert dict(inbox.refused) == {k: 1 for k in refusals} and inbox.accepted == 2
    assert inbox.last_refusal == refusals["channel"]
    # every refusal left the last good message in place: flat observations get the messages in declaration order
    np.testing.assert_array_equal(inbox.append(np.ones(2, np.float32), 200 * MS), [1, 1, 0.25, -0.5, 1.5])
    heard = inbox.append({"state": np.ones(2)}, 200 * MS)
    assert set(heard) == {"state", "channel/voice", "channel/beep"}
    # beep is stale after 0.2 s, voice after 0.5 s: each reads as zeros then, as before its first message
    np.testing.assert_array_equal(inbox.append(np.zeros(0, np.float32), 301 * MS), [0.25, -0.5, 0])
    np.testing.assert_array_equal(inbox.append(np.zeros(0, np.float32), 601 * MS), [0, 0, 0])
    assert inbox.stale_reads == 3 and inbox.age_ns("voice", 601 * MS) == 501 * MS and inbox.age_ns("x", 0) is None
    inbox.clear()
    assert inbox.age_ns("voice", 0) is None
    assert inbox.counters()["refused.size"] == 1


class SpeakerListener(ParallelEnv):
    """The speaker and the listener act every step; one step stands for ``control_period`` s."""

    metadata = {"name": "speaker_listener_clock", "render_modes": []}
    control_period = 0.2

    def __init__(self):
        self.possible_agents = ["speaker", "listener"]

    def observation_space(self, agent):
        return spaces.Box(-1.0, 1.0, (1,), np.float32)

    def action_space(self, agent):
        return spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {a: np.zeros(1, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        obs = {a: np.zeros(1, np.float32) for a in self.agents}
        z = {a: 0.0 for a in self.agents}
        return obs, z, {a: False for a in self.agents}, {a: False for a in self.agents}, {a: {} for a in self.agents}


def test_in_process_a_silent_sender_is_heard_until_max_age_then_zeros():
    env = Channels(SpeakerListener(), (VOICE,))  # one step = 0.2 s, max_age 0.5 s
    env.reset()
    obs, *_ = env.step({"speaker": np.array([0.0, 0.3, -0.7], np.float32), "listener": np.zeros(1, np.float32)})
    np.testing.assert_allclose(obs["listener"][1:], [0.3, -0.7], rtol=1e-6)
    heard = []
    for _ in range(3):  # the speaker says nothing more (it left the episode, or its policy died)
        obs, *_ = env.step({"listener": np.zeros(1, np.float32)})
        heard.append(obs["listener"][1:].tolist())
    assert heard[0] == heard[1] != [0.0, 0.0] and heard[2] == [0.0, 0.0], heard  # 0.2, 0.4 s old, then 0.6 s: zeros
    obs_terms, act_terms = env.channel_terms("listener")
    assert obs_terms == [VOICE.term_record()] and act_terms == []
    assert env.channel_terms("speaker") == ([], [VOICE.term_record()])


TERMS = [{"name": "joint_pos", "size": 2, "offset": 0.0, "scale": 1.0},
         {"name": "channel/voice", "size": 2, "offset": 0.0, "scale": 1.0}]


class Clock:
    def __init__(self):
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def test_perception_fills_the_bundles_channel_slots_from_the_inbox_and_checks_them_against_the_declaration():
    from tinker_core.spec import Spec

    clock = Clock()
    inbox = ChannelInbox((VOICE,))
    cyc = PerceptionCycle(Spec((4,), "float32"), TERMS, lambda obs: obs, n_action=2, channels=inbox, clock=clock)
    assert cyc.needed == set()  # a cycle never waits for a message
    out = cyc.on_state(1, np.array([0.1, 0.2]), np.zeros(2))
    np.testing.assert_array_equal(out.features, np.array([0.1, 0.2, 0, 0], np.float32))
    clock.ns = 10 * MS
    assert cyc.on_channel("voice", np.array([0.5, -0.25]), "speaker") == ""
    assert "expected 2 values, got 1" in cyc.on_channel("voice", np.array([0.9]), "speaker")
    out = cyc.on_state(2, np.array([0.1, 0.2]), np.zeros(2))
    np.testing.assert_array_equal(out.features, np.array([0.1, 0.2, 0.5, -0.25], np.float32))
    clock.ns = 600 * MS  # 0.59 s after the last good message: stale
    np.testing.assert_array_equal(cyc.on_state(3, np.array([0.1, 0.2]), np.zeros(2)).features[2:], [0, 0])
    with pytest.raises(ConfigError, match=r"trained hearing 'channel/voice' \(2 values\) but this robot hears no channel"):
        PerceptionCycle(Spec((4,), "float32"), TERMS, lambda o: o, 2)
    with pytest.raises(ConfigError, match=r"channel 'channel/voice' is declared with 3 values, the bundle was trained "
                                          r"with 2"):
        PerceptionCycle(Spec((4,), "float32"), TERMS, lambda o: o, 2,
                        channels=ChannelInbox((ChannelSpec("voice", "speaker", ("listener",), 3),)))
    with pytest.raises(ConfigError, match=r"this robot hears \['channel/beep'\] but its bundle has no slot"):
        PerceptionCycle(Spec((4,), "float32"), TERMS, lambda o: o, 2, channels=ChannelInbox((VOICE, BEEP)))


def test_the_policy_cycle_sends_the_message_part_and_chains_only_the_action():
    chain = ActionChain(ActionChainConfig(), np.full(2, -2.0), np.full(2, 2.0))
    cyc = PolicyCycle(lambda f, sha: np.array([0.2, -0.2, 0.9, 3.0]), chain, outbox=ChannelOutbox(VOICE, 2))
    cyc.on_state(5, np.zeros(2))
    step = cyc.on_features(5, np.zeros(3), cycle=1, episode="0")
    assert step.raw.shape == (2,) and step.target.shape == (2,)
    np.testing.assert_array_equal(step.message, np.array([0.9, 1.0], np.float32))
    plain = PolicyCycle(lambda f, sha: np.array([0.2, -0.2]), ActionChain(ActionChainConfig(), np.full(2, -2.0),
                                                                          np.full(2, 2.0)))
    plain.on_state(5, np.zeros(2))
    assert plain.on_features(5, np.zeros(3)).message is None


def test_the_inboxs_diagnostics_name_each_channels_age_and_publishers():
    inbox = ChannelInbox((VOICE, BEEP))
    inbox.deliver("voice", [0.25, -0.5], 100 * MS, "speaker")
    inbox.deliver("voice", [0.1, 0.2, 0.3], 110 * MS, "speaker")  # refused: size
    values = inbox.values(130 * MS, {"voice": 2}, extra_publishers_seen=3)
    assert values["channels.voice.age_ms"] == "30" and values["channels.beep.age_ms"] == "none"
    assert values["channels.voice.publishers"] == 2 and values["channels.beep.publishers"] == 0
    assert values["channels.accepted"] == 1 and values["channels.refused.size"] == 1
    assert values["channels.extra_publishers_seen"] == 3 and "expected 2 values" in values["channels.last_refusal"]
