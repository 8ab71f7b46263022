"""The wire format of every topic of the graph, declared once (`TOPICS`), and the conversions to it.

Each topic has one entry: its default name (relative: it follows the namespace), message type, QoS and,
for the `std_msgs` MultiArray topics, the metadata keys it carries. Where the message has a header
(``joint_states``, images, ``goal``) the state's stamp is in the header. The loop's internal vectors
(features, raw action, joint target, safe command, task terms) are MultiArrays: no installed message
package has a stamped float array, and ``forward_position_controller/commands`` must stay the plain
``Float64MultiArray`` ros2_control's forward_command_controller reads. Their per-message facts travel
in ``layout.dim[0].label`` as ``key=value`` pairs joined by ``;`` (e.g. ``stamp_ns=1712...;cycle=42``),
with ``dim[0].size`` the vector length, so ``ros2 topic echo`` and rosbag tools still read a plain vector.
That label encoding lives here and nowhere else (`array_msg`, `read_array`). Keys used across the graph:

- ``stamp_ns``: the robot's JointState stamp this message derives from (latency, cycle joining)
- ``cycle``: the robot's cycle counter
- ``perception_sha256``: sha256 of the perception model that made the features
- ``version``: policy version of the bundle that made an action
- ``status``: the safety status of a safe command (``passed``, ``held``, ``estop`` ...)
- ``intervention``: ``1`` on a safe command made from a person's teleop target (absent otherwise)
- ``episode``: the robot's episode counter; ``terms``: the task terms' layout (``name:size,...``)
- ``latency_compensation``: on features, the command latency (periods) perception compensated them for
"""

from __future__ import annotations

import array
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus
from geometry_msgs.msg import PointStamped
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy)
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray, Header, MultiArrayDimension

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.edges import TASK_FIELDS  # noqa: F401  (the task message's head: part of its wire format)
from tinker_core.loop.edges import (Action, CommandLatency, EpisodeEnd, EstopState, Features, Frame, Goal,
                                   Intervened, RobotState, SafeCommand, TaskReport, task_report)
from tinker_core.loop.latency_compensation import MAX_STEPS

SENSOR_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT,
                        durability=DurabilityPolicy.VOLATILE)
"""State and images: the newest sample is all that matters; a late one is worthless."""
COMMAND_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.VOLATILE)
"""Commands and features: delivered, newest only."""
LATCHED_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
"""Status a late subscriber must still see (e-stop state)."""
DRIVER_STATE_QOS = QoSProfile(depth=10, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                              durability=DurabilityPolicy.VOLATILE)
"""``joint_states`` as a robot driver publishes it (ros2_control's joint_state_broadcaster: reliable, volatile, 10):
default (reliable) subscribers get it, and the loop's best-effort subscribers match it too."""
RECORD_QOS = QoSProfile(depth=50, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.VOLATILE)
"""What the experience bridge listens to: every cycle, a little slack."""
OBSERVER_QOS = QoSProfile(depth=50, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT,
                          durability=DurabilityPolicy.VOLATILE)
"""A watcher of the loop (the live view): no acknowledgements asked of the loop's publishers, a little slack."""


@dataclass(frozen=True)
class Topic:
    """One topic's wire format."""

    name: str
    """default name, relative to the namespace (a node's ``*_topic`` parameter may rename it)"""
    type: type
    qos: QoSProfile
    meta: tuple[str, ...] = ()
    """metadata keys in the MultiArray label (empty: the message's own fields carry everything)"""
    doc: str = ""


