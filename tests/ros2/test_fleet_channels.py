"""A declared channel between two robots of a fleet over real DDS (tinker.fleet, tinker.channel_io, issue 24).

robot1 (the sender) runs a bundle whose actor outputs its 7 joint actions and a 2-value message; robot2 (the
receiver) runs a bundle whose observation ends with the ``channel/voice`` slot, passed through into its features.
Both bundles are hand-built (`tinker.reach_bundle`, ``says``/``hears``), not trained: the test checks what the
graph carries, not what is worth saying. Each robot's loop is one composed process, its policy a process of its
own (so robot1's policy can be killed alone), and each robot records its run (view node, /tf prefixed). The last
test trains a tiny pair over two arms, exports both agents and runs them as a fleet with their channel.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import numpy as np
import pytest

MAX_AGE = 0.5
VOICE = {"from": "robot1", "to": ["robot2"], "size": 2, "max_age": MAX_AGE}


@pytest.fixture(scope="module")
def fleet(ros2, tmp_path_factory):
    import yaml
    from diagnostic_msgs.msg import DiagnosticArray
    from std_msgs.msg import Float32MultiArray, Float64MultiArray

    from tinker.channel_io import CHANNEL_QOS
    from tinker.fleet import Fleet
    from tinker.reach_bundle import build_reach_bundle
    from tinker.wire import RECORD_QOS
    from tinker_core.multiagent.channels import parse_channels
    from tinker_deploy.manifest import Manifest

    tmp = tmp_path_factory.mktemp("fleet_channels")
    (voice,) = parse_channels({"voice": VOICE})
    build_reach_bundle(tmp / "speaker", camera=False, control_period=ros2.PERIOD, policy_version=1, says=voice)
    build_reach_bundle(tmp / "listener", camera=False, control_period=ros2.PERIOD, policy_version=2, hears=(voice,))
    terms = Manifest.from_json((tmp / "listener" / "manifest.json").read_text()).obs_terms
    names = [t.name for t in terms]
    start = sum(t.size for t in terms[: names.index("channel/voice")])
    (tmp / "agents.yaml").write_text(yaml.safe_dump({
        "channels": {"voice": VOICE},
        "agents": {"robot1": {"policy": "SAC", "bundle": "speaker"}, "robot2": {"policy": "SAC", "bundle": "listener"}}},
        sort_keys=False))
    domain = ros2.fresh_domain()
    f = Fleet(tmp / "agents.yaml", separate=("policy",), env=ros2.graph_env(domain), run_dir=tmp / "logs",
              record_dir=tmp / "rec", overrides={"/**": {"control_period": ros2.PERIOD}, "sim_robot": {"camera": False}})
    f.slot = slice(start, start + 2)
    f.rec = tmp / "rec"
    probe = ros2.Probe(domain, "fleet_channels_probe")
    # the probe keeps every message it is sent (RECORD_QOS: reliable, 50 deep). With the channel's own depth of 1
    # its late callbacks lost messages under load, and features robot2 did hear were then "never said" (CI flake)
    probe.said = probe.collect(Float32MultiArray, "/tinker/channels/voice", RECORD_QOS)
    probe.features = probe.collect(Float32MultiArray, "/robot2/perception/features", RECORD_QOS)
    probe.commands = {a: probe.collect(Float64MultiArray, f"/{a}/forward_position_controller/commands", RECORD_QOS)
                      for a in ("robot1", "robot2")}
    probe.diag = probe.collect(DiagnosticArray, "/diagnostics", RECORD_QOS)
    f.probe = probe
    f.stopped = False
    f.start()
    try:
        for a in ("robot1", "robot2"):
            f.graphs[a].call_trigger("safety/reset")  # a start-up stall on the shared machine may have latched it
        yield f
    finally:
        probe.close()
        if not f.stopped:
            f.stop()


def _said(f, since_ns: int = 0) -> list[tuple[int, tuple, dict]]:
    from tinker.wire import meta_of

    return [(t, tuple(np.asarray(m.data, np.float32).tolist()), meta_of(m)) for t, m in list(f.probe.said) if t >= since_ns]


def _heard(f, since_ns: int = 0) -> list[tuple]:
    return [tuple(np.asarray(m.data, np.float32)[f.slot].tolist()) for t, m in list(f.probe.features) if t >= since_ns]


def _diag(f, node: str, since_ns: int = 0) -> list[dict[str, str]]:
    return [{"level": st.level, "message": st.message, **{kv.key: kv.value for kv in st.values}}
            for t, arr in list(f.probe.diag) for st in arr.status if t >= since_ns and st.name == node]


def _served(f, ros2, agent: str, since_ns: int = 0) -> list:
    return [m for t, m in list(f.probe.commands[agent]) if t >= since_ns and ros2.meta_of(m).get("version")]


def test_the_receivers_observation_holds_the_senders_message(fleet, ros2):
    since = time.time_ns()
    ros2.wait_until(lambda: len(_said(fleet, since)) >= 10 and len([h for h in _heard(fleet, since) if any(h)]) >= 5,
                    30, "robot1's messages and robot2's features holding them")
    said = _said(fleet)
    assert all(m["from"] == "robot1" and len(v) == 2 and max(map(abs, v)) <= 1.0 for _, v, m in said), said[-3:]
    assert len({v for _, v, _ in said}) > 1, "the message does not change with the sender's state"
    heard = [h for h in _heard(fleet, since) if any(h)]
    published = {v for _, v, _ in said}
    # every non-zero slot is a message robot1 published, bit for bit (never a mix, never invented)
    assert heard and all(h in published for h in heard), (heard[-3:], list(published)[-3:])
    # the message never reaches robot1's safety node or robot: its commands are the 7 joints
    assert {len(m.data) for m in _served(fleet, ros2, "robot1", since)} == {7}
    # the publisher count is sampled once a second, apart from the heartbeat: a heartbeat may still show 0
    ros2.wait_until(lambda: any(d["channels.voice.publishers"] == "1" for d in _diag(fleet, "/robot2/perception", since)),
                    10, "robot2's perception counting robot1 as the channel's one publisher")
    d = [d for d in _diag(fleet, "/robot2/perception", since) if d["channels.voice.publishers"] == "1"][-1]
    assert int(d["channels.accepted"]) > 0, d


def test_a_forged_message_is_refused_and_counted_and_the_second_publisher_noticed(fleet, ros2):
    from std_msgs.msg import Float32MultiArray

    from tinker.channel_io import CHANNEL_QOS
    from tinker.wire import array_msg

    pub = fleet.probe.publisher(Float32MultiArray, "/tinker/channels/voice", CHANNEL_QOS)
    since = time.time_ns()
    end = time.monotonic() + 4.0  # the nodes count publishers once a second
    while time.monotonic() < end:
        pub.publish(array_msg(np.array([0.9, 0.9, 0.9]), {"from": "robot1", "stamp_ns": 0, "cycle": 0}, double=False))
        pub.publish(array_msg(np.array([5.0, 0.0]), {"from": "robot1", "stamp_ns": 0, "cycle": 0}, double=False))
        time.sleep(0.2)
    ros2.wait_until(lambda: any(int(d.get("channels.refused.size", 0)) > 0 and int(d.get("channels.refused.bounds", 0)) > 0
                                and int(d.get("channels.extra_publishers_seen", 0)) > 0
                                for d in _diag(fleet, "/robot2/perception", since)), 15,
                    "robot2's perception counting the forged messages and the second publisher")
    from diagnostic_msgs.msg import DiagnosticStatus

    d = [d for d in _diag(fleet, "/robot2/perception", since) if int(d.get("channels.refused.size", 0)) > 0][-1]
    assert d["level"] == DiagnosticStatus.WARN, d
    assert "expected 2 values, got 3" in d["last_error"] or "outside [-1, 1]" in d["last_error"], d
    ros2.wait_until(lambda: any(int(x.get("channels.extra_publishers_seen", 0)) > 0
                                for x in _diag(fleet, "/robot1/policy", since)), 10, "robot1's policy noticing")
    # the forged values never made it into robot2's observation
    heard = {h for h in _heard(fleet, since) if any(h)}
    assert heard and heard <= {v for _, v, _ in _said(fleet)} and not [h for h in heard if 5.0 in h], heard
    fleet.probe.node.destroy_publisher(pub)


def test_killing_the_senders_policy_leaves_the_receiver_running_on_zeros(fleet, ros2):
    ros2.wait_until(lambda: len(_served(fleet, ros2, "robot2", time.time_ns() - 10**9)) >= 3, 20, "robot2 commanding")
    fleet.graphs["robot1"].kill("policy", signal.SIGKILL)
    killed = time.time_ns()
    time.sleep(MAX_AGE + 1.5)
    later = killed + int((MAX_AGE + 0.5) * 1e9)  # a message said just before the kill is heard for max_age
    assert not _said(fleet, killed + 300_000_000), "robot1 still speaking after its policy died"
    heard = _heard(fleet, later)
    assert len(heard) >= 5 and all(h == (0.0, 0.0) for h in heard), heard[-5:]
    assert len(_served(fleet, ros2, "robot2", later)) >= 5, "robot2 stopped commanding when robot1's policy died"
    ros2.wait_until(lambda: _diag(fleet, "/robot2/perception", later), 10, "robot2's perception heartbeat")
    d = _diag(fleet, "/robot2/perception", later)[-1]
    assert int(d["channels.stale_reads"]) > 0 and float(d["channels.voice.age_ms"]) > MAX_AGE * 1000, d


def test_each_robots_recorded_frames_carry_its_name(fleet, ros2):
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore

    fleet.stop()
    fleet.stopped = True
    store = get_typestore(Stores.ROS2_KILTED)
    for robot in ("robot1", "robot2"):
        with Reader(Path(fleet.rec) / f"{robot}.mcap") as r:
            conns = [c for c in r.connections if c.topic == "/tf"]
            assert conns, f"{robot}: no /tf recorded"
            tf = [store.deserialize_cdr(raw, c.msgtype) for c, _, raw in r.messages(connections=conns)]
        frames = {t.child_frame_id for m in tf for t in m.transforms} | {t.header.frame_id for m in tf for t in m.transforms}
        assert frames and all(fr.startswith(f"{robot}/lbr_iiwa_link_") for fr in frames), sorted(frames)[:4]


def test_a_bundle_and_the_declared_channels_must_agree(tmp_path):
    """Checked when the nodes load a bundle: a sender bundle with no declared channel, a receiver bundle with none,
    a channel of another size; and the sender's actor output split 7 joints + 2 message values."""
    from tinker.bundle_io import PolicyBundle, open_perception
    from tinker_core.errors import ConfigError
    from tinker_core.multiagent.channel_edge import ChannelInbox
    from tinker_core.multiagent.channels import parse_channels
    from tinker.reach_bundle import build_reach_bundle

    (voice,) = parse_channels({"voice": VOICE})
    (wide,) = parse_channels({"voice": {**VOICE, "size": 3}})
    build_reach_bundle(tmp_path / "s", camera=False, control_period=0.1, says=voice)
    build_reach_bundle(tmp_path / "l", camera=False, control_period=0.1, hears=(voice,))
    box = PolicyBundle(tmp_path / "s", None, 0.1, says=voice).cycle.outbox
    assert (box.n_action, box.size) == (7, 9)
    with pytest.raises(ConfigError, match=r"policy: the bundle was trained sending on \['channel/voice'\] but no channel"):
        PolicyBundle(tmp_path / "s", None, 0.1)
    with pytest.raises(ConfigError, match=r"policy: this robot sends on 'channel/voice' \(3 values\); the bundle's action "
                                          r"terms have \{'channel/voice': 2\}"):
        PolicyBundle(tmp_path / "s", None, 0.1, says=wide)
    _, cycle, _ = open_perception(tmp_path / "l", channels=ChannelInbox((voice,)))
    assert cycle.assembly.names[-1] == "channel/voice" and cycle.assembly.sizes[-1] == 2
    with pytest.raises(ConfigError, match=r"perception: the bundle was trained hearing 'channel/voice' \(2 values\) but "
                                          r"this robot hears no channel"):
        open_perception(tmp_path / "l")


