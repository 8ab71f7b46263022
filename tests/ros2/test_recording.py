"""Recordings that standard tools replay: `tinker bringup --record` read back by `rosbags` (an independent
reader), with every standard topic, correct episode ends, and `tinker replay import` on the same file."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict

import numpy as np

STANDARD = {
    "/robot1/joint_states": "sensor_msgs/msg/JointState",
    "/robot1/forward_position_controller/commands": "std_msgs/msg/Float64MultiArray",
    "/robot1/camera/image_raw": "sensor_msgs/msg/Image",
    "/diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
    "/tf": "tf2_msgs/msg/TFMessage",
    "/tinker/cycle": "tinker_msgs/msg/CycleRecord",
}


def _rec(cycle: int, episode: int, success: bool) -> dict:
    from tinker.recording import empty_record

    r = empty_record()
    r.update(cycle=cycle, episode=episode, state_stamp_ns=cycle * 10**8, terminated=success, reward=-0.1,
             policy_input=np.full(4, cycle, np.float32), raw_action=np.zeros(7), safe_command=np.zeros(7),
             safety_status="passed")
    return r


def test_a_success_without_a_reset_ends_the_episode_once(tmp_path):
    """`tinker bringup` runs with ``episode_cycles: 0``: the robot does not reset after a success, and the
    task reports success for every later state at the goal. The episode ended at the first of them; the
    next starts when the arm has left the goal (or at a reset)."""
    from tinker.recording import CycleRecorder, read_cycles
    from tinker_core.loop.cycle_join import transitions as cycles_to_transitions

    rec = CycleRecorder(tmp_path / "run.mcap")
    for k in range(1, 11):  # success at cycles 5-7 without a reset, the arm leaves at 8; a reset (episode 1) at 11
        rec.write(_rec(k, 0, 5 <= k <= 7), k * 10**8)
    for k in range(11, 15):
        rec.write(_rec(k, 1, k >= 13), k * 10**8)
    rec.close()
    recs = list(read_cycles(tmp_path / "run.mcap"))
    assert [r["cycle"] for r in recs if r["terminated"]] == [5, 13]
    assert [r["cycle"] for r in recs if r["after_end"]] == [6, 7, 14]
    ts = cycles_to_transitions(recs)
    assert [t.info["cycle"] for t in ts] == [1, 2, 3, 4, 8, 9, 11, 12]  # none from after an episode's end
    assert [t.terminated for t in ts] == [False, False, False, True, False, False, False, True]


def test_bringup_record_opens_in_rosbags_with_every_standard_topic_and_imports(ros2, bundles, tmp_path):
    from rosbags.rosbag2 import Reader
    from rosbags.typesys import Stores, get_typestore, get_types_from_msg

    from tinker_core.replay import ReplayBuffer

    b, out = str(bundles["v1"]), tmp_path / "run.mcap"
    cmd = [sys.executable, "-m", "tinker_cli", "bringup", "--namespace", "robot1", "--bundle", b, "--record", str(out),
           "--duration", "10", "--run-dir", str(tmp_path / "logs"), "--set", f"/**.control_period={ros2.PERIOD}",
           "--set", "sim_robot.episode_cycles=25"]
    p = subprocess.run(cmd, env=ros2.graph_env(ros2.fresh_domain()), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]

    kilted = get_typestore(Stores.ROS2_KILTED)  # rosbags' own copies of the standard definitions
    own = get_typestore(Stores.EMPTY)  # only what the file itself describes
    msgs: dict[str, list] = defaultdict(list)
    with Reader(out) as r:
        types = {c.topic: c.msgtype for c in r.connections}
        for c in r.connections:
            own.register(get_types_from_msg(c.msgdef.data, c.msgtype))
        for c, _, raw in r.messages():
            store = own if c.msgtype == "tinker_msgs/msg/CycleRecord" else kilted
            msgs[c.topic].append(store.deserialize_cdr(raw, c.msgtype))
    assert {t: types.get(t) for t in STANDARD} == STANDARD
    js = msgs["/robot1/joint_states"][-1]
    assert list(js.name) == [f"lbr_iiwa_joint_{i}" for i in range(1, 8)] and len(js.position) == 7
    img = msgs["/robot1/camera/image_raw"][-1]
    assert (img.width, img.height, img.encoding, len(img.data)) == (64, 64, "rgb8", 64 * 64 * 3)
    tf = msgs["/tf"][-1].transforms
    assert [t.child_frame_id for t in tf] == [f"lbr_iiwa_link_{i}" for i in range(1, 8)]
    assert tf[0].header.frame_id == "lbr_iiwa_link_0" and tf[0].header.stamp == js.header.stamp
    assert any(s.name == "/robot1/safety" for d in msgs["/diagnostics"] for s in d.status)
    assert len(msgs["/robot1/forward_position_controller/commands"][-1].data) == 7

    cycles = msgs["/tinker/cycle"]
    assert len(cycles) > 50
    served = [c for c in cycles if len(c.raw_action) == 7 and len(c.safe_command) == 7]
    assert served and served[-1].policy_version == "1" and served[-1].safety_status
    by_episode: dict[int, list] = defaultdict(list)
    for c in cycles:
        by_episode[c.episode].append(c)
    assert len(by_episode) >= 2  # episode_cycles=25 over ~100 cycles
    for ep, cs in by_episode.items():
        ends = [c.cycle for c in cs if c.terminated or c.truncated]
        live = [c.cycle for c in cs if not c.after_end]
        assert len(ends) <= 1 and (not ends or ends[0] == live[-1]), (ep, ends, live)
        assert all(c.after_end for c in cs if ends and c.cycle > ends[0])
    assert any(c.terminated or c.truncated for c in cycles)

    from tinker_cli import main as tinker

    assert tinker(["replay", "import", str(out), "-o", str(tmp_path / "replay")]) == 0
    buf = ReplayBuffer.load(tmp_path / "replay")
    assert len(buf) > 20 and np.isfinite(buf.sample(8).reward).all()


def test_cycles_are_joined_in_stamp_order_whatever_order_the_topics_arrive_in():
    """The view node's executor takes each topic's queue in turn: cycle k+1's features can come before
    cycle k's task. The join still gives cycles in the robot's order, each with its own parts."""
    from tinker.recording import CycleJoin

    j, out = CycleJoin(), []
    for k in range(1, 9):
        j.features({"stamp_ns": str(k + 1)}, [float(k + 1)], 0)  # the next cycle's features first
        out += j.task({"stamp_ns": str(k), "cycle": str(k)}, [-1.0, 0.0, 0.0])
        j.command({"stamp_ns": str(k), "status": "passed"}, [0.0] * 7, 5)
    out += j.flush()
    assert [r["cycle"] for r in out] == list(range(1, 9))
    assert all(r["policy_input"].tolist() == [float(r["cycle"])] for r in out[1:])
    assert all(r["safety_status"] == "passed" for r in out)
    late = j.task({"stamp_ns": "3", "cycle": "3"}, [0.0, 0.0, 0.0])  # a message for a cycle already out
    assert late == [] and j.flush() == []


def test_episode_labels_are_recorded_and_replay_import_applies_them_as_the_bridge_did(tmp_path):
    """The experience bridge's labels travel in its recording (``/tinker/episode_label``) and `tinker replay import`
    gives the transitions `EpisodeLabels` gave the learner live: the same labelled ones, the same terminal rewards,
    nothing of a labelled episode after its label."""
    import argparse

    from tinker.recording import CycleRecorder, read_labels
    from tinker_cli import replay_import
    from tinker_core.loop.cycle_join import transitions as cycles_to_transitions
    from tinker_core.loop.episode_label import EpisodeLabels, LabelRecord
    from tinker_core.replay import ReplayBuffer

    rec = CycleRecorder(tmp_path / "run.mcap")
    plan = [(k, 0, k == 5) for k in range(1, 6)] + [(k, 1, False) for k in range(6, 13)]
    for k, ep, done in plan:
        rec.write(_rec(k, ep, done), k * 10**8)
    # live: the bridge's EpisodeLabels over the same transitions; episode 0 ended at cycle 5 and is labelled a
    # failure within the window, episode 1 is labelled success while it runs (at cycle 9): 9..11 go no further
    live_ts = cycles_to_transitions([_rec(k, ep, done) for k, ep, done in plan])
    labels, live, now = EpisodeLabels(window_s=1.0, success_reward=7.0, failure_reward=-2.0), [], 0.0
    for t in live_ts:
        now = t.info["cycle"] * 0.1
        ep = 0 if t.info["cycle"] < 6 else 1
        if t.info["cycle"] == 6:
            done, got = labels.label(False, now)
            rec.write_label(LabelRecord.of(done.episode, got[0], 123), 6 * 10**8)
            live += got
        if t.info["cycle"] == 10:
            done, got = labels.label(True, now)
            rec.write_label(LabelRecord.of(done.episode, got[0], 456), 10 * 10**8)
            live += got
        live += labels.add(t, ep, now)
    live += labels.flush()
    rec.close()
    got_labels = read_labels(tmp_path / "run.mcap")
    assert [(lb.episode, lb.cycle, lb.success, lb.reward, lb.labelled_ns) for lb in got_labels] == \
        [(0, 4, False, -0.1 - 2.0, 123), (1, 9, True, 7.0, 456)]  # a failure: the penalty on the step's own reward
    replay_import.run(argparse.Namespace(mcap=str(tmp_path / "run.mcap"), out=str(tmp_path / "run.replay"),
                                         estop_reward=None))
    buf = ReplayBuffer.load(tmp_path / "run.replay")
    imported = buf.storage.get(np.arange(len(buf)), with_info=True)

    def key(obs, reward, term, trunc):
        return (round(float(np.asarray(obs).reshape(-1)[0]), 3), round(float(reward), 4), bool(term), bool(trunc))  # float32

    live_keys = sorted(key(t.obs, t.reward, t.terminated, t.truncated) for t in live)
    imported_keys = sorted(key(o, r, te, tr) for o, r, te, tr in zip(imported.obs, imported.reward, imported.terminated,
                                                                      imported.truncated))
    assert imported_keys == live_keys
    assert len(live) == 8  # cycles 1-4 and 6-9: 5 ended episode 0, 10 and 11 came after episode 1's label
    # the failure stays bootstrapped (truncated) with the penalty, the success is terminal with its reward
    assert [k[1:] for k in live_keys if k[2] or k[3]] == [(-2.1, False, True), (7.0, True, False)]


def test_a_recording_whose_recorder_died_reads_back_up_to_its_last_complete_chunk(tmp_path, capsys):
    """A recorder killed mid-run (kill -9, power lost) never writes the summary. Its file as the disk has it then (a
    copy taken without closing the recorder) reads back through `read_cycles`, every record of its complete chunks,
    with a warning, and so does the same file cut short in the middle of a chunk."""
    import shutil
    import warnings

    import pytest

    from tinker.recording import CycleRecorder, read_cycles
    from tinker_cli import main as tinker

    rec = CycleRecorder(tmp_path / "run.mcap")
    n = 1000  # four chunks of these records and part of a fifth (tinker.recording.CHUNK_BYTES)
    for k in range(1, n + 1):
        rec.write(_rec(k, k // 50, k % 50 == 0), k * 10**8)
    shutil.copy(tmp_path / "run.mcap", tmp_path / "killed.mcap")  # what a kill -9 leaves now
    rec.close()
    assert [r["cycle"] for r in read_cycles(tmp_path / "run.mcap")] == list(range(1, n + 1))
    with pytest.warns(UserWarning, match=r"killed.mcap: cut short after \d+ /tinker/cycle messages"):
        kept = [r["cycle"] for r in read_cycles(tmp_path / "killed.mcap")]
    assert kept == list(range(1, len(kept) + 1)) and n - len(kept) < n // 4, len(kept)  # at most the open chunk lost
    data = (tmp_path / "killed.mcap").read_bytes()
    (tmp_path / "torn.mcap").write_bytes(data[: len(data) - len(data) // 8])  # the last chunk's write cut off
    with pytest.warns(UserWarning, match="torn.mcap: cut short"):
        torn = [r["cycle"] for r in read_cycles(tmp_path / "torn.mcap")]
    assert torn == list(range(1, len(torn) + 1)) and len(kept) - n // 4 <= len(torn) < len(kept), (len(torn), len(kept))
    assert tinker(["replay", "import", str(tmp_path / "killed.mcap"), "-o", str(tmp_path / "killed.replay")]) == 0
    out = capsys.readouterr().out
    assert "killed.mcap: cut short after" in out and f"tinker replay import: {len(kept)} cycles" in out, out
