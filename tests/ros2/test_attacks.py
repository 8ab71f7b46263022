"""Attacks on the running loop, with real nodes in separate processes over real DDS (issue 22).

One graph (sim_robot, perception, policy, safety under /atk, commands as trajectory_msgs/JointTrajectory
for a joint_trajectory_controller) serves the module; the tests run in file order, the destructive ones
last. Every test ends by checking what the robot itself measured: `sim_robot` compares each command it
executes with its TRUE pose (the physics, not a topic anyone can publish) and reports the largest step
as a fraction of the URDF velocity limit times the period (``max_command_step``, /diagnostics). The
safety node commands at most ``velocity_scale`` = 0.5 of that from the pose it measured; the robot moves
at most one more such step before a late command arrives, so no honest command exceeds 1.0.

Safety YAML here: the shipped one with ``watchdog_misses_to_estop: 5`` (missed cycles in a row), so that
a stall of the shared 2-core machine does not latch in the middle of an unrelated attack.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

NS = "atk"
MISSES_TO_ESTOP = 5
OK, ERROR = b"\x00", b"\x02"
"""diagnostic_msgs/DiagnosticStatus levels as rclpy gives them (bytes)"""
STEP_BOUND = 1.0
"""Largest executed |command - true pose| as a fraction of the URDF velocity limit times the period."""


@pytest.fixture(scope="module")
def g(ros2, bundles, tmp_path_factory):
    import yaml
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
    from sensor_msgs.msg import JointState
    from trajectory_msgs.msg import JointTrajectory

    from tinker_safety.config import DEFAULT_CONFIG_PATH
    from tinker.bringup import Graph
    from tinker.wire import LATCHED_QOS, RECORD_QOS, SENSOR_QOS

    tmp = tmp_path_factory.mktemp("attacks")
    cfg = yaml.safe_load(Path(DEFAULT_CONFIG_PATH).read_text())
    cfg["watchdog_misses_to_estop"] = MISSES_TO_ESTOP
    (tmp / "safety.yaml").write_text(yaml.safe_dump(cfg))
    domain = ros2.fresh_domain()
    b = str(bundles["v1"])
    graph = Graph(namespace=NS, nodes=["sim_robot", "perception", "policy", "safety"], run_dir=tmp / "logs",
                  env=ros2.graph_env(domain),
                  overrides={"perception": {"bundle": b}, "policy": {"bundle": b},
                             "safety": {"config": str(tmp / "safety.yaml")},
                             # the camera renders in line (every frame of its own state): a camera process
                             # starved on the shared machine would make perception hold for reasons of its own
                             "/**": {"control_period": ros2.PERIOD, "camera_rate_hz": 0.0,
                                     "command_type": "joint_trajectory"}})
    probe = ros2.Probe(domain, "attacker")
    t = f"/{NS}/"
    probe.commands = probe.collect(JointTrajectory, t + "forward_position_controller/commands", RECORD_QOS)
    probe.joints = probe.collect(JointState, t + "joint_states", SENSOR_QOS)
    probe.diag = probe.collect(DiagnosticArray, "/diagnostics", RECORD_QOS)
    probe.estop = probe.collect(DiagnosticStatus, t + "safety/estop_state", LATCHED_QOS)
    graph.probe, graph.tmp, graph.domain = probe, tmp, domain
    graph.start()
    try:
        ros2.wait_until(lambda: len(_served(graph, ros2, time.time_ns() - 10**9)) >= 5, 30, "policy commands")
    except AssertionError as e:
        seen = {n: (_diag(graph, n).get("message"), _diag(graph, n).get("cycles")) for n in graph.nodes}
        graph.stop()
        probe.close()
        raise AssertionError(f"{e}; commands seen {len(probe.commands)}, states {len(probe.joints)}, "
                             f"diagnostics {seen}") from None
    time.sleep(1.0)
    graph.call_trigger("safety/reset")  # a start-up stall on the shared machine may have latched the watchdog
    ros2.wait_until(lambda: len(_served(graph, ros2, time.time_ns() - 10**9)) >= 5, 30, "policy commands")
    yield graph
    probe.close()
    graph.stop()


# --- what the tests read -----------------------------------------------------------------------------------
def _meta(msg) -> dict[str, str]:
    from tinker.wire import decode_meta

    return decode_meta(msg.header.frame_id)


def _served(g, ros2, since_ns=0):
    """Safe commands answering a policy target (a policy version in the meta) received after ``since_ns``."""
    return [(t, m) for t, m in list(g.probe.commands) if t >= since_ns and _meta(m).get("version")]


def _diags(g, node: str, since_ns: int = 0) -> list[dict[str, str]]:
    return g.probe.statuses(f"/{NS}/{node}", since_ns)


def _diag(g, node: str) -> dict[str, str]:
    return g.probe.status(f"/{NS}/{node}")


def _true_q(g) -> np.ndarray:
    """The newest state the robot published (frame_id cycle=N: not one of the attacker's)."""
    return np.asarray(next(js.position for _, js in reversed(list(g.probe.joints)) if js.header.frame_id.startswith("cycle=")))


def _publish_off_pose(g, pub, make_msg, offset: float, seconds: float) -> None:
    """For ``seconds``, every 50 ms: ``make_msg(q)`` on ``pub``, q the robot's true pose with joint 0 moved
    ``offset`` rad towards the middle of its range."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        q = _true_q(g)
        q[0] += offset if q[0] < 0 else -offset
        pub.publish(make_msg(q))
        time.sleep(0.05)


def _estops_since(g, since_ns: int) -> list[str]:
    return [s.message for t, s in list(g.probe.estop) if t >= since_ns and s.level == s.ERROR]


def _longest_unserved(g, since_ns: int) -> int:
    """The most cycles in a row, since ``since_ns``, with no policy command reaching the robot (held, or nothing
    at all), from the robot's cycle numbers in the commands' metadata: a late probe does not count (it queues 50)."""
    cycles = sorted({int(_meta(m)["cycle"]) for t, m in _served(g, None, since_ns) if _meta(m).get("cycle")})
    assert len(cycles) > 20, f"only {len(cycles)} served commands: the test shows nothing"
    return max(b - a - 1 for a, b in zip(cycles, cycles[1:]))


def _check_robot_steps(g, ros2, since_ns: int) -> None:
    """What the robot executed since ``since_ns``: never a step above the bound from its true pose."""
    t0 = time.time_ns()
    ros2.wait_until(lambda: len(_diags(g, "sim_robot", t0)) >= 1, 5, "a sim_robot heartbeat")
    d = _diags(g, "sim_robot", since_ns)
    worst = max(float(x["max_command_step_window"]) for x in d)
    assert worst <= STEP_BOUND, f"the robot executed a step of {worst:.2f} x the velocity limit from its true pose"
    assert int(d[-1]["commands_over_velocity_limit"]) == 0, d[-1]


def _resumes(g, ros2, what: str, timeout: float = 15) -> None:
    since = time.time_ns()
    ros2.wait_until(lambda: len(_served(g, ros2, since)) >= 3, timeout, f"policy commands again after {what}")


# --- the tests --------------------------------------------------------------------------------------------
def test_default_qos_subscribers_get_joint_states_and_trajectory_commands_flow(g, ros2):
    """joint_states reaches a default (reliable) subscriber; the command goes out as JointTrajectory."""
    from sensor_msgs.msg import JointState

    got = g.probe.collect(JointState, f"/{NS}/joint_states", 10)  # rclpy's default: reliable, volatile, 10
    ros2.wait_until(lambda: len(got) >= 3, 10, "joint_states on a default-QoS subscriber")
    _, cmd = _served(g, ros2)[-1]
    assert list(cmd.joint_names) == list(got[-1][1].name) and len(cmd.points) == 1
    assert len(cmd.points[0].positions) == 7 and cmd.points[0].time_from_start.nanosec == int(ros2.PERIOD * 1e9)
    assert _diag(g, "sim_robot")["rejected_commands"] == "0"


PARTICIPANT = str(Path(__file__).with_name("participant.py"))
"""a new participant in its own process, as a ROS command-line tool is (tests/ros2/participant.py)"""


def test_twenty_participants_joining_the_running_loop_latch_no_estop(g, ros2):
    """20 new participants, 4 at a time, each as ``ros2 topic echo`` / ``ros2 param`` join: a fresh process
    (the CPU burst of a tool starting on the 2-core machine), RELIABLE subscriptions on every topic of the
    graph, list/describe parameter calls on every node. The issue saw e-stops 1-2 s after such joins; here
    each join must be real (matched every publisher, every call answered), the loop must keep serving
    through every batch, and no e-stop may latch. The misses the joins cost are in the failure message."""
    since = time.time_ns()
    misses0 = int(_diag(g, "safety").get("deadline_misses", 0))
    # the wire.TOPICS entries and /diagnostics a RELIABLE subscriber of TOPICS' type matches here: not the goal (no
    # publisher), the image (best-effort publisher) nor the command (JointTrajectory in this graph)
    topics_published = 7
    for batch in range(5):
        t0 = time.time_ns()
        procs = [subprocess.Popen([sys.executable, PARTICIPANT, NS, str(topics_published), "20"], env=g.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(4)]
        try:
            outs = [p.communicate(timeout=60)[0] for p in procs]
        finally:  # a participant that hangs must not stay on the machine for the tests after this one
            for p in procs:
                if p.poll() is None:
                    p.kill()
        for p, out in zip(procs, outs):
            last = out.strip().splitlines()[-1] if out.strip() else ""
            assert p.returncode == 0 and last.startswith("matched="), out[-2000:]
            got = dict(kv.split("=") for kv in last.split())
            assert int(got["matched"]) >= topics_published, f"a participant missed publishers: {last}"
            assert got["answered"] == "4/4", f"a node never answered a parameter call: {last}"
        assert len(_served(g, ros2, t0)) >= 3, (f"the loop stopped serving during join batch {batch}: e-stops "
                                                f"{_estops_since(g, since)}, safety: {_diag(g, 'safety').get('message')}")
    time.sleep(2.0)  # the issue saw latches 1-2 s after a join
    misses = int(_diag(g, "safety")["deadline_misses"]) - misses0
    assert not _estops_since(g, since), (misses, _estops_since(g, since))
    assert _diag(g, "safety")["estopped"] == "False", f"{misses} missed cycles during the joins"
    _check_robot_steps(g, ros2, since)


def test_participants_that_stay_on_the_domain_never_stall_the_loop(g, ros2):
    """Twenty participants one after another (the issue's 20 joins), each one node and nothing else staying 2 s,
    as the ``ros2`` CLI's daemon does (it stays longer; the stall came 1.0-1.3 s after a join, inside the 2 s). Over Fast DDS's shared-memory transport about one such join in seven stopped one link of the
    loop for ~350 ms, 1.0-1.3 s after it: here (rmw_fastrtps's LOCALHOST set-up) 12 cycles in a row without
    a policy command. The nodes run on UDPv4 (`tinker.dds_profile`): never MISSES_TO_ESTOP cycles in a row
    without a policy command reaching the robot, and no e-stop."""
    since = time.time_ns()
    for join in range(20):
        out = subprocess.run([sys.executable, PARTICIPANT, "--quiet", "2"], env=g.env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0 and "stayed=" in out.stdout, (out.stdout + out.stderr)[-2000:]
        time.sleep(0.5)
    time.sleep(1.0)
    unserved = _longest_unserved(g, since)
    assert unserved < MISSES_TO_ESTOP, (f"no policy command reached the robot for {unserved} cycles in a row while "
                                        f"participants joined: the loop stalled")
    assert not _estops_since(g, since), _estops_since(g, since)
    _check_robot_steps(g, ros2, since)


def test_policy_stalls_shorter_than_the_tolerance_hold_without_an_estop(g, ros2):
    """SIGSTOP/SIGCONT of the policy from just before a state: 1.2 periods six times, then 1.8 periods (the
    issue's 60 ms and 90 ms at a 50 ms period). Each stall misses one cycle, the last two in a row; misses
    count only in a row, so no e-stop, though there are more than MISSES_TO_ESTOP in all."""
    pid = g.pid("policy")
    since = time.time_ns()
    misses0 = int(_diag(g, "safety").get("deadline_misses", 0))
    # A stall of 1.2 periods misses the next state's cycle when it starts 0.4-1.0 periods after this state (it must
    # cover the next state's arrival and its deadline, 0.6 periods later): started at 0.7, the probe may see the
    # state 30 ms late or early (at 0.9 a tests/ros2 run at load 15-17 saw only 2 misses: the probe was late). The
    # 1.8-period stall misses two in a row only when it starts 0.8-1.0 periods after a state: 0.9
    for pause, phase in ((1.2, 0.7),) * 6 + ((1.8, 0.9),):
        n = len(g.probe.joints)
        ros2.wait_until(lambda: len(g.probe.joints) > n, 5, "a robot state", step=0.002)
        time.sleep(phase * ros2.PERIOD)  # stopped before the next state: its answer comes after the deadline
        os.kill(pid, signal.SIGSTOP)
        time.sleep(pause * ros2.PERIOD)
        os.kill(pid, signal.SIGCONT)
        time.sleep(4 * ros2.PERIOD)  # served cycles between the stalls
    time.sleep(1.5)
    misses = int(_diag(g, "safety")["deadline_misses"]) - misses0
    assert misses >= MISSES_TO_ESTOP, f"the stalls made only {misses} missed cycles: the test shows nothing"
    assert not _estops_since(g, since), _estops_since(g, since)
    held = [m for t, m in list(g.probe.commands) if t >= since and _meta(m).get("status") == "held"]
    assert held, "the missed cycles were not held"
    _check_robot_steps(g, ros2, since)


def test_a_spoofed_joint_state_burst_is_refused_and_the_robot_holds(g, ros2):
    """A second publisher on joint_states at 1 kHz, one joint 2 rad off the true pose."""
    from sensor_msgs.msg import JointState

    from tinker.wire import SENSOR_QOS

    since = time.time_ns()
    pub = g.probe.publisher(JointState, f"/{NS}/joint_states", SENSOR_QOS)
    names = [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]
    q = _true_q(g)
    q[0] += 2.0 if q[0] < 0 else -2.0
    end, k = time.monotonic() + 2.5, 0
    while time.monotonic() < end:
        k += 1
        if not k % 50:  # the true pose, refreshed every 50 messages
            q = _true_q(g)
            q[0] += 2.0 if q[0] < 0 else -2.0
        msg = JointState(name=names, position=q.tolist(), velocity=[0.0] * 7)
        msg.header.stamp = g.probe.node.get_clock().now().to_msg()
        msg.header.frame_id = "spoof"
        pub.publish(msg)
        time.sleep(0.001)
    d = [x for x in _diags(g, "safety", since) if x["level"] == ERROR]
    assert d and "joint_states" in d[-1]["message"], _diags(g, "safety", since)[-3:]
    assert "publishers" in d[-1]["message"] or "implausible" in d[-1]["message"]
    g.probe.node.destroy_publisher(pub)
    _check_robot_steps(g, ros2, since)
    _resumes(g, ros2, "the spoofer left")
    assert not _estops_since(g, since)


def test_a_foreign_publisher_on_the_command_topic_is_not_executed(g, ros2):
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from tinker.wire import COMMAND_QOS

    since = time.time_ns()
    pub = g.probe.publisher(JointTrajectory, f"/{NS}/forward_position_controller/commands", COMMAND_QOS)
    names = [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]
    _publish_off_pose(g, pub, lambda q: JointTrajectory(joint_names=names, points=[JointTrajectoryPoint(
        positions=q.tolist())]), 2.0, 2.0)  # 2 rad from the measured pose: 4x what safety would allow
    d = [x for x in _diags(g, "sim_robot", since) if x["level"] == ERROR]
    assert d and "publishers" in d[-1]["message"] and "forward_position_controller/commands" in d[-1]["message"]
    g.probe.node.destroy_publisher(pub)
    _check_robot_steps(g, ros2, since)
    t0 = time.time_ns()
    ros2.wait_until(lambda: any(x["level"] == OK for x in _diags(g, "sim_robot", t0)), 10, "sim_robot OK again")


def test_a_publisher_on_the_intervention_topic_takes_nothing_over_by_default(g, ros2):
    """The takeover is opt-in (``safety.intervention_topic`` empty in the shipped YAML): a stranger publishing
    teleop targets on ``intervention`` steers nothing (tests/ros2/test_human_in_loop.py turns it on)."""
    from sensor_msgs.msg import JointState

    from tinker.wire import SENSOR_QOS

    since = time.time_ns()
    pub = g.probe.publisher(JointState, f"/{NS}/intervention", SENSOR_QOS)
    names = [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]

    def teleop(q):
        msg = JointState(name=names, position=q.tolist())
        msg.header.stamp = g.probe.node.get_clock().now().to_msg()
        return msg

    _publish_off_pose(g, pub, teleop, 0.5, 1.5)
    g.probe.node.destroy_publisher(pub)
    cmds = [m for t, m in list(g.probe.commands) if t >= since]
    assert len(cmds) > 10 and not any(_meta(m).get("intervention") == "1" for m in cmds)
    assert not any(k.startswith("teleop.") for k in _diag(g, "safety"))


def test_parameters_are_described_and_a_change_takes_effect_or_is_refused_with_the_reason(g, ros2):
    from rcl_interfaces.srv import DescribeParameters, ListParameters, SetParameters
    from rclpy.parameter import Parameter

    for node in ("safety", "sim_robot"):
        names = g.probe.call(ListParameters, f"/{NS}/{node}/list_parameters", ListParameters.Request()).result.names
        req = DescribeParameters.Request(names=[n for n in names if n != "use_sim_time"])
        missing = [d.name for d in g.probe.call(DescribeParameters, f"/{NS}/{node}/describe_parameters", req).descriptors
                   if not d.description]  # tinker.runtime's included
        assert not missing, f"{node}: parameters without a description: {missing}"

    def set_(node, name, value):
        req = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
        return g.probe.call(SetParameters, f"/{NS}/{node}/set_parameters", req).results[0]

    r = set_("safety", "hold_deadline", -1.0)
    assert not r.successful
    r = set_("safety", "config", "/nonexistent.yaml")
    assert not r.successful and "configure" in r.reason, r.reason
    r = set_("safety", "command_topic", "elsewhere")
    assert not r.successful and "read-only" in r.reason.lower(), r.reason
    assert set_("safety", "hold_deadline", 0.5).successful
    assert set_("safety", "max_state_age", 0.4).successful  # the state checks take it at the next state
    assert set_("sim_robot", "hold_after_cycles", 4).successful
    assert not set_("sim_robot", "hold_after_cycles", 0).successful
    assert not set_("sim_robot", "task", "sort").successful
    # rclpy's own use_sim_time would put the node on a /clock nobody publishes: refused on every node of the loop
    for node in ("sim_robot", "perception", "policy", "safety"):
        r = set_(node, "use_sim_time", True)
        assert not r.successful and "use_sim_time stays false" in r.reason, (node, r.reason)
    assert set_("safety", "use_sim_time", False).successful
    ros2.wait_until(lambda: _diag(g, "safety").get("estopped") == "False", 5, "safety diagnostics")
    _resumes(g, ros2, "use_sim_time refused")


def test_an_estop_survives_lifecycle_transitions_and_a_failed_configure_leaks_nothing(g, ros2):
    import yaml

    assert g.call_trigger("safety/estop")[0]
    g.transition("safety", "deactivate")
    g.transition("safety", "activate")
    time.sleep(0.3)
    assert g.probe.estop[-1][1].level == g.probe.estop[-1][1].ERROR, "activate cleared the operator's e-stop"
    g.transition("safety", "deactivate")
    g.transition("safety", "cleanup")
    bad = g.tmp / "changing.yaml"
    bad.write_text((g.tmp / "safety.yaml").read_text())
    assert g.probe.set_param(f"/{NS}/safety", "config", str(bad))  # unconfigured: accepted, used at configure
    cfg = yaml.safe_load(bad.read_text())
    cfg["watchdog_misses_to_estop"] = 0  # invalid: the configure below fails
    bad.write_text(yaml.safe_dump(cfg))
    from tinker.bringup import BringupError

    with pytest.raises(BringupError, match="configure"):
        g.transition("safety", "configure")
    subs = dict(g.probe.node.get_subscriber_names_and_types_by_node("safety", f"/{NS}"))
    assert f"/{NS}/joint_states" not in subs and f"/{NS}/policy/joint_target" not in subs, subs
    assert g.probe.set_param(f"/{NS}/safety", "config", str(g.tmp / "safety.yaml"))
    g.transition("safety", "configure")  # the retry works
    g.transition("safety", "activate")
    time.sleep(0.5)
    assert g.probe.estop[-1][1].level == g.probe.estop[-1][1].ERROR, "cleanup/configure cleared the e-stop"
    ok, msg = g.call_trigger("safety/reset")
    assert ok, msg
    _resumes(g, ros2, "reset")
    time.sleep(1.0)  # one command per cycle, not one per subscription made
    since = time.time_ns() - 10**9
    stamps = [_meta(m)["stamp_ns"] for _, m in _served(g, ros2, since)]
    assert len(stamps) == len(set(stamps)), "a state was answered more than once"


def test_deactivating_the_policy_holds_without_estop_and_activation_resumes_through_the_ramp(g, ros2):
    since = time.time_ns()
    g.transition("policy", "deactivate")
    time.sleep((MISSES_TO_ESTOP + 3) * ros2.PERIOD)
    held = [m for t, m in list(g.probe.commands) if t >= since and _meta(m).get("status") == "held"]
    assert held, "no hold while the policy was inactive"
    assert not _estops_since(g, since), _estops_since(g, since)
    ramps = int(_diag(g, "safety")["ramp_restarts"])
    g.transition("policy", "activate")
    _resumes(g, ros2, "re-activation")
    assert not _estops_since(g, since)
    t0 = time.time_ns()
    ros2.wait_until(lambda: _diags(g, "safety", t0), 5, "a safety heartbeat")
    assert int(_diag(g, "safety")["ramp_restarts"]) == ramps + 1, "the policy's return did not start the ramp"
    _check_robot_steps(g, ros2, since)


def _first(g, node: str, since_ns: int, pred) -> dict[str, str] | None:
    return next((d for d in _diags(g, node, since_ns) if pred(d)), None)


def test_a_paused_then_killed_perception_is_error_in_its_dependents_and_clears_when_it_is_back(g, ros2):
    """Issue 22, stale diagnostics: each node reports its inputs' ages (its own monotonic clock); a silent
    input is ERROR naming the topic, published when the level changes (not at the next heartbeat), and OK
    again when the peer is back. SIGSTOP of perception, then SIGKILL and a restart: the policy names
    perception's output, safety (which hears the policy only) names the policy's output. "Within a second"
    is the nodes' own account: the input's age (since its newest message, which came at most one period
    before the stop) in the first ERROR that names it."""
    features, target = f"/{NS}/perception/features", f"/{NS}/policy/joint_target"
    names = lambda topic: lambda d: d["level"] == ERROR and topic in d["message"]  # noqa: E731
    timeout = float(_diag(g, "policy")["input_timeout_s"])
    assert timeout < 1.0, "the shipped input_timeout cannot show a stopped peer within a second"
    since = time.time_ns()
    os.kill(g.pid("perception"), signal.SIGSTOP)
    try:
        ros2.wait_until(lambda: _first(g, "policy", since, names(features)), 10, f"policy ERROR naming {features}")
    finally:
        os.kill(g.pid("perception"), signal.SIGCONT)
    first = _first(g, "policy", since, names(features))
    assert timeout < float(first[f"input_age_s.{features}"]) <= 1.0, first
    back = time.time_ns()
    ros2.wait_until(lambda: _first(g, "policy", back, lambda d: d["level"] == OK), 10,
                    "policy OK once perception resumed")
    assert _diag(g, "policy")[f"input_age_s.{features}"] != "never"

    since = time.time_ns()
    g.kill("perception", signal.SIGKILL)
    g.procs["perception"].wait()
    ros2.wait_until(lambda: _first(g, "policy", since, names(features)) and _first(g, "safety", since, names(target)),
                    10, f"policy ERROR naming {features} and safety ERROR naming {target}")
    for node, topic in (("policy", features), ("safety", target)):
        first = _first(g, node, since, names(topic))
        assert float(first[f"input_age_s.{topic}"]) <= 1.0, (node, first)
        assert f"{topic}: last message" in first["message"], first["message"]
    g.restart("perception")
    back = time.time_ns()
    ros2.wait_until(lambda: _first(g, "policy", back, lambda d: d["level"] == OK), 30, "policy OK after the restart")
    ok, msg = g.call_trigger("safety/reset")  # the watchdog latched while no command came: only a reset clears it
    assert ok, msg
    reset = time.time_ns()
    ros2.wait_until(lambda: _first(g, "safety", reset, lambda d: d["level"] == OK), 10, "safety OK after the reset")
    _resumes(g, ros2, "perception's restart")
    _check_robot_steps(g, ros2, since)


def test_a_second_graph_with_the_same_names_started_without_tinker_bringup_refuses_to_run(g, ros2):
    """The twin's nodes are started as `ros2 launch`/`ros2 run` start them (the executable with
    --ros-args, no supervisor checking names): the nodes themselves refuse (exit 3)."""
    from tinker.bringup import default_params_file

    since = time.time_ns()
    over = g.tmp / "twin.yaml"
    over.write_text(f"/**:\n  ros__parameters:\n    control_period: {ros2.PERIOD}\n    command_type: joint_trajectory\n"
                    "/**/sim_robot:\n  ros__parameters:\n    camera: false\n")
    procs = {n: subprocess.Popen([sys.executable, "-m", f"tinker.{n}", "--ros-args", "-r", f"__ns:=/{NS}",
                                  "-r", f"__node:={n}", "--params-file", str(default_params_file()),
                                  "--params-file", str(over)],
                                 env=g.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 start_new_session=True) for n in ("sim_robot", "safety")}
    try:
        for n, p in procs.items():
            out, _ = p.communicate(timeout=40)
            assert p.returncode == 3 and "refusing to run" in out, f"twin {n} exited {p.returncode}:\n{out[-2000:]}"
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert all(g.procs[n].poll() is None for n in ("sim_robot", "safety", "policy"))
    _check_robot_steps(g, ros2, since)
    _resumes(g, ros2, "the twin left", timeout=20)


def test_a_state_stamped_an_hour_ahead_then_kill_9_of_the_policy_still_latches_the_watchdog(g, ros2):
    from sensor_msgs.msg import JointState

    from tinker.wire import SENSOR_QOS, set_stamp

    before = int(_diag(g, "safety").get("refused_states.future", 0))
    pub = g.probe.publisher(JointState, f"/{NS}/joint_states", SENSOR_QOS)
    ros2.wait_until(lambda: pub.get_subscription_count() >= 3, 10, "the nodes discovering the publisher")
    q = _true_q(g)
    msg = JointState(name=[f"lbr_iiwa_joint_{i}" for i in range(1, 8)], position=q.tolist(), velocity=[0.0] * 7)
    set_stamp(msg.header, time.time_ns() + 3600 * 10**9)
    msg.header.frame_id = "cycle=999999"
    pub.publish(msg)
    t0 = time.time_ns()
    ros2.wait_until(lambda: int(_diag(g, "safety", ).get("refused_states.future", 0)) > before
                    and _diags(g, "safety", t0), 5, "the future stamp refused")
    g.probe.node.destroy_publisher(pub)
    _resumes(g, ros2, "the future stamp")
    since = time.time_ns()
    g.kill("policy", signal.SIGKILL)
    ros2.wait_until(lambda: _estops_since(g, since), 10, "the watchdog's e-stop")
    assert "watchdog" in _estops_since(g, since)[-1]
    _check_robot_steps(g, ros2, since)


def test_a_dead_policy_is_started_again_and_commands_once_a_person_resets_but_a_dead_safety_stops_the_graph(g, ros2):
    """What `tinker bringup` does each half second (`Graph.supervise`), after the previous test's kill -9 of the
    policy: the policy is started again and brought back to active (its dead process, still discovered, may take
    the first lifecycle request); safety's e-stop, latched by the watchdog meanwhile, holds the robot until a
    person's reset; then the restarted policy commands. Safety dying is not restarted (it would forget its latch):
    supervise says why the graph must stop, naming it."""
    from tinker.bringup import BringupError, MAX_RESTARTS

    assert g.procs["policy"].poll() is not None, "the previous test's kill -9 left no dead policy"
    assert g.state("safety") == "active"  # a service of another node still answers while one is dead
    said: list[str] = []
    end = time.monotonic() + 60
    while not any(" is back" in line for line in said) and time.monotonic() < end:
        said += g.supervise()
        time.sleep(0.2)
    assert said[0] == f"node policy exited with code -9; starting it again in 1 s (1/{MAX_RESTARTS})", said
    assert said[-1].startswith("node policy is back and active; safety's e-stop"), said
    assert g.state("policy") == "active" and g.restarts == {"policy": 1}
    since = time.time_ns()
    ros2.wait_until(lambda: len(_served(g, ros2, since)) >= 3, 10, "the restarted policy's targets reaching safety")
    held = [_meta(m).get("status") for _, m in _served(g, ros2, since)]  # answered, each by the latched e-stop
    assert set(held) == {"estopped"}, held
    ok, msg = g.call_trigger("safety/reset")
    assert ok, msg
    _resumes(g, ros2, "the policy's restart and a person's reset")
    assert g.supervise() == []  # nothing more to do
    g.kill("safety", signal.SIGKILL)
    g.procs["safety"].wait()
    with pytest.raises(BringupError, match=r"node safety exited with code -9: the robot's safety guard is gone; a "
                                           r"restart would forget its latched e-stop, so the graph stops"):
        g.supervise()
