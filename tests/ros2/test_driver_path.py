"""The loop without the simulator (``sim:=false``): a stand-in ros2_control driver that speaks only standard
topics drives perception, policy and safety on the shipped default policy.

The driver is this test's process: it publishes ``joint_states`` (sensor_msgs/JointState with default,
reliable QoS, as a joint_state_broadcaster) at the robot's rate and a ``goal`` (geometry_msgs/PointStamped)
once, and listens on ``forward_position_controller/commands``. No ``task`` topic, no cycle tags, no bundle
parameter: perception takes the newest goal for every state and ``ee_pos`` from the URDF.

The driver's forward_command_controller takes its joints in the URDF's order, or in another (``command_joints``,
set once in the launch YAML's ``/**``): each command it gets, read in its own order, must start at the pose it
reported and move by small steps (read in another order, the first command would be 0.8 rad off on two joints).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

JOINTS = [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]
HOME = [0.0, 0.4, 0.0, -1.2, 0.0, 1.2, 0.0]


@pytest.mark.parametrize("controller", [JOINTS, JOINTS[::-1]], ids=["urdf_order", "reversed"])
def test_joint_states_and_a_goal_alone_run_the_loop_on_the_default_policy(ros2, tmp_path, controller):
    from geometry_msgs.msg import PointStamped
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float32MultiArray, Float64MultiArray

    from tinker.bringup import Graph
    from tinker.wire import RECORD_QOS, set_stamp

    domain = ros2.fresh_domain()
    probe = ros2.Probe(domain, "driver")
    cmds = probe.collect(Float64MultiArray, "/forward_position_controller/commands", RECORD_QOS)
    feats = probe.collect(Float32MultiArray, "/perception/features", RECORD_QOS)
    js_pub = probe.publisher(JointState, "/joint_states", 10)  # rclpy's default QoS: reliable, volatile
    goal_pub = probe.publisher(PointStamped, "/goal", 10)
    stop = threading.Event()

    def in_robot_order(data) -> list[float]:  # the controller's vector, by joint name
        return [float(data[controller.index(j)]) for j in JOINTS]

    def driver():  # the robot: 20 Hz joint states at the last commanded (or home) position
        period = 0.05
        while not stop.is_set():
            with probe.lock:
                last = [m for _, m in cmds[-1:]]
            js = JointState(name=JOINTS, position=in_robot_order(last[0].data) if last else HOME, velocity=[0.0] * 7)
            set_stamp(js.header, time.time_ns())
            js_pub.publish(js)
            time.sleep(period)

    g = Graph(nodes=["sim_robot", "perception", "policy", "safety"], sim=False, run_dir=tmp_path,
              env=ros2.graph_env(domain), overrides={"/**": {"command_joints": ",".join(controller)}})
    # sim=False: what the launch file's sim:=false does
    assert g.nodes == ["perception", "policy", "safety"] and g.parameters("perception")["task_synced"] is False
    thread = threading.Thread(target=driver, daemon=True)
    try:
        thread.start()
        g.start()
        time.sleep(1.0)
        assert not list(feats), "perception ran without a goal"  # nothing to aim at yet
        goal = PointStamped()
        goal.point.x, goal.point.y, goal.point.z = 0.55, 0.1, 0.35
        set_stamp(goal.header, time.time_ns())
        goal_pub.publish(goal)
        ros2.wait_until(lambda: sum(ros2.meta_of(m).get("version") == "0" for _, m in list(cmds)) >= 20, 30,
                        "20 policy commands from the shipped default bundle (v0)")
        served = [m for _, m in list(cmds) if ros2.meta_of(m).get("version") == "0"]
        assert all(len(m.data) == 7 and np.isfinite(m.data).all() for m in served)
        path = np.array([HOME, *(in_robot_order(m.data) for m in served)])
        assert np.abs(np.diff(path, axis=0)).max() < 0.2, np.round(path[:3], 3)  # from the pose it reported, by steps
        assert {ros2.meta_of(m)["status"] for m in served} - {"held", "estopped"}, "safety never passed a command"
        assert "pretrained/arm_reach/bundle" in g.log("perception") and "pretrained/arm_reach/bundle" in g.log("policy")
    finally:
        stop.set()
        thread.join(2)
        probe.close()
        g.stop()
