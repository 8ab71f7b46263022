"""MCAP recordings of the loop that standard ROS 2 tools replay, written with mcap / mcap-ros2-support.

A run's file (``profile=ros2``, CDR messages, ``ros2msg`` schemas) holds the graph's standard topics as
the graph published them (`RunRecorder`, fed by the ``view`` node): ``joint_states``
(sensor_msgs/msg/JointState), the command topic (std_msgs/msg/Float64MultiArray or
trajectory_msgs/msg/JointTrajectory), ``camera/image_raw`` (sensor_msgs/msg/Image), ``/diagnostics``
(diagnostic_msgs/msg/DiagnosticArray) and ``/tf`` (tf2_msgs/msg/TFMessage, each joint's transform from
the URDF and the measured joint positions), and beside them one message per robot cycle on
``/tinker/cycle`` (``tinker_msgs/msg/CycleRecord``). Every schema's full definition text is in the file
(no tinker or ROS package is needed to decode it: ``mcap_ros2``, ``rosbags`` and Foxglove read it).

Episode ends: a cycle is ``terminated``/``truncated`` only where its episode ends. A robot that does not
reset after a success (``episode_cycles: 0``) stays at the goal, and the task keeps reporting success;
those later cycles belong to no episode: ``after_end`` is set and they give no transition. The first
cycle after them that no longer reports success starts the next episode (`EpisodeEnds`).

Held cycles are recorded too: their ``raw_action`` is empty and ``safety_status`` says why. This module
does not import rclpy: the reader side runs anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

TOPIC = "/tinker/cycle"
SCHEMA = "tinker_msgs/msg/CycleRecord"
MSGDEF = """\
# One control cycle of the tinker ROS 2 loop.
int64 cycle                 # the robot's cycle counter
int32 episode               # the robot's episode counter
int64 state_stamp_ns        # the JointState stamp this cycle started from (robot clock, ns)
int64 features_recv_ns      # when the policy input was published (view node; the bridge: reached it) (0: never)
int64 action_recv_ns        # when the raw action was published (0: none, cycle held)
int64 command_recv_ns       # when the command after safety was published (0: none)
float32[] policy_input      # the features the actor ran on
float64[] raw_action        # the actor's output before the action chain
float64[] joint_target      # the action chain's output (policy command)
float64[] safe_command      # the command after the SafetyWrapper (what the robot got)
float64 reward              # reward for reaching this cycle's state
bool terminated             # task solved at this state
bool truncated              # episode cut at this state (time limit)
string policy_version
string safety_status        # passed / clipped / rate_limited / held / estop ...
string safety_why           # the SafetyWrapper's reason when it intervened (value, limit, unit)
bool after_end              # the episode ended at an earlier cycle; still at the goal, no reset since
bool intervention           # a person's teleop target was the candidate of this cycle (safety's intervention=1)
float64[] intervention_action  # the raw action that maps to that target (the learner's action; empty: unknown)
"""
FIELDS = ("cycle", "episode", "state_stamp_ns", "features_recv_ns", "action_recv_ns", "command_recv_ns",
          "policy_input", "raw_action", "joint_target", "safe_command", "reward", "terminated", "truncated",
          "policy_version", "safety_status", "safety_why", "after_end", "intervention", "intervention_action")


def empty_record() -> dict:
    """A cycle record with every field at its empty value."""
    return {"cycle": 0, "episode": 0, "state_stamp_ns": 0, "features_recv_ns": 0, "action_recv_ns": 0,
            "command_recv_ns": 0, "policy_input": [], "raw_action": [], "joint_target": [], "safe_command": [],
            "reward": 0.0, "terminated": False, "truncated": False, "policy_version": "", "safety_status": "", "safety_why": "",
            "after_end": False, "intervention": False, "intervention_action": []}


LABEL_TOPIC = "/tinker/episode_label"
LABEL_SCHEMA = "tinker_msgs/msg/EpisodeLabel"
LABEL_MSGDEF = """\
# A person's label on an episode (the experience bridge's ~/label_episode), as the learner got it.
int32 episode               # the robot's episode counter of the labelled episode
int64 cycle                 # the cycle its labelled (last) transition starts from; later cycles gave none
bool success                # the label: success or failure
float64 reward              # the reward that transition got (success: terminal; failure: penalised, bootstrapped)
int64 labelled_ns           # when the label was given (wall clock, ns)
"""
LABEL_FIELDS = ("episode", "cycle", "success", "reward", "labelled_ns")

TF_TOPIC = "/tf"
TF_SCHEMA = "tf2_msgs/msg/TFMessage"
TF_MSGDEF = """\
geometry_msgs/TransformStamped[] transforms
"""
"""tf2_msgs/msg/TFMessage's definition (the tf2_msgs wheel is not on the package index; the text is ROS 2's)."""

MSG_SEPARATOR = "=" * 80


_DEFAULTS = empty_record()


class EpisodeEnds:
    """Marks where episodes end in a stream of cycle records (in cycle order).

    The robot's ``task`` says success for every state at the goal; without a reset the episode still
    ended at the first of them. That cycle keeps ``terminated``; the following cycles of the same robot
    episode that still report the end get ``after_end`` instead (no ``terminated``/``truncated``). The
    first cycle that does not (the arm left the goal) starts the next episode, as a reset does.
    """

    def __init__(self) -> None:
        self._ended: int | None = None

    def mark(self, rec: dict) -> dict:
        """``rec`` with ``terminated``/``truncated``/``after_end`` as the episode's end implies (a copy)."""
        out = dict(rec)
        ends = bool(rec["terminated"] or rec["truncated"])
        if self._ended is not None and int(rec["episode"]) == self._ended:
            if ends:
                out["terminated"] = out["truncated"] = False
                out["after_end"] = True
                return out
            self._ended = None  # the task no longer reports the end: a new episode starts here
        if ends:
            self._ended = int(rec["episode"])
        return out


