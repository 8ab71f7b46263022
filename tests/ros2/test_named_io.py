"""Named policy I/O on real nodes: the test plays the robot for perception + policy (separate processes).

Joints are mapped by name (a shuffled JointState drives the same commands), a missing joint is
refused with its name, and the node's action chain equals the sim env's chain for the same inputs.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

JOINTS = [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]


@pytest.fixture(scope="module")
def io(ros2, bundles, tmp_path_factory):
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import Float32MultiArray, Float64MultiArray

    from tinker.bringup import Graph
    from tinker.wire import COMMAND_QOS, RECORD_QOS

    tmp = tmp_path_factory.mktemp("named_io")
    domain = ros2.fresh_domain()
    b = str(bundles["v1"])
    graph = Graph(nodes=["perception", "policy"], run_dir=tmp / "logs", env=ros2.graph_env(domain),
                  overrides={"perception": {"bundle": b}, "policy": {"bundle": b},
                             "/**": {"control_period": ros2.PERIOD}})
    probe = ros2.Probe(domain, "robot")
    probe.targets = probe.collect(Float64MultiArray, "/policy/joint_target", RECORD_QOS)
    probe.raw = probe.collect(Float64MultiArray, "/policy/raw_action", RECORD_QOS)
    probe.js_pub = probe.publisher(JointState, "/joint_states", COMMAND_QOS)
    probe.img_pub = probe.publisher(Image, "/camera/image_raw", COMMAND_QOS)
    probe.task_pub = probe.publisher(Float64MultiArray, "/task", COMMAND_QOS)
    probe.features = probe.collect(Float32MultiArray, "/perception/features", RECORD_QOS)
    graph.probe = probe
    graph.start()
    # discovery of the probe's publishers by the nodes (a missed first announcement waits for the next, 3 s on)
    for pub in (probe.js_pub, probe.img_pub, probe.task_pub):
        ros2.wait_until(lambda: pub.get_subscription_count() >= 1, 15, f"a subscriber on {pub.topic_name}")
    for topic in ("/policy/joint_target", "/policy/raw_action", "/perception/features"):  # and of the answers
        ros2.wait_until(lambda: probe.node.count_publishers(topic) >= 1, 15, f"a publisher on {topic}")
    yield graph
    probe.close()  # first: no other participant of this process spins while the graph's node is finalised
    graph.stop()


def _cycle(g, ros2, stamp: int, cycle: int, episode: int, q: np.ndarray, names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Publish one robot cycle (task, image, joint state in ``names`` order); returns (raw action, joint target)."""
    from sensor_msgs.msg import Image, JointState

    from tinker.wire import array_msg, set_stamp

    ee = np.array([0.5, 0.0, 0.5])
    target = np.array([0.55, 0.1, 0.35])
    task = np.concatenate([[-0.2, 0.0, 0.0, 0.2], ee, target, target - ee])
    g.probe.task_pub.publish(array_msg(task, {"stamp_ns": stamp, "cycle": cycle, "episode": episode,
                                              "terms": "ee_pos:3,target_pos:3,target_minus_ee:3"}))
    img = Image(height=64, width=64, encoding="rgb8", step=192)
    set_stamp(img.header, stamp)
    img.data = (np.arange(64 * 64 * 3) % 251).astype(np.uint8).tobytes()
    pos = {n: float(v) for n, v in zip(JOINTS, q)}
    js = JointState(name=names, position=[pos[n] for n in names], velocity=[0.0] * len(names))
    set_stamp(js.header, stamp)
    js.header.frame_id = f"cycle={cycle}"
    n0 = len(g.probe.targets)
    time.sleep(0.05)
    g.probe.img_pub.publish(img)
    g.probe.js_pub.publish(js)
    ros2.wait_until(lambda: any(ros2.meta_of(m).get("stamp_ns") == str(stamp) for _, m in list(g.probe.targets)[n0:]),
                    10, f"the policy's answer to cycle {cycle}")
    tgt = next(m for _, m in list(g.probe.targets)[n0:] if ros2.meta_of(m).get("stamp_ns") == str(stamp))
    raw = next(m for _, m in reversed(list(g.probe.raw)) if ros2.meta_of(m).get("stamp_ns") == str(stamp))
    return np.asarray(raw.data), np.asarray(tgt.data)


def test_shuffled_joint_order_drives_the_same_commands_and_the_chain_equals_sim(io, ros2):
    from tinker_sim.arm_env import ArmEnv

    rng = np.random.default_rng(0)
    home = np.array([0.0, 0.5, 0.0, -1.5, 0.0, 1.0, 0.0])
    qs = [home + rng.uniform(-0.05, 0.05, 7) * k for k in range(4)]
    shuffled = list(rng.permutation(JOINTS))
    base = time.time_ns()
    a = [_cycle(io, ros2, base + k, k + 1, 1, q, JOINTS) for k, q in enumerate(qs)]
    b = [_cycle(io, ros2, base + 100 + k, k + 1, 2, q, shuffled) for k, q in enumerate(qs)]
    for (raw_a, tgt_a), (raw_b, tgt_b) in zip(a, b):
        np.testing.assert_allclose(raw_b, raw_a, atol=1e-6)
        np.testing.assert_allclose(tgt_b, tgt_a, atol=1e-9)
    # the sim env's own ActionChain, fed the node's raw actions and the same measured positions
    env = ArmEnv(task="reach", control_period=ros2.PERIOD)
    try:
        chain = env.action_chain
        chain.reset(qs[0])
        for q, (raw, tgt) in zip(qs, a):
            np.testing.assert_allclose(chain(raw, q), tgt, atol=1e-6)
    finally:
        env.close()
    assert max(np.max(np.abs(t - q)) for q, (_, t) in zip(qs, a)) > 1e-3  # the commands really moved


def test_a_missing_joint_is_refused_with_its_name(io, ros2):
    from sensor_msgs.msg import JointState
    from tinker.wire import set_stamp

    names = [n for n in JOINTS if n != "lbr_iiwa_joint_3"]
    n0 = len(io.probe.features)
    js = JointState(name=names, position=[0.1] * 6, velocity=[0.0] * 6)
    set_stamp(js.header, time.time_ns())
    io.probe.js_pub.publish(js)
    time.sleep(1.0)
    assert len(io.probe.features) == n0  # nothing computed from it
    assert "missing joints ['lbr_iiwa_joint_3']" in io.log("perception") + io.log("policy")


def test_perception_refuses_to_start_on_a_robot_that_lacks_a_joint(ros2, bundles, tmp_path):
    from sensor_msgs.msg import JointState

    from tinker.bringup import Graph
    from tinker.wire import COMMAND_QOS

    domain = ros2.fresh_domain()
    g = Graph(nodes=["perception"], run_dir=tmp_path, env=ros2.graph_env(domain),
              overrides={"perception": {"bundle": str(bundles["v1"])}, "/**": {"control_period": ros2.PERIOD}})
    probe = ros2.Probe(domain, "robot2")
    try:
        g.start()
        pub = probe.publisher(JointState, "/joint_states", COMMAND_QOS)
        names = JOINTS[:4] + JOINTS[5:] + ["gripper_joint"]
        end = time.monotonic() + 15
        while g.procs["perception"].poll() is None and time.monotonic() < end:
            pub.publish(JointState(name=names, position=[0.0] * 7, velocity=[0.0] * 7))
            time.sleep(0.2)
        assert g.procs["perception"].poll() == 3
        log = g.log("perception")
        assert "missing joints ['lbr_iiwa_joint_5']" in log and "extra joints ['gripper_joint']" in log
    finally:
        probe.close()
        g.stop()
