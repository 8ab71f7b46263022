"""What every tinker node shares: cycle statistics, /diagnostics, trace spans and the standard main().

`NodeRuntime` is a mixin for `rclpy.node.Node` and `rclpy.lifecycle.LifecycleNode`: it declares the
common parameters (`RUNTIME_PARAMS`), keeps the cycle statistics, writes spans in the tinker_core tracer
format and publishes a DiagnosticArray heartbeat.

Inputs go stale: a node subscribes through `NodeRuntime.subscribe` / `watch_subscription`, which declares
the topic as an input once, where the subscription is made (`tinker_core.loop.input_ages.InputAges`):
every message's arrival is noted on this node's monotonic clock, /diagnostics reports each input's age,
and an input silent for longer than ``input_timeout`` raises the node's level (ERROR for what it cannot
work without), naming the topic, its age and the limit. A check every `INPUT_CHECK_PERIOD_S` publishes
the diagnostics at once when that level changes, so a stopped (killed, paused) peer shows as ERROR in
the nodes that depend on it within ``input_timeout`` + `INPUT_CHECK_PERIOD_S`, and the level clears as
soon as messages return. A killed node vanishes from /diagnostics: its dependents' ERROR is how it shows.

`main_for(cls)` is the standard entry point: SIGINT and SIGTERM are caught by tinker (not by rclpy)
so that a commanding node can publish its stop while the context is still alive, then exit 0.

Executor: ``TINKER_EXECUTOR=events`` (the default where rclpy has it: Kilted, Jazzy >= rclpy 7.1.4)
runs every node on rclpy's C++ ``EventsExecutor``, which dispatches each callback without the
per-spin wait-set rebuild of the ``SingleThreadedExecutor`` (``TINKER_EXECUTOR=single``, and the
fallback where ``rclpy.experimental`` is missing). `make_executor` is what the nodes and the
control-loop benchmark's floor both use.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import SetParametersResult
from rclpy.executors import SingleThreadedExecutor
from rclpy.signals import SignalHandlerOptions

from tinker.dds_profile import use_loop_profile
from tinker.priority import lower_priority, set_realtime
from tinker.quiet_gc import QUIET_GC
from tinker_core.errors import ConfigError, TinkerError, ValidationError
from tinker_core.loop.graph import ROBOT_LOOP
from tinker_core.loop.input_ages import InputAges, Level
from tinker_core.loop.namesake import NamesakeWatch
from tinker_core.tracer import Tracer

OK, WARN, ERROR, STALE = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR, DiagnosticStatus.STALE
_LEVELS = {OK: Level.OK, WARN: Level.WARN, ERROR: Level.ERROR}
"""diagnostic_msgs levels (bytes) as tinker_core's `Level`, and back"""
_MSG_LEVELS = {v: k for k, v in _LEVELS.items()}
INPUT_CHECK_PERIOD_S = 0.1
"""s between checks of the inputs' ages: a change of their level is published at once, not at the next heartbeat"""


@dataclass(frozen=True)
class Param:
    """One node parameter: its default, what it means, its range and whether it can change while running."""

    default: Any
    description: str
    range: tuple[float, float] | None = None
    """inclusive [low, high] for a number (None: any)"""
    read_only: bool = False
    """True where a change needs the node restarted (or reconfigured): ``ros2 param set`` is then refused"""


SIM_TIME_REFUSED = ("use_sim_time stays false: tinker's nodes stamp and judge every message on the system clock, and "
                    "nothing publishes /clock (sim_robot runs in real time); on a simulated clock every robot state "
                    "would look stale or from the future, and the loop would hold")
"""why ``use_sim_time: true`` (rclpy's own parameter) is refused, at start and at run time"""


def _refuse_sim_time(params) -> SetParametersResult:
    wrong = any(p.name == "use_sim_time" and p.value is True for p in params)
    return SetParametersResult(successful=not wrong, reason=SIM_TIME_REFUSED if wrong else "")


