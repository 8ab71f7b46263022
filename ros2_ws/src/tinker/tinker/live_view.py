"""`LiveView`: the loop streamed over the Foxglove WebSocket protocol (``foxglove-sdk``), with standard schemas.

Fed plain values by the ``view`` node (live) or by ``tinker view RUN.mcap`` (a recording), it serves:

=========================  =============================  ===================================================
topic                      schema                         what
=========================  =============================  ===================================================
``/robot_description``     JSON ``{"data": URDF}``        the robot model (also served as an asset, by its
                                                          ``package://``/``file://`` URL, meshes included)
``/tf``                    ``foxglove.FrameTransforms``   each joint's transform (URDF + measured joints)
``/joint_states``          ``foxglove.JointStates``       measured positions and velocities, by joint name
``/command``               ``foxglove.JointStates``       the safe command the robot got, by joint name
``/camera/image``          ``foxglove.RawImage``          the camera (rgb8)
``/tinker/cycle``          JSON (schema below)            per cycle: the SafetyWrapper's outcome and reason,
                                                          latency state -> safe command, policy version,
                                                          reward, episode ends
``/tinker/arm``            JSON                           link origins in the base frame (2D page, plots)
``/tinker/learner``        JSON                           the learner as /diagnostics reports it: policy
                                                          version, bundles, updates, gate results
``/diagnostics``           JSON                           every node's DiagnosticStatus
``/tinker/episodes``,      JSON (`tinker.live_figures`)   the report's figures, live: success per episode
``/tinker/latency_hist``,                                 with policy version, the latency histogram, the
``/tinker/interventions``                                 SafetyWrapper's interventions per episode by kind
=========================  =============================  ===================================================

Each call logs at once (the SDK serialises and sends from its own Rust thread); with no client
subscribed a log costs a channel check. Nothing here touches the control loop.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from tinker.live_figures import LiveFigures
from tinker.robot_model import RobotModel
from tinker.wire import safety_counters

CYCLE_SCHEMA = {
    "type": "object",
    "properties": {
        "cycle": {"type": "integer"}, "episode": {"type": "integer"},
        "status": {"type": "string", "description": "SafetyWrapper outcome: passed, clipped, rate_limited, "
                                                    "held, estopped (no_command: none seen for this state)"},
        "why": {"type": "string", "description": "the SafetyWrapper's reason when it intervened"},
        "intervened": {"type": "integer", "description": "1 when the command was changed or held"},
        "latency_ms": {"type": "number", "description": "robot state stamp -> safe command sent (its DDS publish "
                                                        "time), ms"},
        "policy_version": {"type": "string"}, "reward": {"type": "number"},
        "terminated": {"type": "boolean"}, "truncated": {"type": "boolean"}, "after_end": {"type": "boolean"},
    },
}
LEARNER_KEYS = ("model_version", "bundle", "reloads", "bundles_received", "transitions", "dropped", "updates",
                "gate_passed", "gate_refused", "gate_success_rate", "gate_mean_return", "last_gate", "return_mean")
"""/diagnostics values the learner's progress shows in today (policy, experience_bridge; a learner node's too)."""


def _ts(stamp_ns: int):
    from foxglove.messages import Timestamp

    sec, nsec = divmod(int(stamp_ns), 1_000_000_000)
    return Timestamp(sec=sec, nsec=nsec)


class LiveView:
    """A Foxglove WebSocket server (``port`` 0: any free port; see ``.port``) and its channels."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8765, urdf: str | os.PathLike | None = None,
                 name: str = "tinker", frame_prefix: str = ""):
        """``frame_prefix``: prepended to every frame id on ``/tf`` (a robot of a fleet: ``robot1/``)."""
        import foxglove
        from foxglove.channels import FrameTransformsChannel, JointStatesChannel, RawImageChannel

        self.model = RobotModel(urdf)
        self.frame_prefix = frame_prefix
        self._urdf_dir = self.model.path.parent.resolve()
        self.ctx = foxglove.Context()
        ch = dict(context=self.ctx)
        self.tf = FrameTransformsChannel("/tf", **ch)
        self.joints = JointStatesChannel("/joint_states", **ch)
        self.command_ch = JointStatesChannel("/command", **ch)
        self.image_ch = RawImageChannel("/camera/image", **ch)
        self.cycle_ch = foxglove.Channel("/tinker/cycle", schema=CYCLE_SCHEMA, **ch)
        self.arm = foxglove.Channel("/tinker/arm", schema={"type": "object"}, **ch)
        self.learner = foxglove.Channel("/tinker/learner", schema={"type": "object"}, **ch)
        self.diag = foxglove.Channel("/diagnostics", schema={"type": "object"}, **ch)
        self.robot = foxglove.Channel("/robot_description", schema={"type": "object"}, **ch)
        self.figures = LiveFigures(self.ctx)
        self.server = foxglove.start_server(name=name, host=host, port=port, context=self.ctx,
                                            asset_handler=self._asset)
        self.port = self.server.port
        self.joint_names: list[str] = list(self.model.movable)
        self._learner_state: dict[str, object] = {}
        self._learner_lock = threading.Lock()  # diagnostics (executor) and learner_status (its thread) both update it
        self._last_robot_ns = 0
        self.counts = {"joint_states": 0, "command": 0, "image": 0, "cycle": 0, "diagnostics": 0}

    # --- the robot model -------------------------------------------------------------------------
    def _asset(self, uri: str) -> bytes | None:
        """The URDF and its meshes, by URL, for a Foxglove 3D panel's URDF layer (nothing outside the URDF's folder)."""
        for prefix in ("package://", "file://"):
            if uri.startswith(prefix):
                rel = uri[len(prefix):]
                path = (self._urdf_dir / rel.split("/", 1)[-1]) if prefix == "package://" else Path(rel)
                path = path.resolve()
                if path.is_file() and (path == self.model.path.resolve() or self._urdf_dir in path.parents):
                    return path.read_bytes()
        return None

    def _robot_description(self, now_ns: int) -> None:
        if now_ns - self._last_robot_ns > 2_000_000_000:  # no latching in the protocol: repeated every 2 s
            self._last_robot_ns = now_ns
            self.robot.log({"data": self.model.text, "url": f"file://{self.model.path.resolve()}"}, log_time=now_ns)

    # --- streams -----------------------------------------------------------------------------------
    def joint_state(self, names: Sequence[str], position: Sequence[float], velocity: Sequence[float],
                    stamp_ns: int) -> None:
        from foxglove.messages import FrameTransform, FrameTransforms, JointState, JointStates, Quaternion, Vector3

        ts = _ts(stamp_ns)
        vel = list(velocity) if len(velocity) == len(names) else [0.0] * len(names)
        self.joints.log(JointStates(timestamp=ts, joints=[JointState(name=n, position=float(p), velocity=float(v))
                                                          for n, p, v in zip(names, position, vel)]), log_time=stamp_ns)
        q = dict(zip(names, map(float, position)))
        tfs = self.model.transforms(q)
        self.tf.log(FrameTransforms(transforms=[FrameTransform(
            timestamp=ts, parent_frame_id=self.frame_prefix + t["parent"], child_frame_id=self.frame_prefix + t["child"],
            translation=Vector3(x=float(t["translation"][0]), y=float(t["translation"][1]), z=float(t["translation"][2])),
            rotation=Quaternion(x=float(t["rotation"][0]), y=float(t["rotation"][1]), z=float(t["rotation"][2]),
                                w=float(t["rotation"][3]))) for t in tfs]), log_time=stamp_ns)
        pos = self.model.world_positions(q, tfs)
        self.arm.log({"links": [[round(float(v), 4) for v in pos[ln]] for ln in [self.model.root] +
                                [j.child for j in self.model.joints]],
                      "joints": {n: round(v, 4) for n, v in q.items()}}, log_time=stamp_ns)
        self._robot_description(stamp_ns)
        self.counts["joint_states"] += 1

    def command(self, values: Sequence[float], stamp_ns: int, names: Sequence[str] | None = None) -> None:
        from foxglove.messages import JointState, JointStates

        names = list(names or self.joint_names)
        self.command_ch.log(JointStates(timestamp=_ts(stamp_ns), joints=[
            JointState(name=n, position=float(v)) for n, v in zip(names, values)]), log_time=stamp_ns)
        self.counts["command"] += 1

    def image(self, width: int, height: int, encoding: str, step: int, data: bytes, stamp_ns: int,
              frame_id: str = "camera") -> None:
        from foxglove.messages import RawImage

        self.image_ch.log(RawImage(timestamp=_ts(stamp_ns), frame_id=frame_id, width=int(width), height=int(height),
                                   encoding=encoding, step=int(step), data=bytes(data)), log_time=stamp_ns)
        self.counts["image"] += 1

    def cycle(self, cycle: int, status: str, state_stamp_ns: int, command_ns: int, policy_version: str = "",
              why: str = "", episode: int | None = None, reward: float | None = None, terminated: bool = False,
              truncated: bool = False, after_end: bool = False) -> None:
        """One cycle's outcome: the SafetyWrapper's ``status`` and reason for the state of ``state_stamp_ns``,
        the command's publish time ``command_ns`` (latency = command_ns - state_stamp_ns), and the task's
        reward and episode end where known."""
        status = status or "no_command"  # no safe command for this state reached the view
        latency = round((command_ns - state_stamp_ns) / 1e6, 3) if command_ns and state_stamp_ns else None
        log_time = command_ns or state_stamp_ns or None
        self.cycle_ch.log({
            "cycle": int(cycle), "episode": episode, "status": status, "why": why,
            "intervened": int(status not in ("passed", "no_command")), "latency_ms": latency,
            "policy_version": str(policy_version), "reward": reward, "terminated": bool(terminated),
            "truncated": bool(truncated), "after_end": bool(after_end)}, log_time=log_time)
        self.figures.cycle(latency, str(policy_version), episode, bool(terminated), bool(terminated or truncated),
                           log_time)
        self.counts["cycle"] += 1

    def cycle_record(self, rec: Mapping) -> None:
        """A recorded cycle (`tinker.recording` fields), as `cycle` shows a live one."""
        self.cycle(int(rec["cycle"]), str(rec["safety_status"]), int(rec["state_stamp_ns"]), int(rec["command_recv_ns"]),
                   str(rec["policy_version"]), str(rec.get("safety_why", "")), int(rec["episode"]), float(rec["reward"]),
                   bool(rec["terminated"]), bool(rec["truncated"]), bool(rec.get("after_end", False)))

    def diagnostics(self, statuses: Iterable[tuple[str, int, str, Mapping[str, str]]], stamp_ns: int) -> None:
        """Each node's (name, level, message, values); the learner's share also goes to ``/tinker/learner``."""
        rows = []
        for name, level, message, values in statuses:
            rows.append({"name": name, "level": int(level), "message": message, "values": dict(values)})
            if name.endswith("/safety") and any(k.startswith("interventions.") for k in values):
                self.figures.safety(safety_counters(values), stamp_ns)
            with self._learner_lock:
                for k, v in values.items():
                    if k in LEARNER_KEYS:
                        self._learner_state[f"{name.rsplit('/', 1)[-1]}.{k}"] = v
        self.diag.log({"status": rows}, log_time=stamp_ns)
        with self._learner_lock:
            state = dict(self._learner_state)
        if state:
            self.learner.log(state, log_time=stamp_ns)
        self.counts["diagnostics"] += 1

    def learner_status(self, status: Mapping) -> None:
        """The learner's ``status`` (``tinker learner ctl status``): updates, policy version, the last training
        step's scalars (the curve, over time) and the last gate's result, on ``/tinker/learner``."""
        now = time.time_ns()
        with self._learner_lock:
            self._learner_state.update({
                "learner.updates": status.get("updates"), "learner.version": status.get("version"),
                "learner.paused": status.get("paused"),
                **{f"learner.train.{k}": v for k, v in (status.get("last_train") or {}).items()},
                **{f"learner.gate.{k}": v for k, v in (status.get("last_gate") or {}).items()
                   if isinstance(v, (int, float, str, bool)) or v is None}})
            state = dict(self._learner_state)
        self.learner.log(state, log_time=now)

    def close(self) -> None:
        self.server.stop()


