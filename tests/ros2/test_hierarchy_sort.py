"""The hierarchical sorting policy (HPPO over the arm-sort skills, ``pretrained/arm_sort_hppo/bundle``) deployed through
the ROS graph, in separate processes over real DDS: sim_robot with ``task: sort`` -> perception (the observation) ->
policy (`HierarchicalOnnxPolicy`: the high level only when an option ends) -> safety (the SafetyWrapper last) ->
sim_robot, whose suction follows the safe commands. Objects get sorted, every command stays within the limits.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

NS = "sorter"
REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "pretrained" / "arm_sort_hppo" / "bundle"
PERIOD = 0.05
"""the bundle's own control period (the skills' gains are per cycle of 50 ms)"""
SLOTS = 3
NUM_OBJECTS = 1
EPISODE_CYCLES = 120
SLOT_FIELDS = 3 + 3 + 2 + 3 + 1
"""per object slot in the task terms: pos, pos - ee, kind one-hot, bin - pos, sorted"""


def _sorted_flags(values: np.ndarray) -> np.ndarray:
    """obj{i}_sorted from a ``task`` message: [reward, done, success, distance, ee(3), suction_active, slots...]."""
    first = 4 + 3 + 1
    return np.array([values[first + i * SLOT_FIELDS + SLOT_FIELDS - 1] for i in range(SLOTS)])


def test_a_new_episode_starts_the_hierarchy_with_a_fresh_decision():
    """ROS-free: the policy node's core (`PolicyBundle` over `HierarchyRunner`) resets the running option when the
    episode tag of the features changes, and calls the high level only when an option ends."""
    from tinker.bundle_io import HierarchyRunner, ObservationFeatures, PolicyBundle

    core = PolicyBundle(str(BUNDLE), None, PERIOD)
    assert isinstance(core.runner, HierarchyRunner)
    feats = ObservationFeatures(str(BUNDLE))
    assert feats.sha256 == core.runner.perception_sha256
    n = core.runner.feature_size
    q = np.zeros(len(core.runner.joint_names))
    obs = np.zeros(n, np.float32)
    pol = core.runner.policy
    for t in range(3):
        core.cycle.on_state(t, q)
        step = core.cycle.on_features(t, obs, t, "0", feats.sha256)
        assert step is not None and step.raw.shape == (len(q) + 1,)
    assert pol.high_calls == 1 and pol.age == 3
    core.cycle.on_state(3, q)
    core.cycle.on_features(3, obs, 3, "1", feats.sha256)  # a new episode, 3 steps into the option
    assert pol.high_calls == 2 and pol.age == 1 and core.runner.episodes == 2


def test_the_graph_runs_the_sort_task_the_bundle_was_trained_on(tmp_path):
    """No DDS: `Graph` (tinker bringup) and the launch file give sim_robot the task and object slots of the bundle
    (flat or hierarchical) perception runs; explicit settings win."""
    from tinker.bringup import Graph
    from tinker.bundle_io import SIM_TASKS

    from tinker_sim.registration import ENV_IDS

    assert SIM_TASKS == {k: v["kwargs"]["task"] for k, v in ENV_IDS.items()}  # one fact, said twice (torch-free)
    g = Graph(run_dir=tmp_path / "a", overrides={"perception": {"bundle": str(BUNDLE)}})
    assert (g.parameters("sim_robot")["task"], g.parameters("sim_robot")["max_objects"]) == ("sort", SLOTS)
    flat = REPO / "pretrained" / "arm_sort" / "bundle"
    g = Graph(run_dir=tmp_path / "b", overrides={"perception": {"bundle": str(flat)}, "sim_robot": {"num_objects": 1}})
    assert (g.parameters("sim_robot")["task"], g.parameters("sim_robot")["num_objects"]) == ("sort", 1)
    g = Graph(run_dir=tmp_path / "c", overrides={"perception": {"bundle": str(BUNDLE)}, "sim_robot": {"max_objects": 5}})
    assert g.parameters("sim_robot")["max_objects"] == 5


def _reexport(src: Path, dst: Path, version: int) -> Path:
    """A copy of the export ``src`` as a new export would be: the high level's manifest at another policy version,
    ``hierarchy.json`` pinning it (the same models, so the same actions)."""
    import hashlib
    import json
    import shutil

    shutil.copytree(src, dst)
    mf = dst / "high" / "manifest.json"
    m = json.loads(mf.read_text())
    m["policy_version"] = version
    mf.write_text(json.dumps(m, indent=1))
    doc = json.loads((dst / "hierarchy.json").read_text())
    doc["levels"]["high"]["manifest_sha256"] = hashlib.sha256(mf.read_bytes()).hexdigest()
    (dst / "hierarchy.json").write_text(json.dumps(doc))
    return dst


def test_a_new_hierarchy_export_goes_live_in_the_policy_core_at_the_next_episode(tmp_path):
    """ROS-free: the policy node's core takes a new export of the hierarchy (``bundle`` set at run time) at the next
    episode start; perception's features (the same observation) keep being accepted; a flat bundle is refused."""
    from tinker.bundle_io import ObservationFeatures, PolicyBundle
    from tinker_core.errors import BundleError

    core = PolicyBundle(str(BUNDLE), None, PERIOD)
    feats = ObservationFeatures(str(BUNDLE))
    v0 = core.version
    new = _reexport(BUNDLE, tmp_path / "v_next", v0 + 1)
    q = np.zeros(len(core.runner.joint_names))
    obs = np.zeros(core.runner.feature_size, np.float32)

    def step(t: int, episode: str):
        core.cycle.on_state(t, q)
        return core.cycle.on_features(t, obs, t, episode, feats.sha256)

    assert step(0, "0") is not None
    assert core.reload(str(new)).result(timeout=60) is True
    assert step(1, "0") is not None and core.version == v0 and core.reloads == 0  # mid-episode: the running export
    assert step(2, "1") is not None  # a new episode: the new export, same features
    assert core.version == v0 + 1 and core.reloads == 1 and core.runner.rejected_reloads == 0
    with pytest.raises(BundleError, match="cannot replace"):
        core.reload(str(REPO / "pretrained" / "arm_reach" / "bundle"))


