"""Three robots in one graph, one namespace each (tinker.fleet, issue 24), real nodes over real DDS.

Each robot's loop is one composed process with its policy in a process of its own, so one robot's policy can be
killed alone: that robot holds and latches its e-stop, the other two keep commanding, and no robot ever executes a
step beyond the velocity limit from its true pose (each sim_robot measures that against its physics).
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

AGENTS = ("robot1", "robot2", "robot3")
STEP_BOUND = 1.0
"""Largest executed |command - true pose| as a fraction of the URDF velocity limit times the period (see
test_attacks.py)."""


@pytest.fixture(scope="module")
def fleet(ros2, bundles, tmp_path_factory):
    import yaml
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from std_msgs.msg import Float64MultiArray

    from tinker.fleet import Fleet
    from tinker.wire import LATCHED_QOS, RECORD_QOS

    tmp = tmp_path_factory.mktemp("fleet")
    # robot3 runs the test's v1 bundle, the others v2 (paths relative to the agents file)
    for v in ("v1", "v2"):
        (tmp / v).symlink_to(bundles[v])
    (tmp / "agents.yaml").write_text(yaml.safe_dump({"agents": {
        "robot1": {"policy": "SAC", "bundle": "v2"}, "robot2": {"policy": "SAC", "bundle": "v2"},
        "robot3": {"policy": "SAC", "bundle": "v1"}}}))
    from tinker_core.transport import TransitionReceiver

    domain = ros2.fresh_domain()
    learner = TransitionReceiver("tcp://127.0.0.1:0")  # one learner for every robot's bridge
    f = Fleet(tmp / "agents.yaml", separate=("policy",), env=ros2.graph_env(domain), run_dir=tmp / "logs",
              overrides={"/**": {"control_period": ros2.PERIOD, "camera_rate_hz": 0.0},  # camera in line (the bundles see it)
                         "sim_robot": {"episode_cycles": 15},
                         "experience_bridge": {"learner_endpoint": learner.endpoint}})
    f.learner = learner
    probe = ros2.Probe(domain, "fleet_probe")
    probe.commands = {a: probe.collect(Float64MultiArray, f"/{a}/forward_position_controller/commands", RECORD_QOS)
                      for a in AGENTS}
    probe.estop = {a: probe.collect(DiagnosticStatus, f"/{a}/safety/estop_state", LATCHED_QOS) for a in AGENTS}
    probe.diag = probe.collect(DiagnosticArray, "/diagnostics", RECORD_QOS)
    f.probe = probe
    f.start()
    try:
        for a in AGENTS:
            f.graphs[a].call_trigger("safety/reset")  # a start-up stall on the shared machine may have latched it
        yield f
    finally:
        probe.close()
        f.stop()
        learner.close()


def _served(f, ros2, agent: str, since_ns: int = 0) -> list:
    return [m for t, m in list(f.probe.commands[agent]) if t >= since_ns and ros2.meta_of(m).get("version")]


def _diags(f, agent: str, node: str, since_ns: int = 0) -> list[dict[str, str]]:
    return [{"level": st.level, "message": st.message, **{kv.key: kv.value for kv in st.values}}
            for t, arr in list(f.probe.diag) for st in arr.status if t >= since_ns and st.name == f"/{agent}/{node}"]


def test_each_robot_runs_in_its_namespace_with_its_own_bundle_and_safety(fleet, ros2):
    since = time.time_ns()
    ros2.wait_until(lambda: all(len(_served(fleet, ros2, a, since)) >= 5 for a in AGENTS), 20,
                    "commands from every robot's safety node")
    versions = {a: ros2.meta_of(_served(fleet, ros2, a, since)[-1])["version"] for a in AGENTS}
    assert versions == {"robot1": "2", "robot2": "2", "robot3": "1"}, versions
    for a in AGENTS:  # each robot has its own lifecycle
        assert fleet.graphs[a].state("safety") == "active" and fleet.graphs[a].state("policy") == "active"
    # one supervising participant for the whole fleet: with one per robot, 20 robots made 40 participants and
    # the 18th robot's nodes were never discovered (benchmarks/fleet.py, 2026-12-04)
    supervisors = {fleet.graphs[a]._node.get_fully_qualified_name() for a in AGENTS}
    assert len(supervisors) == 1 and fleet.supervisor is not None, supervisors


def test_one_learner_gets_a_stream_per_robot(fleet, ros2):
    by_robot: dict[str, int] = {}
    end = time.monotonic() + 30
    while time.monotonic() < end and (len(by_robot) < 3 or min(by_robot.values()) < 5):
        for t in fleet.learner.recv_many(64, timeout_ms=200):
            ns = t.info["namespace"]
            by_robot[ns] = by_robot.get(ns, 0) + 1
            assert t.action.shape == (7,) and t.info["policy_version"] == ("1" if ns == "/robot3" else "2"), t.info
    assert set(by_robot) == {f"/{a}" for a in AGENTS} and min(by_robot.values()) >= 5, by_robot


def test_killing_one_robots_policy_holds_only_that_robot(fleet, ros2):
    ros2.wait_until(lambda: all(len(_served(fleet, ros2, a, time.time_ns() - 10**9)) >= 3 for a in AGENTS), 20,
                    "every robot commanding")
    fleet.graphs["robot2"].kill("policy", signal.SIGKILL)
    killed = time.time_ns()
    ros2.wait_until(lambda: any(s.level == s.ERROR for t, s in list(fleet.probe.estop["robot2"]) if t >= killed), 10,
                    "robot2's e-stop after its policy died")
    time.sleep(1.0)
    late = killed + 300_000_000  # a command already on its way when the policy died may still arrive
    assert not _served(fleet, ros2, "robot2", late), "robot2 was still served after its policy died"
    assert [ros2.meta_of(m)["status"] for t, m in list(fleet.probe.commands["robot2"]) if t >= late][-3:] == ["estopped"] * 3
    for a in ("robot1", "robot3"):
        assert len(_served(fleet, ros2, a, late)) >= 10, f"{a} stopped commanding when robot2's policy died"
        assert not [s for t, s in list(fleet.probe.estop[a]) if t >= killed and s.level == s.ERROR], f"{a} latched"
    t0 = time.time_ns()
    ros2.wait_until(lambda: all(_diags(fleet, a, "sim_robot", t0) for a in AGENTS), 5, "sim_robot heartbeats")
    for a in AGENTS:  # what each robot executed, measured against its own physics
        d = _diags(fleet, a, "sim_robot")
        worst = max(float(x["max_command_step_window"]) for x in d)
        assert worst <= STEP_BOUND, f"{a} executed a step of {worst:.2f} x the velocity limit from its true pose"
        assert int(d[-1]["commands_over_velocity_limit"]) == 0, (a, d[-1])


def test_supervise_restarts_the_dead_policy_and_stops_only_the_robot_whose_loop_died(fleet, ros2):
    """After the previous test's kill -9 of robot2's policy: `Fleet.supervise` (what `tinker bringup --agents` runs
    twice a second) starts it again in robot2's namespace. Then robot2's composed loop (robot, perception, safety)
    dies: robot2 alone is stopped, with why; robot1 and robot3 go on commanding."""
    assert fleet.graphs["robot2"].procs["policy"].poll() is not None, "the previous test left no dead policy"
    said: list[str] = []
    end = time.monotonic() + 60
    while not any(" is back" in line for line in said) and time.monotonic() < end:
        said += fleet.supervise()
        time.sleep(0.2)
    assert said[0].startswith("/robot2: node policy exited with code -9; starting it again") and \
        said[-1].startswith("/robot2: node policy is back and active"), said
    assert fleet.graphs["robot2"].state("policy") == "active"
    fleet.graphs["robot2"].kill("composed", signal.SIGKILL)
    fleet.graphs["robot2"].procs["composed"].wait()
    said = fleet.supervise()
    assert len(said) == 1 and "/robot2: node composed exited with code -9: the loop's composed nodes ran in it" in \
        said[0] and said[0].endswith("/robot2 stopped; the other robots go on"), said
    assert set(fleet.robots_stopped) == {"robot2"} and fleet.graphs["robot2"].procs["policy"].poll() is not None
    since = time.time_ns()
    ros2.wait_until(lambda: all(len(_served(fleet, ros2, a, since)) >= 5 for a in ("robot1", "robot3")), 10,
                    "robot1 and robot3 commanding")
    assert fleet.supervise() == []


def test_the_agents_file_names_the_robot_and_field_in_its_errors(tmp_path):
    from tinker.fleet import Fleet
    from tinker_core.errors import ConfigError

    (tmp_path / "a.yaml").write_text("agents:\n  robot-1: {policy: SAC}\n")
    with pytest.raises(ConfigError, match=r"agents\.robot-1: a robot's name is its ROS namespace"):
        Fleet(tmp_path / "a.yaml")
    (tmp_path / "b.yaml").write_text("agents:\n  r1: {policy: SAC, bundle: nowhere}\n")
    with pytest.raises(ConfigError, match=r"agents\.r1\.bundle: not a bundle directory: .*nowhere"):
        Fleet(tmp_path / "b.yaml")
    assert not Path("nowhere").exists()