def replay(path: str | os.PathLike, live: LiveView, speed: float = 1.0, stop=None) -> int:
    """Streams a recording (`tinker.recording.RunRecorder`'s file, decoded by ``mcap_ros2``) into ``live`` at
    ``speed`` times its recorded pace (0: as fast as it reads); returns the number of messages sent.
    ``stop``: a `threading.Event` that ends it early."""
    from mcap_ros2.reader import read_ros2_messages

    from tinker.recording import SCHEMA
    from tinker_core.errors import ConfigError

    if not Path(path).is_file():
        raise ConfigError(f"view: recording not found: {path}")
    t0_wall, t0_log, n = time.monotonic(), None, 0
    for m in read_ros2_messages(str(path)):
        if stop is not None and stop.is_set():
            break
        log = int(m.log_time_ns)
        if t0_log is None:
            t0_log = log
        if speed > 0:
            wait = (log - t0_log) / 1e9 / speed - (time.monotonic() - t0_wall)
            if wait > 0:
                if stop is not None and stop.wait(wait):
                    break
                elif stop is None:
                    time.sleep(wait)
        kind, r = m.schema.name, m.ros_msg
        if kind == "sensor_msgs/msg/JointState":
            live.joint_state(list(r.name), list(r.position), list(r.velocity),
                             r.header.stamp.sec * 1_000_000_000 + r.header.stamp.nanosec)
        elif kind == "sensor_msgs/msg/Image":
            live.image(r.width, r.height, r.encoding, r.step, bytes(r.data),
                       r.header.stamp.sec * 1_000_000_000 + r.header.stamp.nanosec)
        elif kind == "diagnostic_msgs/msg/DiagnosticArray":
            live.diagnostics([(s.name, int(s.level[0]) if isinstance(s.level, (bytes, bytearray)) else int(s.level),
                               s.message, {kv.key: kv.value for kv in s.values}) for s in r.status], log)
        elif kind == SCHEMA:
            rec = {f: getattr(r, f) for f in ("cycle", "episode", "state_stamp_ns", "command_recv_ns", "reward",
                                              "terminated", "truncated", "policy_version", "safety_status")}
            rec["safety_why"] = getattr(r, "safety_why", "")
            rec["after_end"] = getattr(r, "after_end", False)
            live.cycle_record(rec)
            if len(r.safe_command):
                live.command(list(r.safe_command), int(r.state_stamp_ns) or log)
        else:
            continue
        n += 1
    return n