TOPICS: dict[str, Topic] = {
    "joint_states": Topic("joint_states", JointState, SENSOR_QOS, (),
                          "the robot's state by joint name (sensor_msgs/JointState; header.stamp: the state's stamp; a "
                          "best-effort subscription takes reliable and best-effort publishers)"),
    "image": Topic("camera/image_raw", Image, SENSOR_QOS, (), "camera frames (sensor_msgs/Image rgb8; header.stamp: "
                   "the stamp of the state it shows)"),
    "task": Topic("task", Float64MultiArray, COMMAND_QOS, ("stamp_ns", "cycle", "episode", "terms"),
                  "the simulated robot's outcome and task terms per state (TASK_FIELDS, then the terms named in 'terms')"),
    "goal": Topic("goal", PointStamped, COMMAND_QOS, (),
                  "a goal position a real system publishes when it changes (geometry_msgs/PointStamped, base frame, m)"),
    "features": Topic("perception/features", Float32MultiArray, COMMAND_QOS,
                      ("stamp_ns", "cycle", "episode", "perception_sha256", "latency_compensation"),
                      "perception's features (Float32MultiArray)"),
    "raw_action": Topic("policy/raw_action", Float64MultiArray, COMMAND_QOS, ("stamp_ns", "cycle", "version"),
                        "the actor's raw action, before the action chain (Float64MultiArray)"),
    "tool_command": Topic("policy/tool_command", Float64MultiArray, COMMAND_QOS, ("stamp_ns", "cycle", "version"),
                          "the task's extra actions as sent to the robot, after the joints' (ArmSort's suction: on > 0),"
                          " for the state stamp_ns; the robot applies it with that state's safe command"),
    "joint_target": Topic("policy/joint_target", Float64MultiArray, COMMAND_QOS, ("stamp_ns", "cycle", "version"),
                          "the policy's joint target, manifest joint order (Float64MultiArray, to safety)"),
    "command": Topic("forward_position_controller/commands", Float64MultiArray, COMMAND_QOS,
                     ("stamp_ns", "cycle", "version", "status", "intervention"),
                     "the safe joint position command, the robot's joint order (forward_command_controller)"),
    "intervention": Topic("intervention", JointState, SENSOR_QOS, (),
                          "a person's teleop joint targets (sensor_msgs/JointState: name = joints, position = targets "
                          "in rad, header.stamp = when sent; the standard joint message every teleop tool and `ros2 "
                          "topic pub` can send; best effort takes reliable and best-effort publishers); a fresh one "
                          "replaces the policy's target through the SafetyWrapper"),
    "intervened": Topic("safety/intervened", Float64MultiArray, COMMAND_QOS, ("stamp_ns", "cycle"),
                        "each cycle served from teleop: the person's joint target, then the measured pose it was "
                        "judged at (2 x joints, the robot's joint order; the experience bridge turns it into the "
                        "learner's action)"),
    "estop_state": Topic("safety/estop_state", DiagnosticStatus, LATCHED_QOS, (),
                         "the latched e-stop state (diagnostic_msgs/DiagnosticStatus, key 'estopped')"),
    "command_latency": Topic("safety/command_latency", DiagnosticStatus, LATCHED_QOS, (),
                             "the command latency the safety node measured and the loop now compensates "
                             "(diagnostic_msgs/DiagnosticStatus, keys 'periods', 'fit', 'runner_up'; latency_auto)"),
    "episode_end": Topic("experience_bridge/episode_end", Header, COMMAND_QOS, (),
                         "the success sensor saw the task done (std_msgs/Header: stamp = the state's, frame_id = its "
                         "episode); the simulated robot resets, a real cell's reset routine may listen"),
}
"""every topic of the graph, by its role"""


def topic_params(**param_roles: str) -> dict:
    """Node parameters naming topics (``features_topic="features"``): default and description from `TOPICS`;
    read-only, as a subscription is made once."""
    from tinker.runtime import Param

    return {k: Param(TOPICS[r].name, TOPICS[r].doc, read_only=True) for k, r in param_roles.items()}


def read_task(msg: Float64MultiArray, where: str = "task") -> TaskReport:
    """Outcome and named terms of a ``task`` message; ValidationError when its layout does not add up."""
    v, meta = read_array(msg, None, where)
    try:
        layout = [(name, int(size)) for name, size in
                  (item.split(":") for item in filter(None, meta.get("terms", "").split(",")))]
        stamp, cycle = int(meta.get("stamp_ns", 0) or 0), int(meta.get("cycle", 0) or 0)
        episode = int(meta.get("episode", 0) or 0)
    except ValueError as e:
        raise ValidationError(f"{where}.meta", "terms 'name:size,...' and integer stamp_ns/cycle/episode",
                              repr(meta)) from e
    return task_report(v, layout, stamp, cycle, episode, where)