RUNTIME_PARAMS: dict[str, Param] = {
    "control_period": Param(0.05, "s; one robot cycle (a bundle trained at another period is refused)",
                            (0.001, 10.0), read_only=True),
    "nice": Param(0, "added to the node process's nice value (not in a composed process)", (-20, 19), True),
    "realtime_priority": Param(0, "SCHED_FIFO priority of the loop's processes (0: normal scheduling)", (0, 99), True),
    "trace_dir": Param("", "directory for per-node JSONL trace spans (empty: none)", read_only=True),
    "diagnostics_period": Param(1.0, "s between /diagnostics heartbeats", (0.05, 60.0), True),
    "input_timeout": Param(0.5, "s; an input (subscribed topic) silent for longer is stale: ERROR in /diagnostics, "
                                "naming the topic and its age, until it is heard again. Takes effect at once",
                           (0.01, 60.0)),
    "input_startup_grace": Param(20.0, "s; an input never heard since it was subscribed is WARN 'waiting for' this "
                                       "long, ERROR afterwards. Takes effect at once", (0.0, 3600.0)),
}
"""the parameters every tinker node declares (`NodeRuntime`)"""


def declare_params(node, params: Mapping[str, Param]) -> None:
    """Declare ``params`` on ``node``, each with a ParameterDescriptor (description, range, read-only)."""
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor

    for name, prm in params.items():
        d = ParameterDescriptor(description=prm.description, read_only=prm.read_only)
        if prm.range is not None and isinstance(prm.default, bool):
            pass
        elif prm.range is not None and isinstance(prm.default, int):
            d.integer_range = [IntegerRange(from_value=int(prm.range[0]), to_value=int(prm.range[1]), step=1)]
        elif prm.range is not None:
            d.floating_point_range = [FloatingPointRange(from_value=float(prm.range[0]), to_value=float(prm.range[1]),
                                                         step=0.0)]
        node.declare_parameter(name, prm.default, d)


EXECUTOR_ENV = "TINKER_EXECUTOR"
"""Environment variable choosing the executor: ``events`` or ``single`` (unset: events where available)."""


def make_executor(kind: str | None = None, context=None):
    """A fresh executor of ``kind`` (``events``/``single``; None reads $TINKER_EXECUTOR), and its name.

    ``events`` falls back to the SingleThreadedExecutor on an rclpy without ``rclpy.experimental``.
    ``context``: the rclpy context (None: the default one).
    """
    kind = (kind or os.environ.get(EXECUTOR_ENV, "") or "events").strip().lower()
    if kind not in ("events", "single"):
        raise TinkerError(f"{EXECUTOR_ENV}: expected 'events' or 'single', got {kind!r}")
    if kind == "events":
        try:
            from rclpy.experimental import EventsExecutor
        except ImportError:  # an rclpy older than the EventsExecutor (early Jazzy)
            kind = "single"
        else:
            return EventsExecutor(context=context), "events"
    return SingleThreadedExecutor(context=context), "single"


class CycleStats:
    """Latency of each cycle's work, overruns (work longer than the budget) and deadline misses."""

    def __init__(self, budget_s: float, window: int = 2000):
        self.budget_ns = int(budget_s * 1e9)
        self._lat: deque[int] = deque(maxlen=window)
        self.cycles = 0
        self.overruns = 0
        self.deadline_misses = 0

    def record(self, dur_ns: int) -> bool:
        """Adds one cycle's work time; True when it overran the budget."""
        self.cycles += 1
        self._lat.append(dur_ns)
        if dur_ns > self.budget_ns:
            self.overruns += 1
            return True
        return False

    def percentiles_us(self) -> tuple[float, float]:
        if not self._lat:
            return 0.0, 0.0
        a = np.fromiter(self._lat, dtype=np.float64, count=len(self._lat)) / 1e3
        p50, p99 = np.percentile(a, (50, 99))
        return float(p50), float(p99)


class _QuietWindow:
    """This process's quiet window: when its last cycle's output went out, and the heartbeats waiting for the next."""

    def __init__(self) -> None:
        self.last_ns = 0
        self.pending: list = []


_QUIET = _QuietWindow()


class Deadline:
    """A one-shot deadline on a node's timer: `arm` (re)starts it, `cancel` stops it, `set_delay` makes it anew
    (a running executor does not see a changed period of an existing timer), keeping it armed or not."""

    def __init__(self, node, delay_s: float, callback: Callable[[], None]):
        self.node, self.callback, self.timer = node, callback, None
        self.set_delay(delay_s, armed=False)

    def set_delay(self, delay_s: float, armed: bool | None = None) -> None:
        armed = self.armed if armed is None else armed
        self.destroy()
        self.timer = self.node.create_timer(delay_s, self.callback)
        if not armed:  # no ``autostart`` argument: older rclpy lacks it
            self.timer.cancel()

    @property
    def armed(self) -> bool:
        return self.timer is not None and not self.timer.is_canceled()

    def arm(self) -> None:
        self.timer.reset()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()

    def destroy(self) -> None:
        if self.timer is not None:
            self.node.destroy_timer(self.timer)
            self.timer = None


