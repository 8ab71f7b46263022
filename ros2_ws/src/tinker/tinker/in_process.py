"""`InProcessLoop`: the robot loop's graph (`tinker_core.loop.graph.ROBOT_LOOP`) in one thread, without ROS.

The third runtime of the same description. Its stages are the classes the ROS nodes run, built from the same launch
YAML (``config/bringup.yaml``). Every stage is a `tinker_core.loop.stage.LoopStage`
(`tinker_sim.robot_stage.SimRobotStage`, `PerceptionStage`, `PolicyStage`, `tinker_safety.safety_stage.SafetyStage`,
`BridgeStage`): the very objects the nodes host with `tinker.runtime.NodeRuntime.serve`, here on a `LocalBus`
(`InProcessLoop._host`), the edge values the same (`tinker_core.loop.edges`). Each stage handles the edges the
graph leads into it and publishes only the edges it is the source of (`LocalBus` checks both against the graph, as
the nodes' topics are checked). Delivery is first in, first out, as a DDS reader gets one writer's messages: every
consumer of a state has it before what answers it arrives. Nothing here imports rclpy.

Time: each cycle advances the loop's monotonic clock by one control period, so the guard's watchdog, its state
checks and the robot's hold see a robot at its real rate however fast the loop runs; the deadline of a cycle whose
command never came falls at the end of that cycle. Stamps are the robot's wall clock, as on the graph.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.graph import ROBOT, ROBOT_LOOP, LoopGraph
from tinker_core.monitor import FlowMonitor


class LocalBus:
    """The graph's edges in one process: ``on(stage, port, fn)`` and ``publish(stage, port, value)``, both checked
    against ``graph``; `drain` delivers in order. A `FlowMonitor` counts every edge (messages, bytes, latency from
    the robot state's stamp), as ``tinker flow`` does on the ROS graph."""

    def __init__(self, graph: LoopGraph = ROBOT_LOOP):
        self.graph = graph
        self.monitor = FlowMonitor()
        self._handlers: dict[tuple[str, str], Callable[[Any], None]] = {}
        self._queue: deque = deque()
        self.refused: list[str] = []
        """inputs a stage refused (`ValidationError`), as a node logs them: that stage holds its cycle, the loop
        goes on"""

    def on(self, stage: str, port: str, fn: Callable[[Any], None]) -> None:
        self.graph.check_port(stage, port, "in")
        self._handlers[(stage, port)] = fn

    def publish(self, stage: str, port: str, value: Any, stamp_ns: int = 0, nbytes: int = 0) -> None:
        edge = self.graph.check_port(stage, port, "out")
        now = time.time_ns()
        self.monitor.record(port, nbytes, (now - stamp_ns) / 1e9 if stamp_ns else float("nan"), now / 1e9)
        for target in edge.targets:
            fn = self._handlers.get((target, port))
            if fn is not None:  # a stage that is not running hears nothing, like a node that is not up
                self._queue.append((fn, value))

    def drain(self) -> None:
        while self._queue:
            fn, value = self._queue.popleft()
            try:
                fn(value)
            except ValidationError as e:  # as the nodes do: refused, that cycle held downstream
                self.refused.append(str(e))


@dataclass
class InProcessConfig:
    """What to run: the launch YAML's parameters, with these on top."""

    bundle: str = ""
    """deploy bundle directory ('' = the shipped default policy)"""
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    """node -> parameters over the YAML's, as `tinker.bringup.Graph` takes them: ``sim_robot`` (episode_cycles,
    dynamics, seed, num_objects, ...; the bundle's task and camera are applied first, `tinker.bringup.sim_for_bundle`),
    ``perception`` (estimate, calibration_deadband), ``safety`` (config, urdf), ``policy`` (urdf)"""
    bridge: bool = True
    """run the experience bridge (the transitions it joins are kept in `InProcessLoop.transitions`)"""
    reset_estop: bool = False
    """clear a latched e-stop when the robot starts its next episode, as an operator's ``/safety/reset`` would
    (False: it stays latched, as on the robot, and every later cycle holds)"""
    params_file: str = ""
    """the launch YAML ('' = config/bringup.yaml)"""


def _nbytes(value: Any) -> int:
    """Bytes of an edge value's arrays (a state's, a frame's, the task terms'), for the flow monitor."""
    total = 0
    for f in fields(value):
        x = getattr(value, f.name)
        if isinstance(x, np.ndarray):
            total += x.nbytes
        elif isinstance(x, dict):
            total += sum(a.nbytes for a in x.values() if isinstance(a, np.ndarray))
    return total


class _Collector:
    """The bridge's sender here: keeps the transitions."""

    def __init__(self) -> None:
        self.items: list = []
        self.sent = self.dropped = 0

    def send(self, t) -> None:
        self.items.append(t)
        self.sent += 1


class InProcessLoop:
    """The loop's stages on a `LocalBus`; `run` cycles it. Also the safety stage's host (deadline, log)."""

    def __init__(self, cfg: InProcessConfig | None = None):
        from tinker.bringup import default_params_file, node_parameters, safety_for_sim, sim_for_bundle
        from tinker.bundle_io import PolicyBundle, open_perception, resolve_bundle
        from tinker.param_check import check_latency_pairing
        from tinker_safety.guard_session import GATE_PARAMS, read_scene_items
        from tinker_safety.safety_stage import SafetyStage
        from tinker_core.loop.held_estimate import CALIBRATION_DEADBAND_M
        from tinker_core.loop.perception_stage import PerceptionStage
        from tinker_core.loop.policy_stage import PolicyStage
        from tinker_sim.robot_loop import SimRobotConfig, SimRobotLoop
        from tinker_sim.robot_stage import SimRobotStage

        self.cfg = cfg = cfg or InProcessConfig()
        pfile = cfg.params_file or default_params_file()
        unknown = sorted(set(cfg.overrides) - set(ROBOT_LOOP.start_order))
        if unknown:
            raise ConfigError(f"in-process loop overrides: unknown node(s) {unknown}; "
                              f"known: {list(ROBOT_LOOP.start_order)}")
        launch_yaml = {n: node_parameters(pfile, n) for n in ROBOT_LOOP.start_order}
        p = {n: {**launch_yaml[n], **cfg.overrides.get(n, {})} for n in ROBOT_LOOP.start_order}
        self.period = float(p["policy"]["control_period"])
        bundle = str(resolve_bundle(cfg.bundle))
        # the camera only where the bundle looks; its frames in line with their state: no camera process here
        sim = {**launch_yaml[ROBOT], "camera": False, **sim_for_bundle({"bundle": bundle}),
               **cfg.overrides.get(ROBOT, {}), "camera_rate_hz": 0.0}
        self.bus = LocalBus(ROBOT_LOOP)
        self.messages: list[tuple[str, str]] = []
        """what the stages logged: (level, message)"""
        self._mono_ns = time.monotonic_ns()
        self._deadline_armed = self._latched = False
        self.estops = self.estop_resets = 0
        check_latency_pairing(lambda node, name: p[node].get(name, 0), ("perception", "policy", "safety"))
        self.model, cycle, _ = open_perception(bundle, synced=True, sync_frames=True,
                                               estimate=str(p["perception"].get("estimate", "auto")),
                                               deadband_m=float(p["perception"].get("calibration_deadband",
                                                                                    CALIBRATION_DEADBAND_M)),
                                               latency_compensation=int(p["perception"].get("latency_compensation", 0)),
                                               latency_auto=bool(p["perception"].get("latency_auto", False)),
                                               urdf=p["perception"].get("urdf") or None)
        self.policy = PolicyBundle(bundle, p["policy"].get("urdf") or None, self.period,
                                   latency_compensation=int(p["policy"].get("latency_compensation", 0)),
                                   latency_auto=bool(p["policy"].get("latency_auto", False)),
                                   at_goal=str(p["policy"].get("at_goal", "hold")))
        self.stages = {"perception": PerceptionStage(cycle, self.model.sha256),
                       "policy": PolicyStage(self.policy)}  # no budget: time is virtual here
        self.stages["safety"] = safety = SafetyStage(self, "float64_array", clock=lambda: self._mono_ns / 1e9,
                                                     mono_ns=lambda: self._mono_ns)
        safety.on_estop = self._estop_changed
        safety.compensate(int(p["safety"].get("latency_compensation", 0)), bool(p["safety"].get("latency_auto", False)))
        self.session = safety.session
        s = p["safety"]
        fields = SimRobotConfig.__dataclass_fields__
        try:
            self.robot = SimRobotLoop(SimRobotConfig(**{k: v for k, v in sim.items() if k in fields}), self.period,
                                      log=self.log)
            scene = read_scene_items(s.get("task_fixtures") or safety_for_sim(sim).get("task_fixtures", ""),
                                     "safety.task_fixtures")
            self.session.configure(s.get("config") or None, s.get("urdf") or None, self.period,
                                   "joint_states", [float(s[k]) for k in GATE_PARAMS], extra_scene=scene)
        except Exception:  # nothing half-built stays open
            self.session.release()
            self.policy.runner.close()
            if getattr(self, "robot", None) is not None:
                self.robot.close()
            raise
        self.stages[ROBOT] = SimRobotStage(self.robot)
        if list(self.policy.runner.joint_names) != self.robot.names:  # the nodes map joints by name; here by order
            self.close()
            raise ConfigError(f"in-process loop: the bundle's joints {list(self.policy.runner.joint_names)} are not "
                              f"the robot's {self.robot.names}")
        self.bridge = self.sent = None
        if cfg.bridge:
            from tinker_core.loop.bridge import ExperienceBridge
            from tinker_core.loop.bridge_stage import BridgeStage
            from tinker_core.loop.episode_label import EpisodeLabels

            from tinker.reward_source import reward_source

            b = p["experience_bridge"]
            self.sent = _Collector()
            # the node's own composition: '' sensor_bundle is perception's bundle, as tinker bringup fills it in
            sensed = reward_source(str(b["reward_source"]), str(b["sensor_bundle"] or bundle), str(b["sensor_env"]),
                                   str(b["urdf"]), bool(b["sensor_hold_target"]))
            self.bridge = ExperienceBridge(EpisodeLabels(float(b["label_window"]), float(b["label_success_reward"]),
                                                         float(b["label_failure_reward"])), self.sent, sensed=sensed,
                                           info={"source": "in_process"}, estop_reward=float(b["estop_reward"]))
            self.stages["experience_bridge"] = BridgeStage(self.bridge, now=lambda: self._mono_ns / 1e9)
        self._wire()
        for name in ("policy", "safety"):  # as their lifecycle nodes' activate
            self.stages[name].activate()
        self.cycles = self.episodes_done = 0

    # --- the edges each stage handles (ROBOT_LOOP's inputs) -----------------------------------------
    def _host(self, stage, skip: tuple[str, ...] = ()) -> None:
        """A `tinker_core.loop.stage.LoopStage` on the bus: its handlers on the edges into it (but ``skip``), its
        ``emit`` onto the edges out of it (the same stage class a node hosts with `tinker.runtime.NodeRuntime.serve`)."""
        for port, handler in stage.inputs().items():
            if self.bus.graph.edge(port).source and port not in skip:  # an outside input (a goal) has no sender here
                self.bus.on(stage.name, port, handler)
        stage.emit = lambda port, v: self.bus.publish(stage.name, port, v, getattr(v, "stamp_ns", 0), _nbytes(v))

    def _wire(self) -> None:
        for stage in self.stages.values():
            if stage.name != ROBOT or self.robot.suction:
                self._host(stage)
            else:  # a robot without suction takes no tool command, as its node subscribes none
                self._host(stage, skip=("tool_command",))

    # --- the safety stage's host (tinker_safety.safety_stage.SafetyHost) ------------------------------
    @property
    def last_command(self):
        """the newest safe command (`tinker_safety.guard_cycle.Command`: its version and status)"""
        return self.stages["safety"].last_command

    def arm_deadline(self) -> None:
        self._deadline_armed = True

    def cancel_deadline(self) -> None:
        self._deadline_armed = False

    def log(self, level: str, message: str) -> None:
        self.messages.append((level, message))

    def _estop_changed(self, reason: str) -> None:
        self.estops += bool(reason) and not self._latched
        self._latched = bool(reason)
        self.log("info", f"e-stop: {reason or 'clear'}")

    def expect_commands(self, expected: bool, arrived: bool) -> None:
        """The safety node's input watch; nothing watches inputs in one thread."""

    # --- running ----------------------------------------------------------------------------------
    def step(self) -> Any:
        """One cycle: the robot's state out, every stage's answer, the deadline, the end of the cycle."""
        self._mono_ns += int(self.period * 1e9)
        robot = self.stages[ROBOT]
        s, _ = robot.tick(self._mono_ns)
        self.bus.drain()
        if self._deadline_armed:  # no command answered this state: the guard's deadline passes
            self.session.cycle.deadline()
            self.bus.drain()
        if self.bridge is not None:
            self.bridge.tick(self._mono_ns / 1e9)  # transitions that waited out their label window go out
        robot.end_cycle(s, self._mono_ns)
        self.cycles += 1
        if s.done and self.robot.episode_cycles > 0:  # the robot reset itself: a new episode starts
            self.episodes_done += 1
            if self.cfg.reset_estop and self._latched:
                self.estop_resets += self.session.reset()[0]
        return s

    def run(self, cycles: int, on_cycle: Callable[[Any], None] | None = None) -> dict[str, Any]:
        """``cycles`` cycles; a summary of what the robot, the guard and the bridge counted."""
        if cycles < 1:
            raise ConfigError(f"in-process loop: cycles must be >= 1, got {cycles}")
        for _ in range(int(cycles)):
            s = self.step()
            if on_cycle is not None:
                on_cycle(s)
        return self.summary()

    def run_episodes(self, episodes: int, on_cycle: Callable[[Any], None] | None = None) -> dict[str, Any]:
        """Cycles until ``episodes`` more episodes have ended (the robot's ``episode_cycles`` must be > 0)."""
        if self.robot.episode_cycles <= 0:
            raise ConfigError("in-process loop: episodes end only with sim_robot's episode_cycles > 0")
        goal = self.episodes_done + int(episodes)
        while self.episodes_done < goal:
            s = self.step()
            if on_cycle is not None:
                on_cycle(s)
        return self.summary()

    def summary(self) -> dict[str, Any]:
        r, g = self.robot, self.session.cycle
        return {"cycles": self.cycles, "episodes": self.episodes_done, "successes": r.successes,
                "objects_sorted": r.objects_sorted, "objects_total": r.objects_total,
                "max_command_step": r.step_max, "commands_over_velocity_limit": r.steps_over_limit,
                "unsafe_states": dict(r.env.violations), "holds": g.holds, "deadline_misses": g.deadline_misses,
                "estopped": bool(g.guard is not None and g.guard.estopped), "estops": self.estops,
                "estop_resets": self.estop_resets, "stale_commands": r.stale, "refused_inputs": len(self.bus.refused),
                "transitions": self.sent.sent if self.sent is not None else 0, "flow": self.bus.monitor.snapshot()}

    @property
    def transitions(self) -> list:
        """The transitions the experience bridge joined and let go (empty without the bridge)."""
        return self.sent.items if self.sent is not None else []

    def close(self) -> None:
        if getattr(self, "bridge", None) is not None:
            self.bridge.flush(self._mono_ns / 1e9)
        for name in ("safety", "policy"):  # as their lifecycle nodes' cleanup: the session, the running bundle
            self.stages[name].release()
        self.robot.close()

    def __enter__(self) -> "InProcessLoop":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

