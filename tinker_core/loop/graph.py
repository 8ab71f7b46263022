"""The robot loop's graph, described once: its stages and the edges between them.

`ROBOT_LOOP` says which stage publishes what and who consumes it. Each runtime reads it instead of wiring the loop
by hand: the ROS 2 runtime starts its nodes in `LoopGraph.start_order` and activates the commanding ones in
`LoopGraph.activation_order` (`tinker.bringup`, the launch file), each node may only publish or subscribe the
edges the graph gives its stage (`tinker.runtime.NodeRuntime.subscribe` / ``advertise`` refuse any other, so a
node cannot grow an edge the description lacks), and ``tinker flow`` reports the flow edge by edge, naming each
edge's ends. An edge's ``port`` is also the key of its wire format (`tinker.wire.TOPICS`: name, message type, QoS,
metadata), which a test holds equal to the graph's ports. The same stages run in one process without ROS on a bus
wired from this graph (`tinker.in_process.InProcessLoop`, ``tinker eval --runtime loop``). Training and the env-based
evaluation still compose their parts by hand (docs/architecture.md).

Two edges cross processes over ZeroMQ instead of ROS (``transport="zmq"``): the experience bridge's transitions to
the learner and the learner's gated bundles back. The learner is a stage of the graph but not a ROS node
(``node=False``): `tinker learner` runs it, bringup does not start it, and its edges have no topic; the ends check
their port against the graph as the nodes do (`tinker_core.learner.server`, the bridge node). The learner measures
them (``ctl status``'s ``flow``, ``tinker flow --learner``); its rollout workers' edges are
`tinker_core.learner.graph.ACTOR_LEARNER`.
"""

from __future__ import annotations

from dataclasses import dataclass

from tinker_core.errors import PipelineError

TRANSPORTS = ("ros", "zmq", "process")
"""what an edge travels over: a ROS 2 topic, a ZeroMQ channel of `tinker_core.transport`, or a call within one
process (`tinker_core.training.flow.TRAINING`)"""
OUTSIDE = ""
"""The source of an edge published from outside the graph: a person, a real system sending goals."""


@dataclass(frozen=True)
class Stage:
    """One stage of the loop: a ROS 2 node on the robot, a class in process."""

    name: str
    does: str
    commanding: bool = False
    """True where the stage's output moves the robot: configured and activated as a lifecycle node."""
    node: bool = True
    """True for a ROS 2 node of the graph (bringup starts it); False for a process reached over ZeroMQ."""
    restart: bool = False
    """True where the node's process is started again when it dies: it holds nothing a restart loses unsafely.
    Never the robot, nor safety, whose latched e-stop a restart would forget; a loop stage that dies latches
    safety's watchdog, which only a person's reset clears, restarted or not."""


@dataclass(frozen=True)
class Edge:
    """What flows from one stage to others. ``port`` names it (and its wire format)."""

    port: str
    source: str
    targets: tuple[str, ...]
    every_cycle: bool = False
    """True when every running loop publishes it each cycle (`tinker flow` waits until each has a publisher)."""
    does: str = ""
    transport: str = "ros"
    """"ros": a topic (its wire format in `tinker.wire.TOPICS`); "zmq": a `tinker_core.transport` channel;
    "process": a call in one process"""

    @property
    def ends(self) -> str:
        """``"perception -> policy, experience_bridge"``"""
        return f"{self.source or '(outside)'} -> {', '.join(self.targets)}"

    def __str__(self) -> str:
        return f"{self.ends} ({self.port})"