_BUILTIN = {"bool", "byte", "char", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32",
            "uint32", "int64", "uint64", "string", "wstring"}


def full_msgdef(type_name: str, text: str | None = None, search: list[Path] | None = None) -> str:
    """The complete ros2msg definition of ``pkg/msg/Type`` as rosbag2 writes it into MCAP: the type's
    .msg text, then each nested type's after a ``MSG: pkg/Type`` separator. ``text`` is the type's own
    definition (None: read from the installed ``share/<pkg>/msg/<Type>.msg``, as nested types are)."""
    from tinker_core.errors import ConfigError

    roots = search if search is not None else _share_roots()
    texts: dict[str, str] = {}
    order: list[str] = []

    def read(full: str) -> str:
        pkg, _, name = full.partition("/msg/")
        for root in roots:
            f = root / pkg / "msg" / f"{name}.msg"
            if f.is_file():
                return f.read_text()
        raise ConfigError(f"recording: no definition of {full} under {[str(r) for r in roots]} "
                          f"(is the ROS package {pkg} installed?)")

    def visit(full: str, body: str) -> None:
        texts[full] = body
        pkg = full.partition("/")[0]
        for line in body.splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) < 2 or "=" in words[1]:
                continue  # blank, comment or constant
            base = words[0].split("[", 1)[0].split("<=", 1)[0]
            if base in _BUILTIN:
                continue
            dep = "std_msgs/msg/Header" if base == "Header" else (
                base.replace("/", "/msg/") if "/" in base else f"{pkg}/msg/{base}")
            if dep not in texts:
                order.append(dep)
                visit(dep, read(dep))

    visit(type_name, text if text is not None else read(type_name))
    parts = [texts[type_name].rstrip("\n")]
    parts += [f"{MSG_SEPARATOR}\nMSG: {d.replace('/msg/', '/')}\n{texts[d].rstrip(chr(10))}" for d in order]
    return "\n".join(parts) + "\n"