class NodeFatal(Exception):
    """A node found a condition it must not run under (named in the message); the process exits 3."""


class NodeRuntime:
    """Mixin: call ``_init_runtime(module)`` in ``__init__`` after the rclpy base constructor."""

    def destroy_entities(self, entities: list) -> None:
        """Destroy the subscriptions, publishers, services and timers a lifecycle node made in configure."""
        from rclpy.publisher import Publisher
        from rclpy.service import Service
        from rclpy.subscription import Subscription
        from rclpy.timer import Timer

        kinds = ((Subscription, self.destroy_subscription), (Publisher, self.destroy_publisher),
                 (Service, self.destroy_service), (Timer, self.destroy_timer))
        for e in entities:
            if isinstance(e, Subscription):
                self.inputs.forget(e.topic_name)
            next(destroy for cls, destroy in kinds if isinstance(e, cls))(e)

    def _init_runtime(self, module: str, params: Mapping[str, Param] | None = None) -> None:
        """Declares `RUNTIME_PARAMS` and the node's own ``params``, then sets up the shared parts."""
        declare_params(self, RUNTIME_PARAMS)
        if params:
            declare_params(self, params)
        if self.get_parameter("use_sim_time").value is True:
            raise ConfigError(f"{self.get_fully_qualified_name()}: {SIM_TIME_REFUSED}")
        self.add_on_set_parameters_callback(_refuse_sim_time)  # before rclpy's own, which would switch the clock
        self.scheduling = "SCHED_OTHER"
        self.module = module
        self.fatal = ""
        self.period = float(self.get_parameter("control_period").value)
        self.stats = CycleStats(self.period)
        trace_dir = str(self.get_parameter("trace_dir").value)
        fq = self.get_fully_qualified_name()
        tag = fq.strip("/").replace("/", ".") or module
        self.tracer = Tracer(Path(trace_dir) / f"{tag}.jsonl" if trace_dir else None, node=fq)
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._diag_timer = self.create_timer(float(self.get_parameter("diagnostics_period").value),
                                             self._on_diag_timer)
        self._period_ns = int(self.period * 1e9)
        self._started = time.monotonic()
        self.inputs = InputAges(float(self.param("input_timeout")), float(self.param("input_startup_grace")))
        self._inputs_reported = Level.OK
        self._input_timer = self.create_timer(INPUT_CHECK_PERIOD_S, self._check_inputs)
        self.add_post_set_parameters_callback(self._inputs_reconfigure)

    def param(self, name: str) -> Any:
        return self.get_parameter(name).value

    def subscribe(self, param: str, role: str, callback: Callable, qos=None, stale: Level | None = Level.ERROR,
                  msg_type=None):
        """Subscribe the topic named by parameter ``param``: the edge ``role`` of the loop's graph, which must lead
        into this node's stage (`tinker_core.loop.graph.ROBOT_LOOP`), with the type and QoS `tinker.wire.TOPICS`
        declares for it (``qos``: another QoS, e.g. the recorder's deeper queue; ``msg_type``: the other type a
        parameter selects), watched as an input (`watch_subscription`; ``stale``: the level when it goes quiet,
        None: its age only)."""
        t = self._edge(role, "in")
        return self.watch_subscription(msg_type or t.type, self.param(param), callback, qos or t.qos, stale)

    def watch_subscription(self, msg_type, topic: str, callback: Callable, qos, stale: Level | None = Level.ERROR):
        """``create_subscription``, the topic declared as an input of this node: each message's arrival is
        noted (node's monotonic clock) before ``callback`` runs, and a silence longer than ``input_timeout``
        makes the node's level ``stale`` (None: the age is reported, never judged: a topic published only
        on change). `destroy_entities` forgets it with the subscription."""
        name = self.resolve_topic_name(topic)
        seen = self.inputs.seen

        def on_message(msg) -> None:
            seen(name)
            try:
                callback(msg)
            except Exception as e:  # a bug, or an input no check foresaw, must not end the loop's process
                self.callback_failed(name, e)

        sub = self.create_subscription(msg_type, topic, on_message, qos)
        self.inputs.declare(name, stale)
        return sub

    def advertise(self, param: str, role: str, qos=None, msg_type=None):
        """A publisher on the topic named by parameter ``param``: the edge ``role`` of the loop's graph, which this
        node's stage must be the source of, as `tinker.wire.TOPICS` declares it (``qos``, ``msg_type``: as in
        `subscribe`)."""
        t = self._edge(role, "out")
        return self.create_publisher(msg_type or t.type, self.param(param), qos or t.qos)

    def serve(self, stage, reader, topics: Mapping[str, str], stale: Mapping[str, Level | None] | None = None,
              read: Mapping[str, Callable] | None = None, qos: Mapping[str, Any] | None = None,
              refuse: tuple[type[Exception], ...] = (ValidationError,)) -> list:
        """Host ``stage`` (a `tinker_core.loop.stage.LoopStage`): `serve_outputs` and `serve_inputs` at once.
        The entities made, for `destroy_entities`."""
        return self.serve_outputs(stage, topics) + self.serve_inputs(stage, reader, topics, stale, read, qos,
                                                                     refuse=refuse)

    def serve_outputs(self, stage, topics: Mapping[str, str], write: Mapping[str, Callable] | None = None,
                      msg_types: Mapping[str, type] | None = None, qos: Mapping[str, Any] | None = None) -> list:
        """A publisher for each edge out of ``stage`` that ``topics`` names (port -> the parameter naming its
        topic), the stage's ``emit`` writing each value as `tinker.wire.WRITERS` says (``write``: another writer
        for a port, ``msg_types`` its message type, ``qos`` another QoS). The publishers, also in
        ``edge_publishers``."""
        from tinker.wire import WRITERS

        write, msg_types, qos = {**WRITERS, **(write or {})}, dict(msg_types or {}), dict(qos or {})
        outs = [e.port for e in ROBOT_LOOP.outputs(self.module) if e.port in topics]
        pubs = {port: self.advertise(topics[port], port, qos.get(port), msg_types.get(port)) for port in outs}
        self.edge_publishers = {**getattr(self, "edge_publishers", {}), **pubs}
        writers = {port: (pubs[port].publish, write[port]) for port in outs}

        def emit(port: str, value) -> None:
            publish, to_msg = writers[port]
            publish(to_msg(value))

        def emit_batch(items, before=None) -> None:
            out = [(writers[port][0], writers[port][1](value)) for port, value in items]
            if before is not None:
                before()
            for publish, msg in out:
                publish(msg)

        stage.emit, stage.emit_batch = emit, emit_batch
        return list(pubs.values())

    def serve_inputs(self, stage, reader, topics: Mapping[str, str], stale: Mapping[str, Level | None] | None = None,
                     read: Mapping[str, Callable] | None = None, qos: Mapping[str, Any] | None = None,
                     msg_types: Mapping[str, type] | None = None,
                     refuse: tuple[type[Exception], ...] = (ValidationError,)) -> list:
        """A subscription for each edge into ``stage`` that ``topics`` names, each message turned into its edge
        value by ``reader`` (`tinker.wire.Reader`; ``read``: another reader for a port; ``qos``: another QoS for
        a port, e.g. the recorder's deeper queue; ``msg_types``: the other type a parameter selects, the safe
        ``command``'s by default from the node's ``command_type``; ``stale``: the level when it goes quiet, ERROR unless
        named) and handed to the stage. An input the stage raises one of
        ``refuse`` on is logged and noted in the stage (any other error is a failed callback: `callback_failed`);
        a handler that closes a cycle is timed into the cycle statistics and the trace. The subscriptions, also
        in ``edge_subscriptions``."""
        stale, read, qos, types = dict(stale or {}), dict(read or {}), dict(qos or {}), dict(msg_types or {})
        if "command" in topics and "command" not in types and self.has_parameter("command_type"):
            from tinker.wire import command_type  # the safe command as safety sends it (`command_type`)

            types["command"] = command_type(self.param("command_type"), f"{self.get_name()}.command_type")
            if self.param("command_type") == "joint_trajectory":
                read.setdefault("command", reader.trajectory_command)
        subs = {port: self.subscribe(topics[port], port,
                                     self._served(stage, port, self.param(topics[port]), handler,
                                                  read.get(port) or getattr(reader, port), refuse),
                                     qos.get(port), stale=stale.get(port, Level.ERROR), msg_type=types.get(port))
                for port, handler in stage.inputs().items() if port in topics}
        self.edge_subscriptions = subs
        return list(subs.values())

    def _served(self, stage, port: str, topic: str, handler: Callable, read: Callable,
                refuse: tuple[type[Exception], ...]) -> Callable:
        held = ", that cycle held downstream" if ROBOT_LOOP.edge(port).every_cycle else ""
        said = f"input refused on {port} ({topic}){held}: "

        def on_message(msg) -> None:
            t_wall, t0 = time.time_ns(), time.perf_counter_ns()
            try:
                done = handler(read(msg))
            except refuse as e:
                stage.refuse(e, port)
                self.get_logger().warning(f"{said}{e}", throttle_duration_sec=1.0)
                return
            if done is not None:
                dur = time.perf_counter_ns() - t0
                self.stats.record(dur)
                self.span(done.cycle, t_wall, dur, since_state_us=(t_wall - done.stamp_ns) // 1000
                          if done.stamp_ns else -1, **getattr(done, "extra", {}))
        return on_message

    def _edge(self, role: str, direction: str):
        """The wire declaration of edge ``role``, once the graph says this node publishes ('out') or consumes it."""
        from tinker.wire import TOPICS

        ROBOT_LOOP.check_port(self.module, role, direction)
        return TOPICS[role]

    def on_param_set(self, apply: Callable[[str, Any], str]) -> None:
        """Parameters set at run time (``ros2 param set``, a launch file, another node): ``apply(name, value)`` acts
        on each and returns why it refuses ('' = taken; a TinkerError raised is a refusal with its message). The
        first refusal refuses the whole set, and its reason is what the caller sees."""
        def on_set(params) -> SetParametersResult:
            try:
                reason = next(filter(None, (apply(p.name, p.value) for p in params)), "")
            except TinkerError as e:
                reason = str(e)
            return SetParametersResult(successful=not reason, reason=reason)
        self.add_on_set_parameters_callback(on_set)

    def note_overrun(self, cycle: int, dur_ns: int, how: str) -> None:
        """A cycle over its budget: counted in /diagnostics, logged at most once a second (no log per cycle)."""
        self.stats.record(dur_ns)
        self.get_logger().warning(f"cycle {cycle} overran its budget ({dur_ns / 1e6:.2f} ms > "
                                  f"{self.period * 1e3:.0f} ms): {how}", throttle_duration_sec=1.0)

    def trigger_service(self, name: str, call: Callable[[], tuple[bool, str]]):
        """A std_srvs/Trigger service ``name`` answered by ``call()`` -> (success, message)."""
        from std_srvs.srv import Trigger

        def on_call(request, response):  # noqa: ARG001
            response.success, response.message = call()
            return response
        return self.create_service(Trigger, name, on_call)

    name_watch: NamesakeWatch | None = None

    def watch_namesake(self, log_while_present: bool = False) -> None:
        """One node per name (`tinker_core.loop.namesake.NamesakeWatch`): a namesake seen while starting sets
        ``fatal`` (exit 3), one seen later is `namesake` (ERROR in /diagnostics), logged when it appears (and,
        ``log_while_present``, at most every 5 s while it stays)."""
        self.name_watch = NamesakeWatch(self.get_fully_qualified_name())
        self._log_namesake = log_while_present
        self._name_timer = self.create_timer(0.5, self.check_namesake)

    @property
    def namesake(self) -> str:
        """Why this node has a namesake on the domain ('' = none, or not watched)."""
        return self.name_watch.message if self.name_watch is not None else ""

    def check_namesake(self) -> None:
        """Count the nodes with this node's name on the domain, when the watch says it is due."""
        w = self.name_watch
        if not w.due():
            return
        me = (self.get_name(), self.get_namespace())
        appeared = w.update(sum(1 for n, ns in self.get_node_names_and_namespaces() if (n, ns) == me))
        self.fatal = self.fatal or w.fatal
        if appeared or (self._log_namesake and w.message and not w.fatal):
            self.get_logger().error(w.message, throttle_duration_sec=5.0)

    def second_publisher(self, port: str, only: str) -> str:
        """Why the served input ``port`` is crowded: more than one publisher on it, where ``only`` should send ('' =
        one or none, or not subscribed)."""
        sub = getattr(self, "edge_subscriptions", {}).get(port)
        n = sub.get_publisher_count() if sub is not None else 0
        return f"{n} publishers on {sub.topic_name}: only {only} sends it" if n > 1 else ""

    # --- overridden by nodes -------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        return {}

    def diagnostic_level(self) -> tuple[bytes | Level, str]:
        """The node's own level (diagnostic_msgs' bytes, or tinker_core's `Level`) and its message."""
        return OK, "running"

    def log(self, level: str, message: str) -> None:
        """``level``: info, warning (throttled to one per 2 s) or error."""
        # one call site per severity: rclpy's logger refuses a call site whose severity changes
        if level == "error":
            self.get_logger().error(message)
        elif level == "warning":
            self.get_logger().warning(message, throttle_duration_sec=2.0)
        else:
            self.get_logger().info(message)

    def on_exit(self) -> None:
        """Called once on SIGINT/SIGTERM while the context is alive: commanding nodes publish their stop."""

    callback_errors = 0
    last_callback_error = ""

    def callback_failed(self, topic: str, err: Exception) -> None:
        """A message callback raised: counted, logged with its traceback, ERROR in /diagnostics from then on
        (the node's state may be off: someone must look). Nodes that command override it to stop safely."""
        import traceback

        self.callback_errors += 1
        self.last_callback_error = f"{topic}: {err!r}"
        self.get_logger().error(f"callback on {topic} failed ({self.callback_errors} so far): "
                                f"{''.join(traceback.format_exception(err)).strip()}", throttle_duration_sec=5.0)

    # --- shared ---------------------------------------------------------------------------------
    quiet_point: str | None = None
    """The span after which this node's process is quiet (None: the node's own cycle span). The one
    process of a composed graph is quiet only once the command is back at the robot (``loop_e2e``)."""

    def span(self, cycle: int, start_ns: int, dur_ns: int, module: str | None = None, **extra) -> None:
        """Records a unit of cycle work that has just ended (its output is out): the quiet window starts,
        where a pending heartbeat and a due garbage collection (`tinker.quiet_gc`) run."""
        module = module or self.module
        self.tracer.record(cycle, module, start_ns, dur_ns, **extra)
        if module != (self.quiet_point or self.module):
            return
        _QUIET.last_ns = time.monotonic_ns()
        while _QUIET.pending:  # every node of the process: composed, they share one thread
            _QUIET.pending.pop().publish_diagnostics()
        QUIET_GC.collect_if_due()

    def _on_diag_timer(self) -> None:
        """The heartbeat (~0.5-1.5 ms of Python) goes out in the quiet window, never in a cycle's way:
        now when the process's last cycle just ended (or it is idle), else right after the next one's output."""
        since = time.monotonic_ns() - _QUIET.last_ns
        if since < self._period_ns // 2 or since > 2 * self._period_ns:
            self.publish_diagnostics()
            QUIET_GC.collect_if_due()  # also when no cycle runs: an idle node still frees memory
        elif self not in _QUIET.pending:
            _QUIET.pending.append(self)

    def _inputs_reconfigure(self, params) -> None:
        if any(p.name in ("input_timeout", "input_startup_grace") for p in params):
            self.inputs.configure(float(self.param("input_timeout")), float(self.param("input_startup_grace")))

    def _check_inputs(self) -> None:
        """A change of the inputs' level goes out now (in the quiet window), not at the next heartbeat."""
        if self.inputs.level()[0] != self._inputs_reported:
            self._on_diag_timer()

    def _level(self) -> tuple[bytes, str]:
        """The node's own level and its inputs', the worse one's message (both where they are equal)."""
        level, message = self.diagnostic_level()
        if isinstance(level, Level):
            level = _MSG_LEVELS[level]
        if self.callback_errors:
            level, message = ERROR, (f"{self.callback_errors} message callback(s) failed, last "
                                     f"{self.last_callback_error}; {message}")
        in_level, in_message = self.inputs.level()
        self._inputs_reported = in_level
        own = _LEVELS.get(level, Level.ERROR)
        if in_level > own:
            return _MSG_LEVELS[in_level], in_message
        if in_level == own and in_level > Level.OK:
            return level, f"{message}; {in_message}"
        return level, message

    def diagnostics(self) -> DiagnosticStatus:
        p50, p99 = self.stats.percentiles_us()
        level, message = self._level()
        values = {
            "heartbeat_s": f"{time.monotonic() - self._started:.1f}",
            "cycles": self.stats.cycles,
            "cycle_latency_p50_us": f"{p50:.1f}",
            "cycle_latency_p99_us": f"{p99:.1f}",
            "overruns": self.stats.overruns,
            "deadline_misses": self.stats.deadline_misses,
            "scheduling": self.scheduling,
            "gc_collections": "/".join(map(str, QUIET_GC.collections)),
            "gc_max_pause_ms": f"{QUIET_GC.max_pause_ns / 1e6:.2f}",
            "callback_errors": self.callback_errors,
        }
        values.update(self.inputs.values())
        values.update(self.diagnostic_values())
        st = DiagnosticStatus(level=level, name=self.get_fully_qualified_name(), message=message,
                              hardware_id=self.get_fully_qualified_name())
        st.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        return st

    def publish_diagnostics(self) -> None:
        arr = DiagnosticArray()
        arr.header.stamp = self.get_clock().now().to_msg()
        arr.status = [self.diagnostics()]
        self._diag_pub.publish(arr)

    def close_runtime(self) -> None:
        if self in _QUIET.pending:
            _QUIET.pending.remove(self)
        self.tracer.close()


