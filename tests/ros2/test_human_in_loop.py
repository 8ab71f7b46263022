"""A person in the loop of the running graph, over real DDS (separate processes, /robot1, its own domain):
a teleop publisher takes over through the SafetyWrapper and its cycles reach the learner as intervention data,
the policy resumes when the person stops, a second teleop publisher is refused, and a label lands on an episode.

One graph serves the module; the tests run in file order (the recording is read back after the graph stops).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

NS = "robot1"
OFFSET = 0.8
"""rad the person moves joint 0 away from where the arm is: more than the wrapper lets through in one cycle
(velocity_scale x the URDF's 10 rad/s x 0.1 s = 0.5 rad), so a target sent past the wrapper shows"""


@pytest.fixture(scope="module")
def g(ros2, bundles, tmp_path_factory):
    import yaml
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from tinker.bringup import Graph
    from tinker.wire import RECORD_QOS, SENSOR_QOS
    from tinker_core.transport import TransitionReceiver
    from tinker_safety.config import DEFAULT_CONFIG_PATH

    tmp = tmp_path_factory.mktemp("hil")
    cfg = yaml.safe_load(Path(DEFAULT_CONFIG_PATH).read_text())
    cfg["watchdog_misses_to_estop"] = 10  # patient on the shared machine, as test_graph
    (tmp / "safety.yaml").write_text(yaml.safe_dump(cfg))
    domain = ros2.fresh_domain()
    b = str(bundles["v1"])
    learner = TransitionReceiver("tcp://127.0.0.1:0")
    graph = Graph(namespace=NS, run_dir=tmp / "logs", env=ros2.graph_env(domain),
                  overrides={"perception": {"bundle": b}, "policy": {"bundle": b},
                             "safety": {"config": str(tmp / "safety.yaml"), "intervention_max_age": 0.3,
                                        "intervention_topic": "intervention"},  # off by default
                             "sim_robot": {"episode_cycles": 30},
                             "experience_bridge": {"learner_endpoint": learner.endpoint, "label_window": 1.0,
                                                   "label_success_reward": 7.0, "record": str(tmp / "bridge.mcap")},
                             "/**": {"control_period": ros2.PERIOD}})
    probe = ros2.Probe(domain)
    t = f"/{NS}/"
    probe.commands = probe.collect(Float64MultiArray, t + "forward_position_controller/commands", RECORD_QOS)
    probe.intervened = probe.collect(Float64MultiArray, t + "safety/intervened", RECORD_QOS)
    probe.joints = probe.collect(JointState, t + "joint_states", SENSOR_QOS)
    probe.diag = probe.collect(DiagnosticArray, "/diagnostics", RECORD_QOS)
    probe.teleop = probe.publisher(JointState, t + "intervention", 10)  # as `ros2 topic pub` does: reliable
    graph.probe, graph.tmp, graph.learner, graph.got = probe, tmp, learner, []
    graph.bundle = b
    graph.start()
    graph.call_trigger("safety/reset")  # a start-up stall may have latched the watchdog
    yield graph
    probe.close()
    graph.stop()
    learner.close()


def _drain(g) -> list:
    g.got += g.learner.recv_many(1024, timeout_ms=50)
    return g.got


def _teleop(g, names, target, seconds: float, publisher=None) -> None:
    """Publish the person's joint target at 20 Hz, stamped now (the probe's clock)."""
    from sensor_msgs.msg import JointState

    pub = publisher or g.probe.teleop
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        msg = JointState(name=list(names), position=[float(x) for x in target])
        msg.header.stamp = g.probe.node.get_clock().now().to_msg()
        pub.publish(msg)
        time.sleep(0.05)


def _safety(g) -> dict[str, str]:
    return g.probe.status(f"/{NS}/safety")


def _chain(bundle: str, names):
    from tinker.bundle_io import chain_config
    from tinker_core.action_chain import ActionChain
    from tinker_deploy.manifest import Manifest
    from tinker_safety.limits import JointLimits

    m = Manifest.from_json((Path(bundle) / "manifest.json").read_bytes())
    lim = JointLimits.from_urdf(None, joint_names=list(names))
    return ActionChain(chain_config(m), lim.lower, lim.upper), lim


def test_a_teleop_target_takes_over_through_the_safety_wrapper_and_reaches_the_learner_flagged(g, ros2):
    import yaml

    ros2.wait_until(lambda: len(g.probe.joints) > 5 and any(ros2.meta_of(m).get("version") for _, m in
                                                          list(g.probe.commands)), 40, "the policy commanding")
    names = list(g.probe.joints[-1][1].name)
    q0 = np.asarray(g.probe.joints[-1][1].position, dtype=np.float64)
    target = q0.copy()
    target[0] += OFFSET
    since = time.time_ns()
    _teleop(g, names, target, 4.0)
    took = [(t, m) for t, m in list(g.probe.commands) if t >= since and ros2.meta_of(m).get("intervention") == "1"]
    assert len(took) >= 10, f"{len(took)} commands served from teleop"
    # the arm got there (at some state: the simulator's episode reset, every 30 cycles, moves it away again)
    q = [float(j.position[0]) for t, j in list(g.probe.joints) if t >= since]
    assert min(abs(x - target[0]) for x in q) < 0.05, f"joint 0 at {q}, the person asked {target[0]:.3f}"
    # every command within the wrapper's limits: the URDF's joint range, the velocity limit per cycle
    cfg = yaml.safe_load((g.tmp / "safety.yaml").read_text())
    chain, lim = _chain(g.bundle, names)
    step = lim.velocity * float(cfg["velocity_scale"]) * ros2.PERIOD + 1e-6
    # each command from the one before it (in the order sent: one reliable publisher), the policy's before the
    # takeover included: within the URDF's joint range, never faster than the wrapper's velocity limit
    # (not across the simulator's episode reset, which moves the arm and rebases the wrapper on it)
    from tinker.wire import stamp_ns, state_tags

    episode = {stamp_ns(j.header): state_tags(j)[1] for _, j in list(g.probe.joints)}
    seq = [(ros2.meta_of(m), np.asarray(m.data)) for t, m in list(g.probe.commands) if t >= since - 10**9]
    checked = 0
    for (pmeta, prev), (meta, v) in zip(seq, seq[1:]):
        same = episode.get(int(pmeta["stamp_ns"]), -1) == episode.get(int(meta["stamp_ns"]), -2)
        if meta.get("intervention") == "1" and same:
            assert np.all(v >= lim.lower) and np.all(v <= lim.upper), (meta, v)
            assert np.all(np.abs(v - prev) <= step), (meta, v - prev, step)
            checked += 1
    assert checked >= 10
    ros2.wait_until(lambda: int(_safety(g).get("teleop.served", "0")) >= 10, 5, "teleop.served in /diagnostics")
    # the learner gets those cycles as intervention data: the action is the raw action that maps to the target
    expected = {}
    for _, m in list(g.probe.intervened):
        v = np.asarray(m.data)
        expected[int(ros2.meta_of(m)["cycle"])] = chain.invert(v[:7], v[7:])
    ros2.wait_until(lambda: sum(bool(t.info.get("intervention")) for t in _drain(g)) >= 5, 20,
                    "intervention transitions at the learner")
    flagged = [t for t in g.got if t.info.get("intervention")]
    matched = [t for t in flagged if int(t.info["cycle"]) in expected]
    assert len(matched) >= 5, (len(flagged), sorted(expected)[:5], [t.info["cycle"] for t in flagged][:5])
    for t in matched:
        assert np.allclose(t.action[:7], expected[int(t.info["cycle"])], atol=1e-5), t.info["cycle"]
        assert t.info["source"] == "real"
    assert any(t.action[0] > 0.5 for t in matched)  # towards the person's target (+OFFSET on joint 0)


def test_the_policy_resumes_when_the_person_stops(g, ros2):
    time.sleep(1.0)  # past intervention_max_age
    since = time.time_ns()
    ros2.wait_until(lambda: sum(1 for t, m in list(g.probe.commands) if t >= since and ros2.meta_of(m).get("version"))
                    >= 10, 20, "policy commands again")
    after = [m for t, m in list(g.probe.commands) if t >= since]
    assert not any(ros2.meta_of(m).get("intervention") == "1" for m in after)
    ros2.wait_until(lambda: _safety(g).get("teleop.engaged") == "False", 10, "teleop disengaged in /diagnostics")


def test_a_second_teleop_publisher_is_refused(g, ros2):
    from sensor_msgs.msg import JointState

    second = g.probe.node.create_publisher(JointState, f"/{NS}/intervention", 10)
    try:
        names = list(g.probe.joints[-1][1].name)
        target = np.asarray(g.probe.joints[-1][1].position) + np.r_[0.2, np.zeros(6)]
        ros2.wait_until(lambda: g.probe.teleop.get_subscription_count() >= 1, 10, "safety subscribed")
        since = time.time_ns()
        _teleop(g, names, target, 2.0)
        took = [m for t, m in list(g.probe.commands) if t >= since and ros2.meta_of(m).get("intervention") == "1"]
        assert not took, f"{len(took)} commands served while two teleop publishers were on the topic"
        ros2.wait_until(lambda: int(_safety(g).get("teleop.refused.publishers", "0")) > 0, 10,
                        "teleop.refused.publishers in /diagnostics")
    finally:
        g.probe.node.destroy_publisher(second)


def test_a_latched_estop_stays_latched_whatever_teleop_sends(g, ros2):
    ok, why = g.call_trigger("safety/estop")
    assert ok, why
    try:
        names = list(g.probe.joints[-1][1].name)
        q = np.asarray(g.probe.joints[-1][1].position)
        # the held pose: where the arm is, or the simulator's next episode start (joint 0 within 0.1 rad of 0)
        bound = max(q[0], 0.1) + 0.05
        target = q + np.r_[bound + 0.6 - q[0], np.zeros(6)]
        since = time.time_ns()
        _teleop(g, names, target, 2.0)
        got = [(ros2.meta_of(m), np.asarray(m.data)) for t, m in list(g.probe.commands) if t >= since]
        # The latch's own hold is published inside the service call, so a command sent before it can still reach
        # the probe after the call returned (another DDS writer than the reply's): it is checked by its order on
        # the topic (one writer, kept in order), not by when it arrived. From the first e-stopped command on, all are.
        statuses = [meta["status"] for meta, _ in got]
        assert "estopped" in statuses, statuses
        cmds = got[statuses.index("estopped"):]
        assert len(cmds) >= 5
        assert all(meta["status"] == "estopped" for meta, _ in cmds), [meta["status"] for meta, _ in cmds]
        assert all(v[0] <= bound for _, v in cmds), [round(v[0], 3) for _, v in cmds]  # never towards the person's
        early = got[:statuses.index("estopped")]  # sent before the latch: the policy's, not the person's
        assert all(not meta.get("intervention") for meta, _ in early), early
        assert _safety(g).get("estopped") == "True"
    finally:
        ok, why = g.call_trigger("safety/reset")
    assert ok, why


def test_a_label_lands_on_an_episodes_last_transition(g, ros2):
    from std_srvs.srv import SetBool

    # The test before left the e-stop latched for seconds and held cycles give no transition (cycle_join): a person
    # labels an episode the loop has run, so wait for the loop to hand the learner transitions again first.
    n_before = len(_drain(g))
    ros2.wait_until(lambda: len(_drain(g)) > n_before, 20, "transitions again after the e-stop was reset")
    n0 = len(g.got)
    resp = g.probe.call(SetBool, f"/{NS}/experience_bridge/label_episode", SetBool.Request(data=True))
    assert resp.success, resp.message
    assert "labelled success" in resp.message and resp.message.startswith("episode ")
    ros2.wait_until(lambda: any(t.info.get("human_label") for t in _drain(g)[n0:]), 10, "the labelled transition")
    lab = [t for t in g.got[n0:] if t.info.get("human_label")]
    assert len(lab) == 1 and lab[0].info["human_label"] == "success"
    assert lab[0].terminated and not lab[0].truncated and lab[0].reward == 7.0


def test_the_recording_keeps_the_intervention_flag_and_replay_import_gives_the_same_actions(g, ros2):
    from tinker.recording import read_cycles
    from tinker_core.loop.cycle_join import transitions

    g.probe.close()
    g.probe.close = lambda: None
    g.stop()
    recs = list(read_cycles(g.tmp / "bridge.mcap"))
    flagged = [r for r in recs if r["intervention"]]
    assert len(flagged) >= 10 and all(len(r["intervention_action"]) == 7 for r in flagged)
    ts = transitions(recs)
    live = {int(t.info["cycle"]): t for t in g.got if t.info.get("intervention")}
    replayed = {int(t.info["cycle"]): t for t in ts if t.info.get("intervention")}
    both = set(live) & set(replayed)
    assert len(both) >= 5
    for c in both:
        assert np.allclose(live[c].action, replayed[c].action)


def test_the_recording_keeps_the_label_and_replay_import_gives_the_same_terminal_rewards(g):
    """The label of test_a_label_lands... is in the bridge's MCAP (``/tinker/episode_label``); the transitions
    `tinker replay import` makes from the file end and are rewarded where the live ones were (the graph stopped
    in the test before)."""
    from tinker.recording import read_cycles, read_labels
    from tinker_core.loop.cycle_join import transitions
    from tinker_core.loop.episode_label import apply_labels

    for _ in range(5):
        _drain(g)  # what the bridge flushed as it stopped
    labels = read_labels(g.tmp / "bridge.mcap")
    assert len(labels) == 1 and labels[0].success and labels[0].reward == 7.0
    recs = list(read_cycles(g.tmp / "bridge.mcap"))
    imported = apply_labels(transitions(recs), labels, {int(r["cycle"]): int(r["episode"]) for r in recs})
    live = {int(t.info["cycle"]): t for t in g.got}
    again = {int(t.info["cycle"]): t for t in imported}
    labelled = [c for c, t in live.items() if t.info.get("human_label")]
    assert labelled == [labels[0].cycle] and again[labels[0].cycle].info["human_label"] == "success"
    assert len(live) >= 20 and set(live) <= set(again)  # the recorder wrote every cycle the bridge closed
    for c in live:
        assert (bool(again[c].terminated), bool(again[c].truncated)) == (bool(live[c].terminated), bool(live[c].truncated))
        assert again[c].reward == pytest.approx(live[c].reward, abs=1e-6)
        assert np.allclose(again[c].action, live[c].action)
    ep = labels[0].episode
    episode_of = {int(r["cycle"]): int(r["episode"]) for r in recs}
    assert not any(episode_of.get(c) == ep and c > labels[0].cycle for c in set(live) | set(again))  # none after it