class LoopGraph:
    """Stages and edges, built with `add` and `connect`; checked as they are added."""

    def __init__(self, name: str):
        self.name = name
        self._stages: dict[str, Stage] = {}
        self._edges: dict[str, Edge] = {}

    def add(self, name: str, does: str, commanding: bool = False, node: bool = True,
            restart: bool = False) -> "LoopGraph":
        if name in self._stages or not name:
            raise PipelineError(f"{self.name}: stage {name!r} is {'empty' if not name else 'already in the graph'}")
        self._stages[name] = Stage(name, does, commanding, node, restart)
        return self

    def connect(self, source: str, port: str, *targets: str, every_cycle: bool = False, does: str = "",
                transport: str = "ros") -> "LoopGraph":
        """``source`` publishes ``port`` to ``targets`` (`OUTSIDE` for an input from outside the graph) over
        ``transport`` (`TRANSPORTS`); an edge to or from a stage that is not a ROS node cannot be a topic."""
        if transport not in TRANSPORTS:
            raise PipelineError(f"{self.name}.connect({port!r}): transport {transport!r}; expected one of {TRANSPORTS}")
        off_ros = [s for s in (source, *targets) if s in self._stages and not self._stages[s].node]
        if transport == "ros" and off_ros:
            raise PipelineError(f"{self.name}.connect({port!r}): {off_ros} is not a ROS node: the edge needs "
                                f"transport='zmq'")
        unknown = [s for s in (source, *targets) if s != OUTSIDE and s not in self._stages]
        if unknown:
            raise PipelineError(f"{self.name}.connect({port!r}): unknown stage(s) {unknown}; "
                                f"stages: {list(self._stages)}")
        if port in self._edges:
            raise PipelineError(f"{self.name}.connect: port {port!r} is already the edge {self._edges[port]}")
        if not targets or OUTSIDE in targets:
            raise PipelineError(f"{self.name}.connect({port!r}): an edge needs at least one stage of the graph "
                                "to reach")
        self._edges[port] = Edge(port, source, tuple(targets), every_cycle, does, transport)
        return self

    # --- reading it ---------------------------------------------------------------------------------------
    @property
    def stages(self) -> tuple[Stage, ...]:
        return tuple(self._stages.values())

    @property
    def edges(self) -> tuple[Edge, ...]:
        return tuple(self._edges.values())

    @property
    def topics(self) -> tuple[Edge, ...]:
        """The edges that are ROS topics."""
        return tuple(e for e in self._edges.values() if e.transport == "ros")

    @property
    def start_order(self) -> tuple[str, ...]:
        """Every ROS node stage, in the order they were added (the robot first: its state starts every cycle)."""
        return tuple(n for n, s in self._stages.items() if s.node)

    def edge(self, port: str) -> Edge:
        try:
            return self._edges[port]
        except KeyError:
            raise PipelineError(f"{self.name}: no edge {port!r}; edges: {list(self._edges)}") from None

    def inputs(self, stage: str) -> tuple[Edge, ...]:
        return tuple(e for e in self._edges.values() if stage in e.targets)

    def outputs(self, stage: str) -> tuple[Edge, ...]:
        return tuple(e for e in self._edges.values() if e.source == stage)

    def command_path(self, start: str) -> tuple[Stage, ...]:
        """The stages a cycle passes through from ``start`` (the robot) back to it, following the ``every_cycle``
        edges: for the robot loop, robot -> perception -> policy -> safety (-> robot)."""
        path, at = [start], start
        while True:
            nxt = [t for e in self.outputs(at) if e.every_cycle for t in e.targets
                   if t not in path and self._reaches(t, start, set(path))]
            if not nxt:
                break
            at = nxt[0]
            path.append(at)
        return tuple(self._stages[s] for s in path)

    def _reaches(self, a: str, b: str, avoid: set[str]) -> bool:
        """Whether ``b`` can be reached from ``a`` on ``every_cycle`` edges without passing ``avoid``."""
        todo, seen = [a], set(avoid) | {a}
        while todo:
            for e in self.outputs(todo.pop()):
                if not e.every_cycle:
                    continue
                if b in e.targets:
                    return True
                new = [t for t in e.targets if t not in seen]
                seen.update(new)
                todo += new
        return False

    def activation_order(self, start: str) -> tuple[str, ...]:
        """The commanding stages, the one nearest the robot first: what guards the robot is active before what
        feeds it (safety, then the policy)."""
        return tuple(s.name for s in reversed(self.command_path(start)) if s.commanding)

    def check_port(self, stage: str, port: str, direction: str) -> Edge:
        """The edge ``port`` when ``stage`` publishes it (``direction`` 'out') or consumes it ('in'), else an error
        naming what the graph gives that stage."""
        e = self._edges.get(port)
        ok = e is not None and (e.source == stage if direction == "out" else stage in e.targets)
        if not ok:
            mine = self.outputs(stage) if direction == "out" else self.inputs(stage)
            verb = "publish" if direction == "out" else "subscribe"
            raise PipelineError(f"{self.name}: stage {stage!r} cannot {verb} {port!r}: the graph gives it "
                                f"{[x.port for x in mine]} (tinker_core.loop.graph)")
        return e

    def describe(self) -> str:
        """One line per edge, for ``--help`` texts and docs."""
        return "\n".join(str(e) for e in self._edges.values())


