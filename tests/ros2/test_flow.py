"""`tinker flow` against publishers over real DDS: its window starts once the loop's edges are matched.

Issue 22: in a fresh-clone CI run `tinker flow --duration 4` counted 34 joint targets but 4 commands; the
graph's commands flowed all along (a probe connected since start-up saw every cycle), the flow's own participant
matched the safety node's writer 3.6 s late. Here the publishers appear only after the window a flow that
starts at once would measure: it would count nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import numpy as np

NS = "flowtest"
LATE_S = 2.5
"""the publishers appear this long after `tinker flow`'s node is on the graph (its --duration is shorter)"""


def test_flow_waits_for_the_loops_edges_before_its_window_starts(ros2):
    from sensor_msgs.msg import JointState

    from tinker.flow import LOOP_EDGES
    from tinker.wire import TOPICS, array_msg

    domain = ros2.fresh_domain()
    env = ros2.graph_env(domain)
    flow = subprocess.Popen([sys.executable, "-m", "tinker_cli", "flow", "--namespace", NS, "--duration", "2",
                             "--json", "--wait", "20"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    probe = ros2.Probe(domain, "flow_publisher")
    stop = threading.Event()
    try:
        ros2.wait_until(lambda: f"tinker_flow_{flow.pid}" in probe.node.get_node_names() or flow.poll() is not None,
                        60, "tinker flow's node")
        time.sleep(LATE_S)
        pubs = {r: probe.publisher(TOPICS[r].type, f"/{NS}/{TOPICS[r].name}", TOPICS[r].qos) for r in LOOP_EDGES}

        def publish() -> None:
            while not stop.is_set():
                stamp = time.time_ns()
                js = JointState(name=[f"j{i}" for i in range(7)], position=[0.0] * 7)
                js.header.stamp.sec, js.header.stamp.nanosec = divmod(stamp, 10**9)
                pubs["joint_states"].publish(js)
                pubs["features"].publish(array_msg(np.zeros(4), {"stamp_ns": stamp}, double=False))
                for r in ("joint_target", "command"):
                    pubs[r].publish(array_msg(np.zeros(7), {"stamp_ns": stamp}))
                time.sleep(0.05)

        t = threading.Thread(target=publish, daemon=True)
        t.start()
        out, err = flow.communicate(timeout=60)
    finally:
        stop.set()
        if flow.poll() is None:
            flow.kill()
            flow.wait()
        probe.close()
    assert flow.returncode == 0, out + err
    got = json.loads(out[out.index("{"):])
    edges = got["edges"]
    for r in LOOP_EDGES:  # ~40 in the 2 s window at 20 Hz; a window that started before the match counts ~0
        e = edges.get(TOPICS[r].name)
        assert e and e["messages"] >= 10, (r, edges, err)
    # the graph's other edges had no publisher here: named as silent, not left out
    assert TOPICS["episode_end"].name in got["silent"] and not {TOPICS[r].name for r in LOOP_EDGES} & set(got["silent"])


def test_flow_shows_the_learners_zeromq_edges_beside_the_topics(ros2, tmp_path):
    """`tinker flow --learner`: a real learner process counts its own edges; the flow prints them below the topics."""
    import os

    import gymnasium as gym
    import yaml

    from tinker_core.transition import Transition
    from tinker_core.transport import ControlClient, TransitionSender, free_endpoints

    ends = dict(zip(("transitions", "weights", "params", "control"), free_endpoints(4)))
    cfg = tmp_path / "learner.yaml"
    cfg.write_text(yaml.safe_dump({"learner": {"env_id": "Pendulum-v1", "warmup": 10_000, "publish_every": 0,
                                               "checkpoint_every": 0, "algo_kwargs": {"net_arch": [16]},
                                               **{f"{k}_endpoint": e for k, e in ends.items()}}}))
    learner = subprocess.Popen([sys.executable, "-m", "tinker_cli", "learner", "--config", str(cfg)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=dict(os.environ))
    sender = TransitionSender(ends["transitions"])
    ctl = ControlClient(ends["control"], timeout_ms=2000)
    try:
        ros2.wait_until(lambda: _answers(ctl), 90, "the learner's control endpoint")
        env = gym.make("Pendulum-v1")
        obs, _ = env.reset(seed=0)
        for _ in range(20):  # as the experience bridge sends them: stamped with the state each ends in
            a = env.action_space.sample()
            nxt, r, term, trunc, _ = env.step(a)
            info = {"source": "real", "stamp_ns": time.time_ns() - 30_000_000}
            sender.send(Transition(obs, a, float(r), term, trunc, info, nxt))
            obs = nxt
        ros2.wait_until(lambda: ctl.request({"cmd": "status"})["receiver"]["received"] >= 20, 30, "20 transitions in")
        domain_env = ros2.graph_env(ros2.fresh_domain())
        base = [sys.executable, "-m", "tinker_cli", "flow", "--learner", ends["control"], "--wait", "0"]
        table = subprocess.run(base + ["--duration", "1.6"], env=domain_env, capture_output=True, text=True, timeout=60)
        js = subprocess.run(base + ["--duration", "0.5", "--json"], env=domain_env, capture_output=True, text=True,
                            timeout=60)
    finally:
        sender.close()
        ctl.close()
        learner.terminate()
        learner.wait(timeout=30)
    assert table.returncode == 0 and js.returncode == 0, table.stdout + table.stderr + js.stderr
    row = next(ln for ln in table.stdout.splitlines() if ln.startswith("transitions"))
    assert row.endswith("experience_bridge, rollout_worker -> learner (zmq)") and row.split()[5] == "20", row
    got = json.loads(js.stdout[js.stdout.index("{"):])["learner"]
    assert got["error"] == "" and got["endpoint"] == ends["control"]
    t = got["edges"]["transitions"]
    assert t["messages"] == 20 and 30_000 <= t["latency_p50_us"] < 5e6, t
    assert got["edges"]["params"]["messages"] >= 1 and got["edges"]["bundles"]["messages"] == 0


def _answers(ctl) -> bool:
    from tinker_core.errors import TransportError

    try:
        return bool(ctl.request({"cmd": "status"}).get("ok"))
    except TransportError:
        return False