def test_the_fleet_hands_each_robot_its_channels_and_frame_prefix_and_names_bad_channels(tmp_path):
    """What `tinker.fleet.robot_params` gives each robot's nodes (the bringup and the launch file both use it), and
    the agents file's channel errors a fleet adds (a robot that is not in the fleet)."""
    from tinker.fleet import fleet_agents, robot_params
    from tinker.robot_model import RobotModel, with_frame_prefix
    from tinker_core.errors import ConfigError
    from tinker_core.multiagent.channels import channels_from_json

    (tmp_path / "a.yaml").write_text("channels:\n  voice: {from: robot1, to: [robot2], size: 2}\n"
                                     "agents:\n  robot1: {policy: SAC}\n  robot2: {policy: SAC}\n")
    cfg, _ = fleet_agents(tmp_path / "a.yaml")
    own = robot_params(cfg, "robot2")
    assert own["view"] == {"frame_prefix": "robot2/"} and own["policy"] == own["perception"]
    assert own["perception"]["agent"] == "robot2" and channels_from_json(own["perception"]["channels"]) == cfg.channels
    (tmp_path / "b.yaml").write_text("channels:\n  voice: {from: robot1, to: [robot9], size: 2}\n"
                                     "agents:\n  robot1: {policy: SAC}\n  robot2: {policy: SAC}\n")
    with pytest.raises(ConfigError, match=r"channels\.voice\.to: no robot 'robot9' in the fleet \(robots: \['robot1', "
                                          r"'robot2'\]\)"):
        fleet_agents(tmp_path / "b.yaml")
    model = RobotModel(None)
    tfs = model.transforms({})
    pre = with_frame_prefix(tfs, "robot2/")
    assert [t["child"] for t in pre] == ["robot2/" + t["child"] for t in tfs] and pre[0]["parent"] == "robot2/" + model.root
    assert with_frame_prefix(tfs, "") is tfs and tfs[0]["parent"] == model.root  # the model's own names untouched