def spin_until_signal(nodes: list, on_ready: Callable[[], None] | None = None) -> None:
    """Spins ``nodes`` in one executor until SIGINT/SIGTERM, then lets each node publish its stop.

    rclpy's own signal handlers are off (``SignalHandlerOptions.NO`` at init): tinker's handler only
    sets a flag, so the stop is published with a live context before shutdown.
    """
    stop = threading.Event()

    def handler(signum, frame):  # noqa: ARG001
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    ex, _ = make_executor()
    for n in nodes:
        ex.add_node(n)
    if on_ready:
        on_ready()
    try:
        while not stop.is_set() and rclpy.ok():
            ex.spin_once(timeout_sec=0.05)
            fatal = [n.fatal for n in nodes if n.fatal]
            if fatal:
                raise NodeFatal("; ".join(fatal))
    finally:
        for n in nodes:
            try:
                n.on_exit()
            except Exception as e:  # the stop must not be skipped for one node's failure
                n.get_logger().error(f"on_exit failed: {e}")
        # let the stop messages leave before the participant goes away
        end = time.monotonic() + 0.1
        while time.monotonic() < end:
            ex.spin_once(timeout_sec=0.02)
        for n in nodes:
            n.close_runtime()
            ex.remove_node(n)
            n.destroy_node()
        ex.shutdown()


