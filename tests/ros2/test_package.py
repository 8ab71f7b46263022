"""The ROS 2 package itself: the launch file names what the package installs, colcon builds it, and
`tinker bringup --composed` runs the graph under a namespace and stops it cleanly on Ctrl-C."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "ros2_ws" / "src" / "tinker"


def _literal(tree: ast.Module, name: str):
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{name} not found")


def test_launch_file_parses_and_names_every_installed_node_and_parameter_file():
    launch = ast.parse((PKG / "launch" / "bringup.launch.py").read_text())
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in launch.body)
    from tinker.bringup import LIFECYCLE, NODES, VIEW_NODE

    imported = {a.name for n in launch.body if isinstance(n, ast.ImportFrom) and n.module == "tinker.bringup"
                for a in n.names}
    assert {"NODES", "LIFECYCLE", "RESTARTED"} <= imported  # the graph's description, not a second list
    nodes = set(NODES) | {_literal(launch, "VIEW_NODE")}
    setup = ast.parse((PKG / "setup.py").read_text())
    scripts = {c.value.split("=")[0].strip() for c in ast.walk(setup)
               if isinstance(c, ast.Constant) and isinstance(c.value, str) and " = tinker." in c.value}
    assert nodes | {"lifecycle_up"} == scripts  # and the tool that activates a respawned lifecycle node
    assert nodes == {"sim_robot", "perception", "policy", "safety", "experience_bridge", "view"}
    for n in nodes:
        assert (PKG / "tinker" / f"{n}.py").is_file()
    params_file = _literal(launch, "PARAMS_FILE")
    installed_yaml = {f"config/{p.name}" for p in (PKG / "config").glob("*.yaml")}
    assert params_file in installed_yaml == {"config/bringup.yaml"}
    doc = yaml.safe_load((PKG / params_file).read_text())
    assert {k.split("/")[-1] for k in doc if k != "/**"} == nodes  # every node has its section
    assert tuple(LIFECYCLE) == ("safety", "policy")  # safety is active before the policy commands
    assert VIEW_NODE == _literal(launch, "VIEW_NODE")
    xml = (PKG / "package.xml").read_text()
    assert 'format="3"' in xml and "<build_type>ament_python</build_type>" in xml
    for dep in ("rclpy", "lifecycle_msgs", "std_srvs", "sensor_msgs", "trajectory_msgs", "diagnostic_msgs"):
        assert f"<exec_depend>{dep}</exec_depend>" in xml


def test_the_launch_sets_the_safe_commands_type_and_order_once_for_every_node():
    """``ros2 launch tinker bringup.launch.py command_type:=joint_trajectory``: a declared argument for each of the
    launch YAML's /** settings the robot's controller decides, checked with the file before any node starts."""
    launch = ast.parse((PKG / "launch" / "bringup.launch.py").read_text())
    shared = _literal(launch, "SHARED")
    declared_args = {c.args[0].value for c in ast.walk(launch) if isinstance(c, ast.Call)
                     and getattr(c.func, "id", "") == "DeclareLaunchArgument"}
    doc = yaml.safe_load((PKG / "config" / "bringup.yaml").read_text())
    assert set(shared) == {"command_type", "command_joints", "latency_compensation", "latency_auto"}
    assert set(shared) <= declared_args
    assert set(shared) <= set(doc["/**"]["ros__parameters"])  # the one place the file sets them


NO_TORCH = """
import sys
class NoTorch:  # an edge computer: onnxruntime, no torch
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
sys.meta_path.insert(0, NoTorch())
"""


def test_what_the_launch_file_reads_needs_no_torch(tmp_path):
    """``ros2 launch tinker bringup.launch.py agents:=FILE`` reads the agents file and each robot's bundle in
    the launch process; on a robot without torch (the edge runtime is torch-free) that must still work. It
    did not: the agents file checked hyperparameters with the training configs (a real ros2 launch failed with
    "No module named 'torch'")."""
    agents = tmp_path / "agents.yaml"
    agents.write_text("agents:\n  robot1: {policy: SAC, hyperparameters: {learning_rate: 0.001}}\n"
                      "  robot2: {policy: PPO, perception: nature_cnn}\n")
    code = NO_TORCH + f"""