def _share_roots() -> list[Path]:
    import sys

    roots = []
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            roots.append(Path(prefix) / "share")
    roots.append(Path(sys.prefix) / "share")
    return roots


CHUNK_BYTES = 64 * 1024
"""MCAP chunk size (uncompressed): about what a recorder killed without closing its file (kill -9, power lost)
loses, the chunk it was filling: ~150 cycle records (7.7 s at 20 Hz) in a recording of cycles alone, measured with
26 policy inputs; the mcap library's default, 1 MB, would be two minutes."""


class CycleRecorder:
    """Appends cycle records to an MCAP file; ``close()`` writes the summary (the file is then complete). Until
    then each full chunk goes to the file at once (flushed, not left in this process's buffer), so a recorder that
    dies leaves a file whose complete chunks `read_cycles` still reads."""

    def __init__(self, path: str | os.PathLike, metadata: dict[str, str] | None = None):
        from mcap.writer import CompressionType, Writer

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "wb")
        self._w = Writer(self._f, compression=CompressionType.ZSTD, chunk_size=CHUNK_BYTES)
        self._w.start(profile="ros2", library="tinker")
        self._schemas: dict[str, int] = {}
        self._channels: dict[str, int] = {}
        self._encoders: dict[str, object] = {}
        self._defs: dict[str, str] = {}
        self._seq: dict[str, int] = {}
        if metadata:
            self._w.add_metadata("tinker", {k: str(v) for k, v in metadata.items()})
        self._ends = EpisodeEnds()
        self.count = 0

    # --- channels ------------------------------------------------------------------------------
    def _channel(self, topic: str, type_name: str, msgdef: str | None = None) -> int:
        cid = self._channels.get(topic)
        if cid is None:
            sid = self._schemas.get(type_name)
            if sid is None:
                text = self._defs[type_name] = full_msgdef(type_name, msgdef)
                sid = self._schemas[type_name] = self._w.register_schema(type_name, "ros2msg", text.encode())
            cid = self._channels[topic] = self._w.register_channel(topic, "cdr", sid)
        return cid

    def _add(self, cid: int, topic: str, data: bytes, log_time_ns: int, publish_time_ns: int) -> None:
        seq = self._seq.get(topic, 0)
        self._w.add_message(cid, log_time=log_time_ns, data=data, publish_time=publish_time_ns, sequence=seq)
        self._f.flush()  # a chunk the message completed goes to the file now (nothing to do otherwise)
        self._seq[topic] = seq + 1

    def write_dict(self, topic: str, type_name: str, msgdef: str | None, msg: dict, log_time_ns: int,
                   publish_time_ns: int | None = None) -> None:
        """One message given as a dict, CDR-encoded with mcap_ros2's encoder for the type's definition
        (``msgdef``: the type's own text; None reads it from the installed package)."""
        from mcap_ros2._dynamic import serialize_dynamic

        cid = self._channel(topic, type_name, msgdef)
        enc = self._encoders.get(type_name)
        if enc is None:
            enc = self._encoders[type_name] = serialize_dynamic(type_name, self._defs[type_name])[type_name]
        self._add(cid, topic, enc(msg), log_time_ns, publish_time_ns or log_time_ns)

    def write(self, rec: dict, log_time_ns: int) -> None:
        """One cycle record on ``/tinker/cycle`` (episode ends marked by `EpisodeEnds`)."""
        msg = self._ends.mark(rec)
        msg.setdefault("safety_why", "")
        msg.setdefault("after_end", False)  # (the experience bridge's records have no such field)
        msg.setdefault("intervention", False)
        msg.setdefault("intervention_action", [])
        msg["intervention"] = bool(msg["intervention"])
        for k in ("policy_input", "raw_action", "joint_target", "safe_command", "intervention_action"):
            msg[k] = [float(x) for x in np.asarray(msg[k]).reshape(-1)]
        self.write_dict(TOPIC, SCHEMA, MSGDEF, {f: msg[f] for f in FIELDS}, log_time_ns,
                        int(rec["state_stamp_ns"]) or log_time_ns)
        self.count += 1

    def write_label(self, label, log_time_ns: int) -> None:
        """One episode label (`tinker_core.loop.episode_label.LabelRecord`) on ``/tinker/episode_label``."""
        self.write_dict(LABEL_TOPIC, LABEL_SCHEMA, LABEL_MSGDEF, {f: getattr(label, f) for f in LABEL_FIELDS},
                        log_time_ns)

    def close(self) -> None:
        if self._f is not None:
            self._w.finish()
            self._f.close()
            self._f = None


