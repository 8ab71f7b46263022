"""Latency compensation in the ROS 2 graph: the shipped state sorter on a robot whose commands land 4 control periods
late (far_latency_sort), with ``latency_compensation: 4`` set once in the launch YAML's ``/**`` section, or with
``latency_auto: true`` from 0: the safety node takes the 4 it measures, perception follows it and the policy
follows perception's features.

Real processes over real DDS, on a domain of their own, at the bundle's 50 ms. Perception and the policy hear the
safe command (the pose in flight), and the robot takes the suction the policy sends, 4 cycles after it was chosen,
from ``policy/tool_command``. The same seeds through the loop's stages in one process (`tinker eval --runtime loop
--episodes 6 --seed 1000`): 2 of 6 episodes fully sorted without the compensation, 6 of 6 with it. The safety
node's /diagnostics report the latency its own states and commands show (`tinker_core.loop.latency_estimate`).

Both command types a ros2_control robot takes (``command_type``, also set once in ``/**``): Float64MultiArray for a
forward_command_controller, here one whose joints are listed in reverse (``command_joints``: safety sends in that
order, the robot, perception and the policy read it back by name), and JointTrajectory for a
joint_trajectory_controller, which perception, the policy and the experience bridge hear by joint name. The bridge's
recording shows that it heard each cycle's safe command and its safety status.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SORT = REPO / "pretrained" / "arm_sort" / "bundle"
FAR_LATENCY = REPO / "sim" / "config" / "dynamics" / "far_latency_sort.yaml"
EPISODES = 4


@pytest.mark.parametrize("command_type, latency", [("float64_array", 4), ("joint_trajectory", "auto")])
def test_the_sorter_works_on_a_robot_four_periods_late_when_the_graph_compensates(ros2, tmp_path, command_type,
                                                                                  latency):
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from std_msgs.msg import Float64MultiArray

    from tinker.bringup import Graph
    from tinker.recording import read_cycles
    from tinker.wire import LATCHED_QOS, RECORD_QOS

    safety = ros2.patient_safety(tmp_path)
    domain = ros2.fresh_domain()
    probe = ros2.Probe(domain, "latency")
    task = probe.collect(Float64MultiArray, "/task", RECORD_QOS)
    tools = probe.collect(Float64MultiArray, "/policy/tool_command", RECORD_QOS)
    probe.diag = probe.collect(DiagnosticArray, "/diagnostics", RECORD_QOS)
    taken = probe.collect(DiagnosticStatus, "/safety/command_latency", LATCHED_QOS)
    cycles = tmp_path / "cycles.mcap"
    reversed_joints = ",".join(f"lbr_iiwa_joint_{i}" for i in range(7, 0, -1))
    g = Graph(nodes=["sim_robot", "perception", "policy", "safety", "experience_bridge"], run_dir=tmp_path / "logs",
              env=ros2.graph_env(domain),
              overrides={"/**": {"latency_compensation": 0 if latency == "auto" else latency,
                                 "latency_auto": latency == "auto", "command_type": command_type,
                                 "command_joints": reversed_joints if command_type == "float64_array" else ""},
                         "perception": {"bundle": str(SORT)}, "policy": {"bundle": str(SORT)},
                         "sim_robot": {"episode_cycles": 200, "seed": 1000, "dynamics": str(FAR_LATENCY)},
                         "safety": {"config": str(safety)}, "experience_bridge": {"record": str(cycles)}})
    start = 0 if latency == "auto" else 4
    assert g.parameters("perception")["latency_compensation"] == g.parameters("policy")["latency_compensation"] == start
    assert {g.parameters(n)["command_type"] for n in g.nodes} == {command_type}

    rogue_seen: list[dict] = []

    def second_publisher() -> None:
        """A second publisher of the latency, as a typo in `ros2 topic pub` or an attacker would be, once the
        episodes are done: perception names it (WARN) and refuses its 25 periods."""
        from diagnostic_msgs.msg import KeyValue

        rogue = probe.publisher(DiagnosticStatus, "/safety/command_latency", LATCHED_QOS)
        since = probe.node.get_clock().now().nanoseconds
        rogue.publish(DiagnosticStatus(name="rogue", values=[KeyValue(key="periods", value="25")]))

        def warned() -> bool:
            rogue_seen[:] = [st for st in probe.statuses("/perception", since) if st["level"] == b"\x01"
                             and "2 publishers on /safety/command_latency" in st["message"]]
            return bool(rogue_seen) and "command_latency.periods" in g.log("perception")
        ros2.wait_until(warned, 10, "perception names the second publisher and refuses its latency")

    done = ros2.run_episodes(g, probe, task, EPISODES, 180, then=second_publisher if latency == "auto" else None)
    assert sorted(done) == list(range(EPISODES)) and sum(done.values()) >= EPISODES - 1, done
    assert len(tools) > 50 and all(len(m.data) == 1 for _, m in list(tools))  # the suction alone, every cycle
    # the safety node measured the latency it compensates from the states it heard and the commands it sent
    measured = [st.get("command_latency_periods") for st in probe.statuses("/safety")]
    assert measured and measured[-1] == "4", measured[-5:]
    log = g.log("perception")
    assert f"pose in flight ({start} periods of command latency" in log, log[-2000:]
    refused = [line for line in log.splitlines() if "input refused" in line]  # only the second publisher's latency
    assert len(refused) == (latency == "auto") and all("command_latency.periods" in r for r in refused), refused
    # not a cycle's input: nothing downstream waits on it, and the log does not say it was held
    assert all("on command_latency (" in r and "cycle held" not in r for r in refused), refused
    if latency == "auto":  # safety took the 4 it measured, once; perception and (through its features) the policy
        sent = [next(kv.value for kv in m.values if kv.key == "periods") for _, m in list(taken) if m.name != "rogue"]
        assert sent == ["4"], taken
        assert "compensated from now on, was 0 (latency_auto)" in g.log("safety")
        for node in ("/safety", "/perception", "/policy"):
            assert probe.statuses(node)[-1].get("latency_compensation") == "4", (node, probe.statuses(node)[-1])
    else:
        assert not list(taken)  # nothing goes out without latency_auto
    assert "input refused" not in g.log("policy") + g.log("experience_bridge")
    heard = [r for r in read_cycles(cycles) if len(r["safe_command"]) == 7]  # each cycle's command, its 7 joints
    outcomes = Counter(r["safety_status"].split(":")[0] for r in heard)  # 'rate_limited: joint 2 ...' -> rate_limited
    ran = outcomes["passed"] + outcomes["clipped"] + outcomes["rate_limited"]  # the others: held, estopped
    assert len(heard) > 100 and all(r["safety_status"] for r in heard) and ran >= 0.9 * len(heard), outcomes
    if latency == "auto":  # the second publisher, named; its latency refused; what safety measured stays
        assert rogue_seen and rogue_seen[-1]["latency_compensation"] == "4", rogue_seen