def task_msg(stamp_ns: int, cycle: int, episode: int, reward: float, done: bool, success: bool, distance: float,
             terms: Sequence[tuple[str, np.ndarray]]) -> Float64MultiArray:
    """A ``task`` message: TASK_FIELDS, then ``terms`` (name, raw values) in order, their layout in the label."""
    values = np.concatenate([[float(reward), float(done), float(success), float(distance)],
                             *[np.asarray(v, dtype=np.float64).reshape(-1) for _, v in terms]])
    return _task_array(values, stamp_ns, cycle, episode, terms)


def _task_array(values: np.ndarray, stamp_ns: int, cycle: int, episode: object,
                terms: Sequence[tuple[str, np.ndarray]]) -> Float64MultiArray:
    """The ``task`` message of its whole vector; the ``terms`` label is ``name:size,...`` in order."""
    layout = ",".join([f"{n}:{np.size(v)}" for n, v in terms])
    return array_msg(values, {"stamp_ns": stamp_ns, "cycle": cycle, "episode": episode, "terms": layout})


def meta_of(msg) -> dict[str, str]:
    """The label metadata of a MultiArray ({} when it has none)."""
    return decode_meta(msg.layout.dim[0].label) if msg.layout.dim else {}


def state_tags(msg: JointState) -> tuple[int | None, int | None]:
    """The simulator's cycle and episode counters in a JointState's frame_id (``cycle=N;episode=E``); each is
    None where absent (any other driver: a real robot's frame_id names a frame, or nothing)."""
    tags = dict(kv.split("=", 1) for kv in msg.header.frame_id.split(";") if "=" in kv)
    cycle, episode = tags.get("cycle", ""), tags.get("episode", "")
    return (int(cycle) if cycle.isdigit() else None), (int(episode) if episode.isdigit() else None)


def encode_meta(meta: Mapping[str, object]) -> str:
    label = ";".join([f"{k}={v}" for k, v in meta.items()])
    if label.count("=") != len(meta) or label.count(";") != max(len(meta) - 1, 0):  # one check per message
        for k, v in meta.items():
            if any(c in f"{k}{v}" for c in ";="):
                raise ValidationError(f"meta[{k}]", "no ';' or '=' in keys or values", repr(v))
    return label


def decode_meta(label: str) -> dict[str, str]:
    out = {}
    for part in label.split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
    return out


def array_msg(values: np.ndarray, meta: Mapping[str, object] | None = None, double: bool = True):
    """A Float64MultiArray (or Float32 with ``double=False``) whose dim[0] label carries ``meta``."""
    msg = Float64MultiArray() if double else Float32MultiArray()
    v = np.asarray(values, dtype=np.float64 if double else np.float32).reshape(-1)
    msg.layout.dim = [MultiArrayDimension(label=encode_meta(meta or {}), size=int(v.shape[0]), stride=int(v.shape[0]))]
    buf = array.array("d" if double else "f")
    buf.frombytes(v.tobytes())
    msg.data = buf
    return msg


def read_array(msg, n: int | None, where: str) -> tuple[np.ndarray, dict[str, str]]:
    """Vector and metadata of a MultiArray; raises ValidationError on wrong length or non-finite values."""
    v = np.array(msg.data, dtype=np.float64)  # a copy (one memcpy from the array.array): the buffer is not ours
    if n is not None and v.shape[0] != n:
        raise ValidationError(where, f"{n} values", f"{v.shape[0]} values")
    if not np.isfinite(v).all():
        bad = np.flatnonzero(~np.isfinite(v)).tolist()
        raise ValidationError(where, "finite values", f"NaN/inf at index {bad}")
    return v, meta_of(msg)


def stamp_ns(header) -> int:
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