ROBOT = "sim_robot"
"""The robot stage: the simulated robot, or (``sim:=false``) a real driver outside the graph that publishes the same
edges."""

ROBOT_LOOP = (
    LoopGraph("robot_loop")
    .add(ROBOT, "the arm: measured state, camera, the simulator's task terms; executes the safe command")
    .add("perception", "state (+ image, task terms or goal) -> features (perception.onnx)", restart=True)
    .add("policy", "features -> actor -> action chain -> joint target", commanding=True, restart=True)
    .add("safety", "joint target -> SafetyWrapper -> safe command; watchdog, e-stop, a person's takeover",
         commanding=True)
    .add("experience_bridge", "a cycle's streams -> transitions for the learner; the learner's bundles -> policy",
         restart=True)
    .add("learner", "transitions -> gradient updates -> gated bundles (tinker learner; another process or machine)",
         node=False)
    .connect(ROBOT, "joint_states", "perception", "policy", "safety", every_cycle=True)
    .connect(ROBOT, "image", "perception")
    .connect(ROBOT, "task", "perception", "experience_bridge")
    .connect(OUTSIDE, "goal", ROBOT, "perception",
             does="a person's or a real system's target: the simulated robot moves its reach target there (its task "
                  "terms then carry it); perception takes it where no simulator gives task terms")
    .connect("perception", "features", "policy", "experience_bridge", every_cycle=True)
    .connect("policy", "joint_target", "safety", "experience_bridge", every_cycle=True)
    .connect("policy", "raw_action", "perception", "experience_bridge")
    .connect("policy", "tool_command", ROBOT,
             does="the task's extra actions as sent to the robot (ArmSort's suction), each with its state's stamp")
    .connect("safety", "command", ROBOT, "experience_bridge", "perception", "policy", every_cycle=True,
             does="the safe command; perception and the policy hear it where they compensate latency")
    .connect(OUTSIDE, "intervention", "safety", does="a person's teleop targets")
    .connect("safety", "intervened", "experience_bridge")
    .connect("safety", "estop_state", "experience_bridge")
    .connect("safety", "command_latency", "perception",
             does="the command latency safety measured and now compensates (latency_auto); perception acts on it, "
                  "and the policy on what the features say perception compensated")
    .connect("experience_bridge", "episode_end", ROBOT,
             does="the success sensor saw the task done: that episode ends (the simulated robot resets on it)")
    .connect("experience_bridge", "transitions", "learner", transport="zmq",
             does="each joined cycle as a Transition (TransitionSender -> TransitionReceiver)")
    .connect("learner", "bundles", "experience_bridge", transport="zmq",
             does="each gated bundle, versioned (WeightsPublisher -> WeightsSubscriber)")
)
"""The robot loop, on every runtime."""