from tinker.fleet import fleet_agents, robot_params
from tinker.bringup import node_parameters, sim_for_bundle
cfg, base = fleet_agents({str(agents)!r})
print(sorted(cfg.agents), [sorted(robot_params(cfg, n)) for n in cfg.agents])
print('torch' in sys.modules)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines()[0].startswith("['robot1', 'robot2']") and r.stdout.splitlines()[-1] == "False"


def test_colcon_builds_the_package_and_installs_launch_config_and_node_scripts(tmp_path):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    r = subprocess.run([str(Path(sys.executable).parent / "colcon"), "--log-base", str(tmp_path / "log"), "build",
                        "--base-paths", str(ROOT / "ros2_ws" / "src"), "--build-base", str(tmp_path / "build"),
                        "--install-base", str(tmp_path / "install")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    share = tmp_path / "install" / "tinker" / "share" / "tinker"
    assert (share / "launch" / "bringup.launch.py").is_file() and (share / "config" / "bringup.yaml").is_file()
    assert (share / "package.xml").is_file()
    assert (tmp_path / "install" / "tinker" / "share" / "ament_index" / "resource_index" / "packages" / "tinker").is_file()
    for n in ("sim_robot", "perception", "policy", "safety", "experience_bridge", "view", "lifecycle_up"):
        assert (tmp_path / "install" / "tinker" / "lib" / "tinker" / n).is_file()


def test_tinker_bringup_composed_under_a_namespace_stops_cleanly_on_ctrl_c(ros2, bundles, tmp_path):
    from std_msgs.msg import Float64MultiArray

    from tinker.wire import RECORD_QOS

    domain = ros2.fresh_domain()
    probe = ros2.Probe(domain, "cli")
    cmds = probe.collect(Float64MultiArray, "/robot2/forward_position_controller/commands", RECORD_QOS)
    p = subprocess.Popen([sys.executable, "-m", "tinker_cli", "bringup", "--composed", "--namespace", "robot2",
                          "--bundle", str(bundles["v1"]), "--set", f"/**.control_period={ros2.PERIOD}",
                          "--run-dir", str(tmp_path)],
                         env=ros2.graph_env(domain), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    try:
        ros2.wait_until(lambda: any(ros2.meta_of(m).get("version") == "1" for _, m in list(cmds)), 90,
                        "policy commands on /robot2/forward_position_controller/commands")
        os.killpg(p.pid, signal.SIGINT)
        out, _ = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        probe.close()
    assert p.returncode == 0, out[-3000:]
    assert "exit codes {'composed': 0}" in out
    stops = [m for _, m in list(cmds) if ros2.meta_of(m).get("why") == "shutdown"]
    assert stops, "no stop published on Ctrl-C"
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert not [pid for pid in left if int(pid) != os.getpid()], "a process outlived tinker bringup"


def test_bringup_gives_the_safety_node_the_simulated_sorters_table_and_bins():
    """With the simulated robot on a sorting task, the guard knows the task's table and bins (as `tinker eval`'s
    does); a reach task has none, and without the simulator the safety YAML alone describes the cell."""
    import json

    from tinker.bringup import Graph, safety_for_sim
    from tinker_sim.tasks import fixture_scene

    g = Graph(overrides={"perception": {"bundle": str(ROOT / "pretrained" / "arm_sort" / "bundle")}})
    assert json.loads(g.parameters("safety")["task_fixtures"]) == fixture_scene("sort")
    assert "task_fixtures" not in Graph().overrides.get("safety", {})
    assert "task_fixtures" not in Graph(sim=False, overrides={"perception": {"bundle": str(
        ROOT / "pretrained" / "arm_sort" / "bundle")}}).overrides.get("safety", {})
    assert safety_for_sim({"task": "reach"}) == {}
    launch = (PKG / "launch" / "bringup.launch.py").read_text()
    assert "safety_for_sim(" in launch  # the launch file applies the same rule