def test_a_trained_pair_exports_bundles_that_run_on_the_graph_with_their_channel(tmp_path, ros2):
    """A tiny multi-agent run over two real arms (`tinker_sim.multi.ArmFleet`, 64 env steps of PPO: a bundle's shape,
    not a skill) with robot1 -> robot2 declared; each agent exported (`tinker_deploy.agent_export`) carries its
    channel slots in its manifest, the nodes' loaders take them with the declaration and split the message, and
    the pair runs as a fleet: robot1 speaks, robot2's perception accepts what it hears, both command."""
    import numpy as np

    from tinker.bundle_io import PolicyBundle, open_perception
    from tinker_core.multiagent import MultiAgentTrainer
    from tinker_core.multiagent.channel_edge import ChannelInbox
    from tinker_core.multiagent.channels import parse_channels
    from tinker_deploy.agent_export import export_agent_bundle
    from tinker_deploy.manifest import Manifest
    from tinker_deploy.runtime import OnnxPolicy
    from tinker_sim.multi import ArmFleet

    hp = {"n_steps": 32, "batch_size": 32, "n_epochs": 1, "net_arch": [16, 16]}
    tr = MultiAgentTrainer(ArmFleet(control_period=0.1), {
        "seed": 0, "total_timesteps": 64, "channels": {"voice": VOICE},
        "agents": {a: {"policy": "PPO", "hyperparameters": hp} for a in ("robot1", "robot2")}})
    tr.learn(progress=False)
    obs, _ = tr.env.reset(seed=3)
    assert obs["robot2"].shape[0] == obs["robot1"].shape[0] + 2  # robot2 hears voice
    s = export_agent_bundle(tr, "robot1", tmp_path / "speaker", log=lambda line: None)
    heard = export_agent_bundle(tr, "robot2", tmp_path / "listener", log=lambda line: None)
    ms, ml = (Manifest.from_json((d / "manifest.json").read_text()) for d in (s, heard))
    assert [(t.name, t.size) for t in ms.action_terms][-1] == ("channel/voice", 2) and ms.action_spec.shape == (9,)
    assert [(t.name, t.size) for t in ml.obs_terms][-1] == ("channel/voice", 2)
    assert sum(t.size for t in ml.obs_terms) == ml.obs_spec.shape[0] == obs["robot2"].shape[0]
    (voice,) = parse_channels({"voice": VOICE})
    pb = PolicyBundle(s, None, 0.1, says=voice)
    percept = OnnxPolicy.from_bundle(str(s), part="perception")
    q = np.zeros(7)
    pb.cycle.on_state(1, q)
    step = pb.cycle.on_features(1, percept.forward(obs["robot1"]), cycle=1, episode="0",
                                perception_sha256=percept.sha256)
    assert step.raw.shape == (7,) and step.message.shape == (2,) and np.abs(step.message).max() <= 1.0
    # the exported policy's own output, split: the message is its last two values, as the env took it in training
    full = tr.act({"robot1": obs["robot1"]})["robot1"]
    np.testing.assert_allclose(step.message, np.clip(full[7:], -1, 1), atol=1e-4)
    _, cycle, _ = open_perception(heard, channels=ChannelInbox((voice,)))
    assert cycle.assembly.names[-1] == "channel/voice"
    import yaml
    from std_msgs.msg import Float32MultiArray, Float64MultiArray
    from diagnostic_msgs.msg import DiagnosticArray

    from tinker.channel_io import CHANNEL_QOS
    from tinker.fleet import Fleet
    from tinker.wire import RECORD_QOS

    (tmp_path / "agents.yaml").write_text(yaml.safe_dump({"channels": {"voice": VOICE}, "agents": {
        "robot1": {"policy": "PPO", "bundle": "speaker"}, "robot2": {"policy": "PPO", "bundle": "listener"}}}))
    domain = ros2.fresh_domain()
    probe = ros2.Probe(domain, "trained_pair_probe")
    said = probe.collect(Float32MultiArray, "/tinker/channels/voice", CHANNEL_QOS)
    cmds = {a: probe.collect(Float64MultiArray, f"/{a}/forward_position_controller/commands", RECORD_QOS)
            for a in ("robot1", "robot2")}
    diag = probe.collect(DiagnosticArray, "/diagnostics", RECORD_QOS)
    f = Fleet(tmp_path / "agents.yaml", env=ros2.graph_env(domain), run_dir=tmp_path / "logs",
              overrides={"/**": {"control_period": ros2.PERIOD}, "sim_robot": {"camera": False}})
    try:
        f.start()
        for a in ("robot1", "robot2"):
            f.graphs[a].call_trigger("safety/reset")
        since = time.time_ns()

        def accepted() -> int:
            return max([int(kv.value) for t, arr in list(diag) if t >= since for st in arr.status
                        if st.name == "/robot2/perception" for kv in st.values if kv.key == "channels.accepted"] or [0])

        ros2.wait_until(lambda: accepted() > 0 and all(
            len([m for t, m in list(cmds[a]) if t >= since and ros2.meta_of(m).get("version")]) >= 5
            for a in cmds), 30, "robot2 hearing robot1 and both robots commanding")
        assert len([m for t, m in list(said) if t >= since]) >= 5
    finally:
        probe.close()
        f.stop()

