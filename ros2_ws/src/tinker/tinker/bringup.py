"""`Graph`: the tinker node graph from the launch YAML, without `ros2 launch` (pip-only rclpy hosts).

Reads the same ``config/bringup.yaml`` as ``launch/bringup.launch.py``, starts each node as its own
process (``python -m tinker.<node> --ros-args --params-file ...``; or all in one executor with
``composed=True``), drives the lifecycle nodes (safety, then policy) through configure and activate
with the standard lifecycle_msgs services, and stops everything on ``stop()``: SIGTERM to each
process group (every commanding node publishes its stop), SIGKILL for any that outlives the grace
period, so no orphan survives. Overrides go into an overlay parameter file, loaded after the base::

    from tinker.bringup import Graph
    with Graph(namespace="robot1", overrides={"perception": {"bundle": b}, "policy": {"bundle": b}}) as g:
        g.wait_active()
        ...
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from tinker.package_files import config_file
from tinker.priority import die_with_parent
from tinker_core.errors import ConfigError, TinkerError
from tinker_core.loop.graph import ROBOT, ROBOT_LOOP


NAME_SETTLE_S = 4.5
"""Seconds after joining the domain before the node list is trusted, so that a namesake in another graph
is seen and refused. A participant that misses the first burst of announcements waits for the next
periodic one (Fast DDS: every 3 s): a new node saw 8 running ones after 0.2 s in 7 of 20 tries here,
after 2.1 to 3.0 s in 10 of them."""

DISCOVERY_QUIET_S = 1.0
"""Seconds without a newly discovered node before a graph counts as up. Discovery has no end signal;
with enclaves alone the name-clash test still failed about 1 run in 5 after the training tests (the
failure's message was not caught again), and a late-discovered namesake is the one way it can pass."""

NODES = ROBOT_LOOP.start_order
"""Every node of the graph, in start order (`tinker_core.loop.graph.ROBOT_LOOP`; the launch file reads it too)."""
LIFECYCLE = ROBOT_LOOP.activation_order(ROBOT)
"""Commanding nodes: configured and activated in this order (safety, then the policy)."""
RESTARTED = tuple(s.name for s in ROBOT_LOOP.stages if s.node and s.restart)
"""Nodes started again when their process dies (`Graph.supervise`, the launch file's respawn): perception, the
policy and the experience bridge. Not the robot, nor safety, whose latched e-stop a restart would forget: either
ending stops the graph. A restarted policy or perception loads the bundle it was started with, and the experience
bridge hands it the newest it had handed over (`tinker.bundle_handover.BundleHandover`)."""
MAX_RESTARTS = 5
"""Restarts of one node in a graph's life; one more death stops the graph (a node that cannot stay up)."""
RESTART_DELAY_S = 1.0
"""Seconds from a death to the restart (ros2 launch's ``respawn_delay``)."""
VIEW_NODE = "view"
"""The observer (`tinker.view`): records (``record``) and streams the live view (``view``). Started only when
asked for, always as a process of its own (never composed with the loop)."""
RECORD_NODE = VIEW_NODE
WITHOUT_SIM = {"perception": {"task_synced": False}}
"""What running without the simulated robot changes besides not starting sim_robot (``sim:=false`` in the
launch file, ``Graph(sim=False)``): no per-state task terms, perception takes the newest ``goal``."""


def sim_for_bundle(params: Mapping[str, Any]) -> dict[str, Any]:
    """The simulated robot's settings that perception's bundle needs (``params``: perception's parameters): the task
    it was trained on (`tinker.bundle_io.task_settings`: a sorter's task and object slots), the camera views and size
    its model was trained on, and ``camera_rate_hz`` 0 (the frame of every state, in line) for a model that finds its
    task in the image (`tinker.bundle_io.camera_settings`); ``{}`` for the shipped default. `Graph` and the launch file
    apply them to sim_robot (``camera_rate_hz`` to perception too); settings given explicitly win."""
    bundle = str(params.get("bundle") or "")
    if not bundle or not ((Path(bundle) / "manifest.json").is_file() or (Path(bundle) / "hierarchy.json").is_file()):
        return {}  # the default, or no bundle there: perception says so when it loads it
    from tinker.bundle_io import camera_settings, task_settings

    return {**task_settings(bundle), **camera_settings(bundle)}


def safety_for_sim(sim_params: Mapping[str, Any]) -> dict[str, Any]:
    """The safety node's settings the simulated robot needs (``sim_params``: sim_robot's parameters): its task's
    fixtures (the sorter's table and bins) as ``task_fixtures``, so the guard keeps the arm off them as `tinker eval`
    does; ``{}`` for a task without any. `Graph`, the launch file and `tinker.in_process` apply it."""
    import json

    from tinker_sim.tasks import fixture_scene

    items = fixture_scene(str(sim_params.get("task") or "reach"))
    return {"task_fixtures": json.dumps(items)} if items else {}


class BringupError(TinkerError):
    """The graph did not come up (a node died, a transition failed); the message quotes its log."""


def default_params_file() -> Path:
    """``config/bringup.yaml`` from the installed package share (colcon) or from the source tree."""
    p = config_file("bringup.yaml")
    if not p.is_file():
        raise ConfigError(f"bringup: no parameter file found (looked in the package share and {p})")
    return p


def parameter_sections(data: Mapping[str, Any], node: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(shared, own): a loaded parameter file's ``/**`` entries, and ``node``'s own (``/**/node``, ``node``,
    ``/node``, later ones winning)."""
    def entries(key: str) -> dict[str, Any]:
        return dict((data.get(key) or {}).get("ros__parameters") or {})

    own: dict[str, Any] = {}
    for key in (f"/**/{node}", node, f"/{node}"):
        own.update(entries(key))
    return entries("/**"), own


def node_parameters(params_file: str | os.PathLike, node: str) -> dict[str, Any]:
    """What a node gets from a parameter file: ``/**`` first, then ``/**/node`` and ``node`` entries."""
    shared, own = parameter_sections(yaml.safe_load(Path(params_file).read_text()) or {}, node)
    return {**shared, **own}


def _fq(namespace: str, name: str) -> str:
    ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
    return f"{ns}/{name}"


CLIENT_SETTLE_S = 0.1
"""s a new service client spins before its first request, so that the server has matched its reply reader"""


class Supervisor:
    """The bringup's own ROS node, in a context of its own (the caller's rclpy use is untouched): one DDS
    participant that watches and drives graphs. A `tinker.fleet.Fleet` shares one between its robots, so N
    robots add N participants to the domain, not 2N (each participant discovers every other one)."""

    def __init__(self, env: Mapping[str, str] | None = None):
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        env = os.environ if env is None else env
        self.ctx = Context()
        domain = env.get("ROS_DOMAIN_ID", "")
        rclpy.init(context=self.ctx, args=[], domain_id=int(domain) if domain.isdigit() else None,
                   signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(f"tinker_bringup_{uuid.uuid4().hex[:8]}", context=self.ctx)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.connected_at = time.monotonic()
        self._closed = False

    def close(self, timeout: float = 10.0) -> None:
        """Finalise the node and context, waiting at most ``timeout`` s: finalising a node's publishers has
        been seen to block in rcl/Fast DDS for minutes while another participant of the same process was
        spinning, and stopping a graph must not hang on it."""
        if self._closed:
            return
        self._closed = True
        node, ctx, executor = self.node, self.ctx, self.executor

        def finalise() -> None:
            executor.shutdown()
            node.destroy_node()
            ctx.try_shutdown()

        t = threading.Thread(target=finalise, name="tinker-bringup-disconnect", daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive():
            warnings.warn(f"bringup: the supervisor's ROS node was not finalised within {timeout:.0f} s "
                          f"(rcl/DDS blocked); it is left to process exit", RuntimeWarning, stacklevel=2)


class Graph:
    """One robot's node graph: start(), wait_active(), stop(); usable as a context manager."""

    def __init__(self, params_file: str | os.PathLike | None = None, namespace: str = "",
                 overrides: Mapping[str, Mapping[str, Any]] | None = None, composed: bool = False,
                 record: str | os.PathLike | None = None, nodes: Sequence[str] = NODES,
                 run_dir: str | os.PathLike | None = None, env: Mapping[str, str] | None = None,
                 python: str = sys.executable, view: bool = False, sim: bool = True, separate: Sequence[str] = (),
                 supervisor: Supervisor | None = None):
        """``composed``: the loop's nodes in one process; ``separate`` names nodes that still get a process of their
        own (e.g. ``("policy",)``, so that one can be killed alone); ``supervisor``: a `Supervisor` shared with
        other graphs, which their owner closes (None: this graph makes its own and closes it in `stop`)."""
        self.params_file = Path(params_file) if params_file else default_params_file()
        if not self.params_file.is_file():
            raise ConfigError(f"bringup --params: file not found: {self.params_file}")
        unknown = [n for n in nodes if n not in (*NODES, VIEW_NODE)]
        if unknown:
            raise ConfigError(f"bringup nodes: unknown {unknown}; known: {[*NODES, VIEW_NODE]}")
        self.namespace = namespace.strip("/")
        self.nodes = [n for n in nodes if sim or n != "sim_robot"]
        if (view or record) and VIEW_NODE not in self.nodes:
            self.nodes.append(VIEW_NODE)
        self.composed = composed
        self.separate = tuple(separate)
        if [n for n in self.separate if n not in NODES]:
            raise ConfigError(f"bringup separate: unknown node(s) {[n for n in self.separate if n not in NODES]}; "
                              f"known: {list(NODES)}")
        self.overrides: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (overrides or {}).items()}
        for node, params in ({} if sim else WITHOUT_SIM).items():  # a real driver publishes joint_states only
            self.overrides[node] = {**params, **self.overrides.get(node, {})}
        bad = [k for k in self.overrides if k not in (*NODES, VIEW_NODE) and k != "/**"]
        if bad:
            raise ConfigError(f"bringup overrides: unknown node(s) {bad}; known: {[*NODES, VIEW_NODE]}")
        if record:
            self.overrides.setdefault(RECORD_NODE, {})["record"] = str(Path(record).resolve())
        if "sim_robot" in self.nodes:  # the task and camera the bundle was trained on; explicit overrides win
            camera = sim_for_bundle(self.parameters("perception"))
            rate = camera.pop("camera_rate_hz", None)
            if camera:
                self.overrides["sim_robot"] = {**camera, **self.overrides.get("sim_robot", {})}
            if rate is not None and not any("camera_rate_hz" in self.overrides.get(n, {})
                                            for n in ("/**", "sim_robot", "perception")):
                self.overrides.setdefault("/**", {})["camera_rate_hz"] = rate  # sim_robot renders, perception waits
            fixtures = safety_for_sim(self.parameters("sim_robot"))  # the sorter's table and bins: safety's scene
            if fixtures:
                self.overrides["safety"] = {**fixtures, **self.overrides.get("safety", {})}
        bridge = self.parameters("experience_bridge")  # the success sensor reads perception's features
        if bridge.get("reward_source") == "sensors" and not bridge.get("sensor_bundle"):
            self.overrides.setdefault("experience_bridge", {})["sensor_bundle"] = self.parameters("perception").get("bundle", "")
        if VIEW_NODE in self.nodes:
            self.overrides.setdefault(VIEW_NODE, {}).setdefault("serve", bool(view))
        self._check_parameters()
        self.run_dir = Path(run_dir or tempfile.mkdtemp(prefix="tinker-bringup-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ if env is None else env)
        self.python = python
        self.procs: dict[str, subprocess.Popen] = {}
        self._ctx = self._node = self._executor = None
        self._shared = supervisor
        self._supervisor: Supervisor | None = None
        self._clients: dict[tuple, Any] = {}  # service clients by (type, name), kept while connected
        self.up = False
        """True once `bring_up` has brought the graph up"""
        self.restarts: dict[str, int] = {}
        """node -> times `supervise` started it again"""
        self._ended: dict[str, float] = {}  # node -> when supervise first saw its process ended
        self.enclave = f"/tinker/graph_{uuid.uuid4().hex[:12]}"
        """This graph's ROS enclave: discovery tells its nodes from nodes of the same names elsewhere (no
        security is implied; without ROS_SECURITY_ENABLE an enclave is only a label)."""

    # --- parameters --------------------------------------------------------------------------------
    def overlay_file(self) -> Path:
        """The overrides as a ROS parameter file. Each node's command line names it, and nodes started
        earlier may be reading it while a later one's command is made: it is written only when its
        content changes, and then whole (temp file, rename), never truncated in place."""
        doc = {("/**" if n == "/**" else f"/**/{n}"): {"ros__parameters": self._as_declared(n, p)}
               for n, p in self.overrides.items()}
        text = yaml.safe_dump(doc, sort_keys=False)
        path = self.run_dir / "overrides.yaml"
        if not path.is_file() or path.read_text() != text:
            tmp = path.with_name(f".overrides.yaml.{os.getpid()}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
        return path

    def _check_parameters(self) -> None:
        """Refuse, before anything starts, a parameter its node does not declare or a value it would refuse
        (`tinker.param_check`): the parameter file's entries and the overrides."""
        from tinker.param_check import check_params_file

        check_params_file(self.params_file, self.nodes, self.overrides)

    def _as_declared(self, node: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` with an integer made a float where the node declares a float: ROS refuses ``0`` for a
        double parameter at start-up (``--set /**.camera_rate_hz=0`` stopped perception)."""
        from tinker.param_check import declared

        tables = declared()
        nodes = [*NODES, VIEW_NODE] if node == "/**" else [node]
        floats = {k for n in nodes for k, p in tables.get(n, {}).items() if isinstance(p.default, float)}
        return {k: float(v) if k in floats and isinstance(v, int) and not isinstance(v, bool) else v
                for k, v in params.items()}

    def parameters(self, node: str) -> dict[str, Any]:
        """The parameters ``node`` will run with (file, then overrides)."""
        p = node_parameters(self.params_file, node)
        p.update(self.overrides.get("/**", {}))
        p.update(self.overrides.get(node, {}))
        return p

    def ros_args(self, node: str | None) -> list[str]:
        args = ["--ros-args", "--enclave", self.enclave, "--params-file", str(self.params_file),
                "--params-file", str(self.overlay_file())]
        if self.namespace:
            args += ["-r", f"__ns:=/{self.namespace}"]
        if node is not None:
            args += ["-r", f"__node:={node}"]
        return args

    def command(self, node: str | None) -> list[str]:
        if node is None:
            loop = [n for n in self.nodes if n != VIEW_NODE and n not in self.separate]
            return [self.python, "-m", "tinker.composed", "--nodes", ",".join(loop), *self.ros_args(None)]
        return [self.python, "-m", f"tinker.{node}", *self.ros_args(node)]

    # --- processes -----------------------------------------------------------------------------------
    def start(self, activate: bool = True, timeout: float = 60.0) -> "Graph":
        """Start the processes, wait for every node, then configure and activate the lifecycle nodes."""
        self.launch()
        return self.bring_up(activate, timeout)

    def _own_process(self, node: str) -> bool:
        return not self.composed or node == VIEW_NODE or node in self.separate

    def launch(self) -> "Graph":
        """The first half of `start`: refuse a namesake graph, then start the processes (no waiting), so that
        several graphs (`tinker.fleet.Fleet`) start together and wait for discovery once."""
        groups = ([None] if self.composed else []) + [n for n in self.nodes if self._own_process(n)]
        self._connect()
        try:
            self._refuse_name_clash()
        except BaseException:
            self._disconnect()
            raise
        for g in groups:
            name = g or "composed"
            log = open(self.run_dir / f"{name}.log", "wb")
            self.procs[name] = subprocess.Popen(self.command(g), stdout=log, stderr=subprocess.STDOUT,
                                                env=self.env, start_new_session=True, preexec_fn=die_with_parent)
            log.close()
        return self

    def bring_up(self, activate: bool = True, timeout: float = 60.0) -> "Graph":
        """The second half of `start`: wait for every node, configure and activate the lifecycle nodes, then wait for
        the simulated robot's first state (`wait_for_robot`)."""
        try:
            self.wait_for_nodes(timeout)
            if activate:
                for n in LIFECYCLE:
                    if n in self.nodes:
                        self.transition(n, "configure", timeout)
                        self.transition(n, "activate", timeout)
                if "sim_robot" in self.nodes:
                    self.wait_for_robot(timeout)
        except BaseException:
            self.stop()
            raise
        self.up = True
        return self

    def pid(self, node: str) -> int:
        """The process id of ``node`` (the composed process's in composed mode)."""
        return self.procs[node if self._own_process(node) else "composed"].pid

    def log(self, node: str) -> str:
        path = self.run_dir / f"{node if self._own_process(node) else 'composed'}.log"
        return path.read_text(errors="replace") if path.is_file() else ""

    def _check_alive(self) -> None:
        """While waiting for the graph: a node that ended is an error, at once. Once the graph is up, only one that
        `supervise` would not start again (the robot, safety, the composed process) is: a restartable node's end
        is supervise's to handle, and a service call of another node goes on."""
        for name, p in self.procs.items():
            if p.poll() is not None and (not self.up or name not in (*RESTARTED, VIEW_NODE)):
                raise BringupError(f"node {name} exited with code {p.returncode}. {self._log_end(name)}")

    def kill(self, node: str, sig: int = signal.SIGKILL) -> None:
        os.killpg(self.procs[node].pid, sig)

    def restart(self, node: str, timeout: float = 60.0) -> None:
        """Start ``node``'s process again after it died or was killed (the same command; its log is appended
        to) and, for a lifecycle node, configure and activate it. The node list proves nothing here: the dead
        process, and any namesake that left the domain lately, stay listed until their leases end."""
        old = self.procs[node]
        if old.poll() is None:
            raise BringupError(f"restart {node}: its process {old.pid} is still running; kill or stop it first")
        with open(self.run_dir / f"{node}.log", "ab") as log:
            self.procs[node] = subprocess.Popen(self.command(node), stdout=log, stderr=subprocess.STDOUT,
                                                env=self.env, start_new_session=True, preexec_fn=die_with_parent)
        if node in LIFECYCLE:
            self._activate_again(node, timeout)

    def _activate_again(self, node: str, timeout: float) -> None:
        """Configure and activate a restarted lifecycle node, asking its state until it is active
        (`tinker.lifecycle_up.bring_to_active`: a request may reach only the dead process, still discovered)."""
        from tinker.lifecycle_up import LifecycleUpError, bring_to_active

        try:
            bring_to_active(lambda t: self.state(node, t), lambda step, t: self._change(node, step, t),
                            _fq(self.namespace, node), timeout, alive=lambda: self.procs[node].poll() is None)
        except LifecycleUpError as e:
            raise BringupError(f"restarted {e}. {self._log_end(node)}") from None

    def _log_end(self, name: str) -> str:
        return f"Its log ({self.run_dir / name}.log) ends:\n" + "\n".join(self.log(name).strip().splitlines()[-15:])

    def supervise(self, timeout: float = 60.0) -> list[str]:
        """Look after the node processes once (`tinker bringup` calls it twice a second). A node of `RESTARTED`
        whose process ended is started again `RESTART_DELAY_S` later and brought back to active, up to
        `MAX_RESTARTS` times; the view node's end is reported and the loop goes on without it. The robot or safety
        ending, a restartable node past its restarts, or the composed process ending raises BringupError naming it
        and its log's end: the graph cannot go on. Returns what it did, a line each."""
        said = []
        for name, p in list(self.procs.items()):
            if p.poll() is None or name in self._ended and name == VIEW_NODE:
                continue
            now = time.monotonic()
            first = name not in self._ended
            self._ended.setdefault(name, now)
            ended = f"node {name} exited with code {p.returncode}"
            if name == VIEW_NODE:
                said.append(f"{ended}; the loop goes on unrecorded and unwatched (its log: {self.run_dir / name}.log)")
                continue
            if name not in RESTARTED:
                why = ("the robot's safety guard is gone; a restart would forget its latched e-stop" if name == "safety"
                       else "the robot is gone" if name == ROBOT else "the loop's composed nodes ran in it")
                raise BringupError(f"{ended}: {why}, so the graph stops. {self._log_end(name)}")
            if self.restarts.get(name, 0) >= MAX_RESTARTS:
                raise BringupError(f"{ended} after {MAX_RESTARTS} restarts; the graph stops. {self._log_end(name)}")
            if first:
                said.append(f"{ended}; starting it again in {RESTART_DELAY_S:.0f} s ({self.restarts.get(name, 0) + 1}"
                            f"/{MAX_RESTARTS})")
            if now - self._ended[name] < RESTART_DELAY_S:
                continue
            self.restarts[name] = self.restarts.get(name, 0) + 1
            del self._ended[name]
            try:
                self.restart(name, timeout)
            except BringupError as e:
                if self.procs[name].poll() is None:
                    raise
                said.append(f"node {name} ended again while starting ({e}); counted as a restart")
                continue
            said.append(f"node {name} is back" + (" and active" if name in LIFECYCLE else "") +
                        ("; safety's e-stop, latched while it was gone, holds the robot until a person resets it "
                         "(safety/reset)" if name in ("perception", "policy") else ""))
        return said

    def stop(self, grace: float = 10.0) -> dict[str, int | None]:
        """SIGTERM every process group, wait up to ``grace`` s, SIGKILL the rest, then finalise this side's
        ROS node (waiting at most ``grace`` s for that too); returns exit codes."""
        for p in self.procs.values():
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + grace
        for p in self.procs.values():
            try:
                p.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs.values():
            try:  # the group too: anything a node started must not outlive it
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            p.wait()
        self._disconnect(grace)
        return {n: p.returncode for n, p in self.procs.items()}

    def __enter__(self) -> "Graph":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def use_supervisor(self, supervisor: Supervisor | None) -> None:
        """Share ``supervisor`` (closed by its owner) from the next start on; None: make one's own again."""
        self._shared = supervisor

    # --- ROS side (the supervisor's own context: the caller's rclpy use is untouched) ----------------------
    def _connect(self) -> None:
        sup = self._supervisor = self._shared or Supervisor(self.env)
        self._ctx, self._node, self._executor = sup.ctx, sup.node, sup.executor
        self._connected_at = sup.connected_at

    def _disconnect(self, timeout: float = 10.0) -> None:
        """Let go of the supervisor; close it when it is this graph's own (see `Supervisor.close`)."""
        if self._node is None:
            return
        sup, self._supervisor = self._supervisor, None
        if sup is not None and sup is self._shared:  # the node lives on: let go of this graph's clients
            for client in self._clients.values():
                try:
                    self._node.destroy_client(client)
                except Exception:  # noqa: BLE001 - a client of a node being finalised elsewhere
                    pass
        self._clients = {}
        self._node = self._ctx = self._executor = None
        if sup is not None and sup is not self._shared:
            sup.close(timeout)

    def _call(self, srv_type, name: str, request, timeout: float):
        """One service call. The client is made once per service and kept: a node's reply waits at most 2 ms for
        a client's reply reader (`tinker.dds_profile`), so a new client lets discovery settle before its first
        request, and later calls go through a client the server already knows."""
        key = (srv_type, name)
        client = self._clients.get(key)
        fresh = client is None
        if fresh:
            client = self._clients[key] = self._node.create_client(srv_type, name)
        end = time.monotonic() + timeout
        while not client.wait_for_service(timeout_sec=0.2):
            self._check_alive()
            if time.monotonic() > end:
                raise BringupError(f"service {name} did not appear within {timeout:.0f} s")
        if fresh:
            settle = time.monotonic() + CLIENT_SETTLE_S
            while time.monotonic() < settle:
                self._executor.spin_once(timeout_sec=0.02)
        fut = client.call_async(request)
        while not fut.done():
            self._executor.spin_once(timeout_sec=0.1)
            self._check_alive()
            if time.monotonic() > end:
                raise BringupError(f"service {name} did not answer within {timeout:.0f} s")
        return fut.result()

    def _clash(self, names: list[str]) -> None:
        if names:  # lifecycle calls, services and topics would reach the other graph's nodes too
            raise BringupError(f"nodes {sorted(names)} already run on ROS domain {self.env.get('ROS_DOMAIN_ID', '0')}"
                               f": another graph (a demo or bringup that was killed?) uses these names. Stop it, "
                               f"or give this graph its own ROS_DOMAIN_ID or namespace")

    def _nodes_seen(self) -> tuple[set[str], set[str]]:
        """(ours, others): fully qualified names of the nodes discovery shows, by enclave."""
        ours, others = set(), set()
        for n, ns, enclave in self._node.get_node_names_and_namespaces_with_enclaves():
            (ours if enclave == self.enclave else others).add(_fq(ns, n))
        return ours, others

    def _refuse_name_clash(self, discovery_s: float = 1.0) -> None:
        """Before starting: give discovery ``discovery_s`` (about 0.9 s seen here) to show nodes already running
        under our names."""
        want = {_fq(self.namespace, n) for n in self.nodes}
        end = time.monotonic() + discovery_s
        while time.monotonic() < end:
            self._clash(sorted(want & self._nodes_seen()[1]))
            self._executor.spin_once(timeout_sec=0.05)

    def wait_for_nodes(self, timeout: float = 60.0) -> None:
        """Until every node of this graph is up (its enclave tells it from namesakes) and discovery had
        NAME_SETTLE_S, and DISCOVERY_QUIET_S without a new node, to show namesakes of another graph,
        which are refused."""
        want = {_fq(self.namespace, n) for n in self.nodes}
        end = time.monotonic() + timeout
        seen, changed = set(), time.monotonic()
        while True:
            self._check_alive()
            ours, others = self._nodes_seen()
            self._clash(sorted(want & others))
            now = time.monotonic()
            if (ours, others) != seen:
                seen, changed = (ours, others), now  # discovery has no end signal: wait for it to go quiet
            if want <= ours and now >= self._connected_at + NAME_SETTLE_S and now >= changed + DISCOVERY_QUIET_S:
                return
            if time.monotonic() > end:
                raise BringupError(f"nodes {sorted(want - ours)} did not appear within {timeout:.0f} s")
            self._executor.spin_once(timeout_sec=0.1)

    def wait_for_robot(self, timeout: float = 60.0) -> None:
        """Until the simulated robot's first joint state arrives. Its node is on the graph before its constructor
        has finished (the scene, then the camera process's copy of it): at load 25 the first state came about 5 s after
        the lifecycle nodes were active (issue 22: a 10 s ``tinker bringup --duration`` recorded 47 cycles at 10 Hz,
        and a reset called right after start-up was refused with 'no joint state yet')."""
        from sensor_msgs.msg import JointState

        from tinker.wire import SENSOR_QOS

        topic = self.parameters("sim_robot").get("joint_states_topic", "joint_states")
        name = topic if topic.startswith("/") else _fq(self.namespace, topic)
        got = threading.Event()
        sub = self._node.create_subscription(JointState, name, lambda _msg: got.set(), SENSOR_QOS)
        try:
            end = time.monotonic() + timeout
            while not got.is_set():
                self._check_alive()
                if time.monotonic() > end:
                    raise BringupError(f"the robot published no joint state on {name} within {timeout:.0f} s")
                self._executor.spin_once(timeout_sec=0.1)
        finally:
            self._node.destroy_subscription(sub)

    def state(self, node: str, timeout: float = 10.0) -> str:
        """The lifecycle state label of ``node`` (``unconfigured``, ``inactive``, ``active``...)."""
        from lifecycle_msgs.srv import GetState

        return self._call(GetState, f"{_fq(self.namespace, node)}/get_state", GetState.Request(), timeout).current_state.label

    def transition(self, node: str, label: str, timeout: float = 60.0) -> None:
        """Run lifecycle transition ``label`` (configure, activate, deactivate, cleanup, shutdown) on ``node``."""
        if not self._change(node, label, timeout):
            tail = "\n".join(self.log(node).strip().splitlines()[-10:])
            raise BringupError(f"lifecycle {label} of {_fq(self.namespace, node)} failed; its log ends:\n{tail}")

    def _change(self, node: str, label: str, timeout: float) -> bool:
        """One lifecycle transition request: whether the node made it (BringupError: no answer)."""
        from lifecycle_msgs.srv import ChangeState

        from tinker.lifecycle_up import change_request

        req = change_request(label)
        return bool(self._call(ChangeState, f"{_fq(self.namespace, node)}/change_state", req, timeout).success)

    def call_trigger(self, service: str, timeout: float = 10.0) -> tuple[bool, str]:
        """Call a std_srvs/Trigger service by its path under the namespace (e.g. ``safety/estop``)."""
        from std_srvs.srv import Trigger

        res = self._call(Trigger, _fq(self.namespace, service), Trigger.Request(), timeout)
        return res.success, res.message

    def wait_active(self, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        for n in LIFECYCLE:
            if n in self.nodes:
                while self.state(n, max(1.0, end - time.monotonic())) != "active":
                    if time.monotonic() > end:
                        raise BringupError(f"{n} is not active after {timeout:.0f} s")
                    time.sleep(0.1)