class RunRecorder(CycleRecorder):
    """A run's recording: the graph's standard topics as published (serialized CDR, as rosbag2 stores
    them), ``/tf`` made here, and the cycle records."""

    def write_raw(self, topic: str, type_name: str, cdr: bytes, log_time_ns: int, publish_time_ns: int = 0) -> None:
        """One message exactly as it came off the wire (``type_name`` like ``sensor_msgs/msg/JointState``)."""
        self._add(self._channel(topic, type_name), topic, cdr, log_time_ns, publish_time_ns or log_time_ns)

    def write_tf(self, transforms: list[dict], stamp_ns: int, log_time_ns: int) -> None:
        """``/tf`` from `tinker.robot_model.RobotModel.transforms` (parent, child, translation, rotation xyzw)."""
        sec, nsec = divmod(int(stamp_ns), 1_000_000_000)
        msg = {"transforms": [{
            "header": {"stamp": {"sec": sec, "nanosec": nsec}, "frame_id": t["parent"]},
            "child_frame_id": t["child"],
            "transform": {"translation": dict(zip("xyz", map(float, t["translation"]))),
                          "rotation": dict(zip("xyzw", map(float, t["rotation"])))}} for t in transforms]}
        self.write_dict(TF_TOPIC, TF_SCHEMA, TF_MSGDEF, msg, log_time_ns, stamp_ns)