def set_stamp(header, ns: int) -> None:
    header.stamp.sec, header.stamp.nanosec = divmod(int(ns), 1_000_000_000)


class JointMap:
    """Maps a JointState to the order a consumer expects, by joint NAME, never by index.

    The index map is computed once per distinct name list (publishers keep their order), so the
    per-message cost is one fancy-indexing.
    """

    def __init__(self, expected: Sequence[str], where: str = "joint_states"):
        self.expected = list(expected)
        if len(set(self.expected)) != len(self.expected):
            raise ConfigError(f"{where}: duplicate joint names in {self.expected}")
        self.where = where
        self._cache: dict[tuple[str, ...], np.ndarray] = {}

    def mismatch(self, names: Sequence[str]) -> str:
        """'' when ``names`` holds every expected joint, else a message naming missing and extra joints."""
        missing = [n for n in self.expected if n not in names]
        extra = [n for n in names if n not in self.expected]
        if not missing:
            return ""
        return f"{self.where}: missing joints {missing}" + (f"; extra joints {extra}" if extra else "")

    def index(self, names: Sequence[str]) -> np.ndarray:
        key = tuple(names)
        idx = self._cache.get(key)
        if idx is None:
            err = self.mismatch(names)
            if err:
                raise ValidationError(self.where, f"joints {self.expected}", f"joints {list(names)}", err)
            pos = {n: i for i, n in enumerate(names)}
            idx = np.asarray([pos[n] for n in self.expected], dtype=np.intp)
            self._cache[key] = idx
        return idx

    def read(self, msg) -> tuple[np.ndarray, np.ndarray]:
        """(q, qd) in the expected order; velocities default to zeros when absent."""
        idx = self.index(msg.name)
        pos = np.asarray(msg.position, dtype=np.float64)
        if pos.shape[0] != len(msg.name):
            raise ValidationError(f"{self.where}.position", f"{len(msg.name)} values", f"{pos.shape[0]} values")
        vel = np.asarray(msg.velocity, dtype=np.float64)
        q = pos[idx]
        qd = vel[idx] if vel.shape[0] == len(msg.name) else np.zeros_like(q)
        if not (np.isfinite(q).all() and np.isfinite(qd).all()):
            raise ValidationError(f"{self.where}.position", "finite values", "NaN/inf")
        return q, qd


def safety_counters(values: Mapping[str, str]) -> dict[str, object]:
    """The SafetyWrapper's counters from the safety node's /diagnostics values (``interventions.<name>``),
    as numbers; the e-stops per cause (``interventions.estops``, a printed mapping, or one
    ``interventions.estops.<cause>`` key each) as a mapping. Unreadable values count 0."""
    import ast

    out: dict[str, object] = {}
    estops: dict[str, int] = {}
    for k, v in values.items():
        if not k.startswith("interventions."):
            continue
        name = k.split(".", 1)[1]
        if name.startswith("estops"):
            cause = name.partition(".")[2]
            try:
                parsed = ast.literal_eval(v) if isinstance(v, str) else v
            except (ValueError, SyntaxError):
                parsed = 0
            if isinstance(parsed, Mapping):
                estops.update({str(c): int(n) for c, n in parsed.items() if isinstance(n, (int, float))})
            elif isinstance(parsed, (int, float)):
                estops[cause or "any"] = int(parsed)
            continue
        out[name] = int(v) if str(v).lstrip("-").isdigit() else 0
    out["estops"] = estops
    return out


def trajectory_msg(names: Sequence[str], q: np.ndarray, meta: Mapping[str, object], period_s: float):
    """A JointTrajectory for joint_trajectory_controller: one point, ``q``, reached in one period; ``meta`` in
    ``header.frame_id`` (header.stamp 0: start now)."""
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    msg = JointTrajectory(joint_names=list(names))
    msg.header.frame_id = encode_meta(meta)
    pt = JointTrajectoryPoint(positions=np.asarray(q, dtype=np.float64).tolist())
    pt.time_from_start.sec, pt.time_from_start.nanosec = divmod(int(period_s * 1e9), 1_000_000_000)
    msg.points = [pt]
    return msg