@pytest.fixture(scope="module")
def g(ros2, tmp_path_factory):
    import yaml
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from tinker.bringup import Graph
    from tinker.wire import RECORD_QOS, SENSOR_QOS
    from tinker_safety.config import DEFAULT_CONFIG_PATH

    if not (BUNDLE / "hierarchy.json").is_file():
        pytest.fail(f"{BUNDLE}: the shipped hierarchical sorter is missing")
    tmp = tmp_path_factory.mktemp("hier")
    cfg = yaml.safe_load(Path(DEFAULT_CONFIG_PATH).read_text())
    cfg["watchdog_misses_to_estop"] = 10  # patient on the shared 2-core machine (as tests/ros2/test_graph.py)
    (tmp / "safety.yaml").write_text(yaml.safe_dump(cfg))
    domain = ros2.fresh_domain()
    b = str(BUNDLE)
    graph = Graph(namespace=NS, run_dir=tmp / "logs", env=ros2.graph_env(domain),
                  overrides={"sim_robot": {"num_objects": NUM_OBJECTS,  # task sort and SLOTS slots: from the bundle
                                           "camera": False, "episode_cycles": EPISODE_CYCLES, "seed": 1000},
                             "perception": {"bundle": b}, "policy": {"bundle": b},
                             "safety": {"config": str(tmp / "safety.yaml")},
                             "/**": {"control_period": PERIOD}})
    probe = ros2.Probe(domain)
    t = f"/{NS}/"
    probe.commands = probe.collect(Float64MultiArray, t + "forward_position_controller/commands", RECORD_QOS)
    probe.raw = probe.collect(Float64MultiArray, t + "policy/raw_action", RECORD_QOS)
    probe.task = probe.collect(Float64MultiArray, t + "task", RECORD_QOS)
    probe.joints = probe.collect(JointState, t + "joint_states", SENSOR_QOS)
    probe.diag = probe.collect(DiagnosticArray, "/diagnostics", RECORD_QOS)
    graph.probe = probe
    graph.start()
    graph.call_trigger("safety/reset")  # a start-up stall on the shared machine may have latched the watchdog
    yield graph
    probe.close()
    graph.stop()