class CycleJoin:
    """Joins the loop's per-cycle messages by the robot's state stamp into cycle records (ROS-free).

    The experience bridge's rule: ``task`` opens cycle k; cycle k is final once the task of k+``pending``-1
    is in (k+1's features have then arrived too). Cycles come out in stamp order, whatever order the topics'
    queues were taken in. A message for a cycle already out (a stop, or very late) is dropped, as are
    fragments of a cycle whose task never came (a node's stop, for one).
    """

    def __init__(self, pending: int = 3) -> None:
        """``pending``: cycles held open before the oldest is final (the bridge's 3; a process that may be
        scheduled late, like the view node, keeps more so that a cycle's command still finds it)."""
        self.pending = pending
        self._cycles: dict[int, dict] = {}
        self._done_ns = -1  # the stamp of the last cycle out

    def _rec(self, meta: Mapping[str, str]) -> dict:
        stamp = int(meta.get("stamp_ns", 0) or 0)
        if stamp <= self._done_ns:
            return empty_record()  # too late: that cycle is out already (written to a scratch record)
        rec = self._cycles.get(stamp)
        if rec is None:
            rec = self._cycles[stamp] = empty_record()
            rec["state_stamp_ns"] = stamp
        return rec

    def pending_record(self, stamp: int) -> dict | None:
        """The open cycle of ``stamp`` (None when not open)."""
        return self._cycles.get(stamp)

    def task(self, meta: Mapping[str, str], values) -> list[dict]:
        """The robot's ``task`` message (``[reward, done, success, ...]``); returns the cycles now final."""
        rec = self._rec(meta)
        v = np.asarray(values, dtype=np.float64)
        rec["cycle"], rec["episode"] = int(meta.get("cycle", 0)), int(meta.get("episode", 0))
        if v.shape[0] >= 3:
            rec["reward"] = float(v[0])
            rec["terminated"] = bool(v[2] > 0.5)
            rec["truncated"] = bool(v[1] > 0.5 and v[2] <= 0.5)
        rec["_task"] = True
        out = []
        while len(self._cycles) > self.pending:
            out += self._pop()
        return out

    def features(self, meta: Mapping[str, str], values, recv_ns: int) -> None:
        rec = self._rec(meta)
        rec["policy_input"] = np.asarray(values, dtype=np.float32)
        rec["features_recv_ns"] = recv_ns

    def raw_action(self, meta: Mapping[str, str], values, recv_ns: int) -> None:
        rec = self._rec(meta)
        rec["raw_action"] = np.asarray(values, dtype=np.float64)
        rec["action_recv_ns"] = recv_ns
        rec["policy_version"] = meta.get("version", "")

    def joint_target(self, meta: Mapping[str, str], values) -> None:
        self._rec(meta)["joint_target"] = np.asarray(values, dtype=np.float64)

    def command(self, meta: Mapping[str, str], values, recv_ns: int) -> None:
        rec = self._rec(meta)  # it may come before the cycle's task: queues are taken in turn
        rec["safe_command"] = np.asarray(values, dtype=np.float64)
        rec["command_recv_ns"] = recv_ns
        rec["safety_status"] = meta.get("status", "")
        rec["safety_why"] = meta.get("why", "")
        rec["intervention"] = meta.get("intervention", "") == "1"

    def _pop(self) -> list[dict]:
        stamp = min(self._cycles)
        rec = self._cycles.pop(stamp)
        self._done_ns = stamp
        return [rec] if rec.pop("_task", False) else []

    def flush(self) -> list[dict]:
        """Every pending cycle, in order (at the end of a run)."""
        out = []
        while self._cycles:
            out += self._pop()
        return out


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The ``tinker`` metadata record of a recording (namespace, control period, URDF); {} when absent."""
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        for rec in make_reader(f).iter_metadata():
            if rec.name == "tinker":
                return dict(rec.metadata)
    return {}


def read_messages(path: str | os.PathLike, topic: str) -> Iterator[Any]:
    """The messages of ``topic`` in an MCAP file, in file order, decoded with the standard ``mcap_ros2`` decoder.
    A file whose recorder never closed it (killed, power lost) ends without its summary, and a seeking reader reads
    nothing of it: this reads it from the start, every complete chunk, and warns where it was cut short."""
    import struct
    import warnings

    from mcap.exceptions import McapError
    from mcap.reader import NonSeekingReader
    from mcap_ros2.decoder import DecoderFactory

    n = 0
    with open(path, "rb") as f:
        try:
            reader = NonSeekingReader(f, decoder_factories=[DecoderFactory()])
            for *_, msg in reader.iter_decoded_messages(topics=[topic], log_time_order=False):  # as they come
                n += 1
                yield msg
        except (McapError, struct.error) as e:  # the end: no more bytes for the record (or its length) begun
            warnings.warn(f"{path}: cut short after {n} {topic} messages ({type(e).__name__}: its recorder did not "
                          f"close it); read what its complete chunks hold", stacklevel=2)


def read_cycles(path: str | os.PathLike) -> Iterator[dict]:
    """The cycle records of an MCAP file (one cut short too: `read_messages`)."""
    for r in read_messages(path, TOPIC):
        yield {f: getattr(r, f, d) for f, d in _DEFAULTS.items()}  # older files lack the newer fields


def read_labels(path: str | os.PathLike) -> list:
    """The episode labels of an MCAP file (`tinker_core.loop.episode_label.LabelRecord`; [] when it has none)."""
    from tinker_core.loop.episode_label import LabelRecord

    return [LabelRecord(**{f: getattr(m, f) for f in LABEL_FIELDS}) for m in read_messages(path, LABEL_TOPIC)]