def read_trajectory_command(msg, jmap: JointMap | None, where: str) -> SafeCommand:
    """A safe command sent as a JointTrajectory (`trajectory_msg`): the first point by joint name (``jmap`` None:
    in the message's order), the metadata tinker's safety node puts in ``header.frame_id`` (none from another
    sender: stamp and cycle 0)."""
    meta = decode_meta(msg.header.frame_id)
    return SafeCommand(_int(meta, "stamp_ns"), _int(meta, "cycle"), read_trajectory(msg, jmap, where),
                       meta.get("status", ""), meta.get("version", ""), meta.get("intervention") == "1")


def read_trajectory(msg, jmap: JointMap | None, where: str) -> np.ndarray:
    """The first point's positions of a JointTrajectory in ``jmap``'s order (by joint name; None: the message's
    own); raises ValidationError without a point, or with a wrong length or non-finite values."""
    if not msg.points:
        raise ValidationError(f"{where}.points", "at least one point", "none")
    idx = None if jmap is None else jmap.index(msg.joint_names)
    pos = np.asarray(msg.points[0].positions, dtype=np.float64)
    if pos.shape[0] != len(msg.joint_names) or not np.isfinite(pos).all():
        raise ValidationError(f"{where}.points[0].positions", f"{len(msg.joint_names)} finite values",
                              f"{pos.tolist()}")
    return pos if idx is None else pos[idx]


def joint_list(text: str) -> list[str]:
    """Joint names from a comma-separated parameter ('': none)."""
    return [j.strip() for j in str(text).split(",") if j.strip()]


@dataclass(frozen=True)
class CommandOrder:
    """The joint order of a Float64MultiArray safe command (``command_joints``: forward_command_controller's
    ``joints``) against a stage's own joint order; the JointTrajectory names its joints and needs none.

    ``wire``: the joints as the command lists them (empty: the stage's own order, nothing to map); ``to_wire``
    takes a vector in the stage's order to the command's, ``from_wire`` the command's to the stage's."""

    wire: tuple[str, ...] = ()
    to_wire: np.ndarray | None = None
    from_wire: np.ndarray | None = None

    @classmethod
    def of(cls, joints: str, names: Sequence[str], where: str, sends: bool = False) -> "CommandOrder":
        """``joints``: comma-separated names ('': ``names``' own order); ``names``: the stage's joints. A stage that
        ``sends`` the command must list every joint of the command, one that hears it only its own; ConfigError
        naming ``where`` and the joints missing or extra otherwise."""
        wire, own = joint_list(joints), list(names)
        if not wire or wire == own:
            return cls()
        missing, extra = [n for n in own if n not in wire], [n for n in wire if n not in own]
        if len(set(wire)) != len(wire) or missing or (sends and extra):
            dup = sorted({n for n in wire if wire.count(n) > 1})
            raise ConfigError(f"{where}: {wire} is not an order of this stage's joints {own}"
                              + (f"; missing {missing}" if missing else "") + (f"; extra {extra}" if sends and extra
                                                                               else "")
                              + (f"; twice {dup}" if dup else ""))
        pos = {n: i for i, n in enumerate(wire)}
        return cls(tuple(wire), np.asarray([own.index(n) for n in wire], dtype=np.intp) if sends else None,
                   np.asarray([pos[n] for n in own], dtype=np.intp))


def command_type(name: str, where: str) -> type:
    """The message class of the safe command for ``command_type`` ``name`` (`tinker_core.loop.edges.COMMAND_TYPES`);
    ConfigError naming ``where`` for another name."""
    from trajectory_msgs.msg import JointTrajectory

    types = {"float64_array": Float64MultiArray, "joint_trajectory": JointTrajectory}
    if name not in types:
        raise ConfigError(f"{where}: expected one of {list(types)}, got {name!r}")
    return types[name]