def _diag(g, node: str) -> dict[str, str]:
    return g.probe.status(f"/{NS}/{node}")


def test_the_hierarchy_sorts_objects_through_safety_within_the_limits(g, ros2):
    from tinker_safety.limits import JointLimits

    ros2.wait_until(lambda: int(_diag(g, "sim_robot").get("successes", 0) or 0) >= 2, 150,
                    "two episodes with every object sorted")
    ros2.wait_until(lambda: len(g.probe.commands) >= 150, 30, "150 safe commands")
    task = [np.asarray(m.data) for _, m in list(g.probe.task)]
    sorted_counts = [int(_sorted_flags(v)[:NUM_OBJECTS].sum()) for v in task]
    assert max(sorted_counts) == NUM_OBJECTS and any(v[2] > 0.5 for v in task)  # success seen on the wire
    assert any(v[7] > 0.5 for v in task)  # the suction held an object at some state
    sim = _diag(g, "sim_robot")
    assert int(sim["suction_switches"]) >= 4  # grip and release, twice at least
    # the SafetyWrapper was last: every command the robot executed stayed within the velocity limit from the
    # physics' true pose, the joints within their URDF limits, and the arm never reached an unsafe state
    assert float(sim["max_command_step"]) <= 1.0 and int(sim["commands_over_velocity_limit"]) == 0, sim
    assert all(int(sim[f"unsafe_states.{k}"]) == 0 for k in ("joint_position", "joint_velocity", "contact")), sim
    limits = JointLimits.from_urdf(None)
    cmds = np.array([np.asarray(m.data) for _, m in list(g.probe.commands)])
    assert len(cmds) > 100 and np.isfinite(cmds).all()
    assert (cmds >= limits.lower - 1e-9).all() and (cmds <= limits.upper + 1e-9).all()
    statuses = {ros2.meta_of(m).get("status") for _, m in list(g.probe.commands)}
    assert "estopped" not in statuses, statuses
    # the high level ran only when an option ended: far less often than the control cycle
    pol = _diag(g, "policy")
    print(f"sim_robot: {sim}\npolicy: {pol}\nsafety statuses: {sorted(statuses)}")
    high, low = int(pol["high_level_calls"]), int(pol["low_level_calls"])
    assert low > 100 and high < low / 4, pol
    assert int(pol["episodes_started"]) >= 2  # sim_robot's resets reached the policy as new episodes


def test_a_new_hierarchy_export_set_at_run_time_goes_live_in_the_running_graph(g, ros2, tmp_path):
    """``bundle`` set on the running policy node (as the experience bridge or ``ros2 param set`` does) to a new
    export of the hierarchy: it is validated, goes live at an episode start, and the loop keeps commanding."""
    before = _diag(g, "policy")
    v0, refused = int(before["model_version"]), int(before["refused_inputs"])
    new = _reexport(BUNDLE, tmp_path / "v_next", v0 + 1)
    assert g.probe.set_param(f"/{NS}/policy", "bundle", str(new))
    ros2.wait_until(lambda: _diag(g, "policy").get("model_version") == str(v0 + 1), 60,
                    "the new export live in the policy node")
    pol = _diag(g, "policy")
    assert int(pol["reloads"]) == 1 and int(pol["reload_rejections"]) == 0, pol
    n = len(g.probe.commands)
    ros2.wait_until(lambda: len(g.probe.commands) >= n + 40, 30, "40 more safe commands after the swap")
    assert int(_diag(g, "policy")["refused_inputs"]) == refused  # perception's features still fit the new export