def run_nodes(make_nodes: Callable[[], list], args: list[str] | None, label: str = "") -> int:
    """Init rclpy, build the nodes, spin them until SIGINT/SIGTERM, shut down; the process exit code.

    3 when a node refuses to run (`NodeFatal`), 2 on any other tinker error, 0 after a clean stop.
    """
    profile = use_loop_profile()  # before the participant exists: Fast DDS reads it at creation
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    try:
        nodes = make_nodes()
        nodes[0].get_logger().info(profile)
        if len(nodes) > 1 and any(n.module == "sim_robot" for n in nodes):
            for n in nodes:  # one thread runs the whole cycle: quiet once the command is back
                n.quiet_point = "loop_e2e"
        QUIET_GC.install()
        sched = set_realtime(max(int(n.get_parameter("realtime_priority").value) for n in nodes))
        for n in nodes:
            n.scheduling = sched
        if "refused" in sched:
            nodes[0].get_logger().warning(f"scheduling: {sched}")
        else:
            nodes[0].get_logger().info(f"scheduling: {sched}")
        if len(nodes) == 1:  # a node in its own process: its ``nice`` (composed processes keep the loop's)
            done = lower_priority(int(nodes[0].get_parameter("nice").value))
            if done:
                nodes[0].get_logger().info(f"background priority: {done}")
        spin_until_signal(nodes)
    except NodeFatal as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 3
    except TinkerError as e:
        print(f"error: {label}{e}", file=sys.stderr, flush=True)
        return 2
    finally:
        QUIET_GC.uninstall()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


def main_for(cls) -> Callable[[list[str] | None], int]:
    """The standard ``main()`` of a tinker node class: init, construct, spin, stop, shut down."""

    def main(args: list[str] | None = None) -> int:
        return run_nodes(lambda: [cls()], args, label=f"{cls.__name__}: ")

    main.__doc__ = f"Runs the {cls.__name__} node until SIGINT/SIGTERM."
    return main