def image_msg(img: np.ndarray, stamp: int, cycle: int) -> Image:
    """An rgb8 Image stamped with the state it shows (``cycle=N`` in frame_id)."""
    m = Image()
    set_stamp(m.header, stamp)
    m.header.frame_id = f"cycle={cycle}"
    m.height, m.width = int(img.shape[0]), int(img.shape[1])
    m.encoding = "rgb8"
    m.step = m.width * 3
    m.data = np.ascontiguousarray(img, dtype=np.uint8).tobytes()
    return m


def read_image(msg: Image, where: str) -> np.ndarray:
    """An rgb8 Image as a (height, width, 3) uint8 view; raises ValidationError on another encoding or size."""
    if msg.encoding != "rgb8" or len(msg.data) != msg.height * msg.width * 3:
        raise ValidationError(where, "rgb8 with height*width*3 bytes", f"{msg.encoding} with {len(msg.data)} bytes")
    return np.frombuffer(msg.data, dtype=np.uint8).reshape(msg.height, msg.width, 3)


def estop_msg(node_name: str, reason: str) -> DiagnosticStatus:
    """The safety node's latched e-stop state: ERROR with ``reason`` while latched ('' = clear)."""
    from diagnostic_msgs.msg import KeyValue

    st = DiagnosticStatus(level=DiagnosticStatus.ERROR if reason else DiagnosticStatus.OK, name=f"{node_name}/estop",
                          message=f"e-stop latched: {reason}" if reason else "e-stop clear", hardware_id=node_name)
    st.values = [KeyValue(key="estopped", value=str(bool(reason)).lower())]
    return st


def command_latency_msg(node_name: str, c: CommandLatency) -> DiagnosticStatus:
    """A latency the safety node measured and the loop compensates from now on (``latency_auto``)."""
    from diagnostic_msgs.msg import KeyValue

    st = DiagnosticStatus(level=DiagnosticStatus.OK, name=f"{node_name}/command_latency", hardware_id=node_name,
                          message=f"command latency {c.periods} control periods, compensated")
    st.values = [KeyValue(key="periods", value=str(c.periods)), KeyValue(key="fit", value=f"{c.fit:.4f}"),
                 KeyValue(key="runner_up", value=f"{c.runner_up:.4f}")]
    return st


class Reader:
    """The messages of each edge into stage ``stage`` as the edge values its handlers take
    (`tinker_core.loop.edges`); ValidationError naming the stage's field where a message cannot be one.
    ``joint_names``: the stage's joint order (JointStates are mapped by name); ``base_frame``: the robot's base link
    (its URDF's root), the frame a ``goal`` must be given in ('': any frame is taken as it)."""

    def __init__(self, stage: str, joint_names: Sequence[str] = (), base_frame: str = ""):
        self.stage, self.base_frame = stage, base_frame
        self.set_joints(joint_names)

    def set_joints(self, joint_names: Sequence[str]) -> None:
        """The stage's joint order from now on (a swapped model may name other joints)."""
        self.jmap = JointMap(joint_names, f"{self.stage}.joint_states")
        self.tmap = JointMap(joint_names, f"{self.stage}.intervention")
        self.cmap = JointMap(joint_names, f"{self.stage}.command") if joint_names else None
        self.set_command_joints(getattr(self, "command_joints", ""))

    def set_command_joints(self, joints: str) -> None:
        """The joint order of a Float64MultiArray safe command (``command_joints``; '': the stage's own)."""
        self.command_joints = joints
        names = self.cmap.expected if self.cmap is not None else []
        self.order = CommandOrder.of(joints, names, f"{self.stage}.command_joints") if names else CommandOrder()

    def joint_states(self, msg: JointState) -> RobotState:
        q, qd = self.jmap.read(msg)
        cycle, episode = state_tags(msg)
        return RobotState(stamp_ns(msg.header), q, qd, cycle, episode)

    def intervention(self, msg: JointState) -> RobotState:
        """A person's joint targets (``q``), by joint name."""
        return RobotState(stamp_ns(msg.header), *self.tmap.read(msg))

    def image(self, msg: Image) -> Frame:
        return Frame(stamp_ns(msg.header), read_image(msg, f"{self.stage}.image"))

    def task(self, msg: Float64MultiArray) -> TaskReport:
        return read_task(msg, f"{self.stage}.task")

    def goal(self, msg: PointStamped) -> Goal:
        """A goal in the robot's base frame: ``header.frame_id`` empty, the base link, or it after a prefix ending
        in '/' (a fleet's ``robot1/``); any other frame is refused (nothing here transforms between frames)."""
        frame = msg.header.frame_id
        if self.base_frame and frame and frame != self.base_frame and not frame.endswith("/" + self.base_frame):
            raise ValidationError(f"{self.stage}.goal.header.frame_id", f"the robot's base frame {self.base_frame!r} "
                                  f"(or empty)", repr(frame), "transform the goal into the base frame first")
        p = np.array([msg.point.x, msg.point.y, msg.point.z])
        if not np.isfinite(p).all():
            raise ValidationError(f"{self.stage}.goal.point", "finite x, y, z", f"{p.tolist()}")
        return Goal(stamp_ns(msg.header), p)

    def features(self, msg: Float32MultiArray) -> Features:
        v, meta = read_array(msg, None, f"{self.stage}.features")
        compensated = None
        if "latency_compensation" in meta:
            compensated = _periods(meta["latency_compensation"], f"{self.stage}.features.latency_compensation")
        return Features(_int(meta, "stamp_ns"), _int(meta, "cycle"), meta.get("episode", ""), v,
                        meta.get("perception_sha256", ""), latency_compensation=compensated)

    def command_latency(self, msg: DiagnosticStatus) -> CommandLatency:
        values = {kv.key: kv.value for kv in msg.values}
        where = f"{self.stage}.command_latency"
        try:
            fit, runner_up = float(values.get("fit", 0.0)), float(values.get("runner_up", 0.0))
        except ValueError:
            raise ValidationError(where, "numbers in 'fit' and 'runner_up'", repr(values)) from None
        return CommandLatency(_periods(values.get("periods", ""), f"{where}.periods"), fit, runner_up)

    def raw_action(self, msg: Float64MultiArray) -> Action:
        return self._action(msg, "raw_action")

    def joint_target(self, msg: Float64MultiArray) -> Action:
        return self._action(msg, "joint_target")

    def tool_command(self, msg: Float64MultiArray) -> Action:
        return self._action(msg, "tool_command")

    def command(self, msg: Float64MultiArray) -> SafeCommand:
        """A Float64MultiArray safe command, in the stage's joint order (from ``command_joints``' where set)."""
        n = None if self.order.from_wire is None else len(self.order.wire)
        v, meta = read_array(msg, n, f"{self.stage}.command")
        if self.order.from_wire is not None:
            v = v[self.order.from_wire]
        return SafeCommand(_int(meta, "stamp_ns"), _int(meta, "cycle"), v, meta.get("status", ""),
                           meta.get("version", ""), meta.get("intervention") == "1")

    def trajectory_command(self, msg) -> SafeCommand:
        """A safe command sent as a JointTrajectory (``command_type: joint_trajectory``), in the stage's joint order
        by name (a stage without joints: the message's order)."""
        return read_trajectory_command(msg, self.cmap, f"{self.stage}.command")

    def intervened(self, msg: Float64MultiArray) -> Intervened:
        v, meta = read_array(msg, None, f"{self.stage}.intervened")
        return Intervened(_int(meta, "stamp_ns"), _int(meta, "cycle"), v)

    def episode_end(self, msg: Header) -> EpisodeEnd:
        return EpisodeEnd(stamp_ns(msg), str(msg.frame_id))

    def estop_state(self, msg: DiagnosticStatus) -> EstopState:
        return EstopState(any(kv.key == "estopped" and kv.value == "true" for kv in msg.values),
                          msg.message if msg.level != DiagnosticStatus.OK else "")

    def _action(self, msg, port: str) -> Action:
        return _action_of(*read_array(msg, None, f"{self.stage}.{port}"))

    def unchecked_action(self, msg) -> Action:
        """An action whose values the stage checks itself (safety: a bad target still counts as its cycle's)."""
        return _action_of(np.asarray(msg.data, dtype=np.float64), meta_of(msg))


def _action_of(values: np.ndarray, meta: Mapping[str, str]) -> Action:
    return Action(_int(meta, "stamp_ns"), _int(meta, "cycle"), values, meta.get("version", ""), meta.get("stop") == "1")


def _periods(text: str, where: str) -> int:
    """A latency in control periods, 0..`MAX_STEPS`, as a message gives it; ValidationError naming ``where``."""
    if not text.isdigit() or int(text) > MAX_STEPS:
        raise ValidationError(where, f"a whole number of control periods 0..{MAX_STEPS}", repr(text))
    return int(text)


def _int(meta: Mapping[str, str], key: str) -> int:
    v = meta.get(key, "")
    return int(v) if v.isdigit() else 0


def features_msg(f: Features) -> Float32MultiArray:
    meta = {"stamp_ns": f.stamp_ns, "cycle": f.cycle, "episode": f.episode, "perception_sha256": f.perception_sha256}
    if f.latency_compensation is not None:
        meta["latency_compensation"] = f.latency_compensation
    return array_msg(f.features, meta, double=False)


def action_msg(a: Action) -> Float64MultiArray:
    return array_msg(a.values, {"stamp_ns": a.stamp_ns, "cycle": a.cycle, "version": a.version})


def command_msg(c: SafeCommand, order: CommandOrder | None = None) -> Float64MultiArray:
    """A safe command for forward_command_controller, its joints in ``order`` (None: as ``c`` has them), its metadata
    in the label (`trajectory_msg` for joint_trajectory_controller)."""
    to = None if order is None else order.to_wire
    return array_msg(c.q if to is None else np.asarray(c.q)[to], command_meta(c))


def command_meta(c: SafeCommand) -> dict[str, object]:
    """A safe command's wire metadata; ``intervention=1`` when served from a person's target."""
    meta: dict[str, object] = {"stamp_ns": c.stamp_ns, "cycle": c.cycle, "version": c.version, "status": c.status}
    if c.why:
        meta["why"] = c.why.replace(";", ",").replace("=", ":")
    if c.intervention:
        meta["intervention"] = 1
    return meta


def intervened_msg(i: Intervened) -> Float64MultiArray:
    return array_msg(i.values, {"stamp_ns": i.stamp_ns, "cycle": i.cycle})


def joint_state_msg(names: Sequence[str]):
    """A writer of `RobotState` as a JointState with ``names``; the simulator's counters in ``header.frame_id``
    (``cycle=N;episode=E``: a new episode is a reset, declared)."""
    names = list(names)

    def write(s: RobotState) -> JointState:
        js = JointState(name=names)
        set_stamp(js.header, s.stamp_ns)
        if s.cycle is not None:
            js.header.frame_id = f"cycle={s.cycle};episode={s.episode or 0}"
        js.position = array.array("d", np.ascontiguousarray(s.q, dtype=np.float64).tobytes())
        js.velocity = array.array("d", np.ascontiguousarray(s.qd, dtype=np.float64).tobytes())
        return js
    return write


def task_report_msg(t: TaskReport) -> Float64MultiArray:
    """A `TaskReport` as a ``task`` message (`task_msg`; its vector as it came, where it has one)."""
    if t.vector is None:
        return task_msg(t.stamp_ns, t.cycle, t.episode, t.reward, t.done, t.success, t.distance, list(t.terms.items()))
    return _task_array(t.vector, t.stamp_ns, t.cycle, t.episode, list(t.terms.items()))


def episode_end_msg(e: EpisodeEnd) -> Header:
    h = Header(frame_id=str(e.episode))
    set_stamp(h, e.stamp_ns)
    return h


WRITERS = {"features": features_msg, "joint_target": action_msg, "raw_action": action_msg, "tool_command": action_msg,
           "command": command_msg, "intervened": intervened_msg, "episode_end": episode_end_msg}
"""edge value -> message, for the edges a `tinker.runtime.NodeRuntime.serve`d stage emits"""
