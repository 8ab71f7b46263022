"""`view`: the graph's observer. It records the run and streams it live, off the control path.

Subscribes (it publishes nothing to the loop, and no loop node waits for it) to the standard topics
``joint_states``, the command topic, ``camera/image_raw``, ``/diagnostics`` and the robot's ``task``;
when recording, also to the stages' outputs inside the cycle (``perception/features``,
``policy/raw_action``, ``policy/joint_target``, reliable), which it joins into cycle records
(`tinker.recording.CycleJoin`). The live view alone reads best effort and adds no reader to the
topics between the stages. Then, as its parameters ask:

- ``record: RUN.mcap``: `tinker.recording.RunRecorder` writes the standard topics as they came off
  the wire (CDR, like ``ros2 bag record``), ``/tf`` from the URDF and each joint state, and the cycle
  records on ``/tinker/cycle``;
- ``serve: true``: `tinker.live_view.LiveView` streams the same over the Foxglove WebSocket protocol
  on ``host:port``, and ``http_port`` (>= 0) serves ``web/view.html``, a page speaking that protocol
  (the arm, a live latency plot, the safety outcome per cycle).

It runs as its own process at ``nice: 10`` without real-time priority (never composed with the loop):
what it costs the loop is one more subscriber per topic, which ``benchmarks/control_loop.py --view``
measures.
"""

from __future__ import annotations

import os
import threading
import time
from functools import partial
from pathlib import Path
from typing import Mapping

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from tinker.recording import CycleJoin, EpisodeEnds, RunRecorder
from tinker.robot_model import with_frame_prefix
from tinker.node_params import COMMAND_JOINTS_PARAMS, COMMAND_TYPE_PARAMS
from tinker.runtime import EXECUTOR_ENV, OK, WARN, NodeRuntime, Param, declare_params, main_for
from tinker.wire import (OBSERVER_QOS, RECORD_QOS, SENSOR_QOS, command_type, decode_meta, joint_list, meta_of,
                         stamp_ns)
from tinker_core.errors import TinkerError

PAGE = Path(__file__).resolve().parent / "web" / "view.html"
"""The browser page: a Foxglove-protocol client drawing the arm and live plots (no network needed)."""


JOIN_PENDING = 12
"""Cycles the recorder's join keeps open (0.6 s at 20 Hz): this process runs at nice 10 and takes each topic's
queue in turn, so a cycle's command can come several cycles after its task on a busy machine."""


def type_name(cls) -> str:
    """``sensor_msgs/msg/JointState`` for the rclpy class ``JointState``."""
    return f"{cls.__module__.split('.')[0]}/msg/{cls.__name__}"


def serve_page(port: int, ws_port: int, host: str = "127.0.0.1"):
    """A daemon HTTP server for `PAGE` on ``port`` (0: any free port); the page connects to ``ws_port``."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    body = PAGE.read_text().replace("__WS_PORT__", str(ws_port)).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet: a node log is not an access log
            pass

    httpd = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=httpd.serve_forever, name="tinker-view-http", daemon=True).start()
    return httpd


VIEW_PARAMS: dict[str, Param] = {
    "record": Param("", "MCAP file to record the run into (empty: no recording)", read_only=True),
    "serve": Param(True, "serve the live view over the Foxglove WebSocket protocol", read_only=True),
    "host": Param("127.0.0.1", "address the live view and the page listen on", read_only=True),
    "port": Param(8765, "Foxglove WebSocket port (0: any free port)", (0, 65535), True),
    "http_port": Param(8766, "port of the browser page (0: any free port, -1: no page)", (-1, 65535), True),
    "urdf": Param("", "robot model for the 3D view and /tf (empty: kuka_iiwa/model.urdf from pybullet_data)",
                  read_only=True),
    "frame_prefix": Param("", "prefix of every frame id this node publishes or records (/tf), e.g. 'robot1/' "
                              "(tinker.fleet sets each robot's); empty: the URDF's link names", read_only=True),
    "learner_control": Param("", "the learner's control endpoint to poll for its curve and gate results (empty: "
                                 "none)", read_only=True),
    "learner_poll_s": Param(2.0, "s between two polls of the learner", (0.1, 3600.0), True),
    **COMMAND_TYPE_PARAMS,
    **COMMAND_JOINTS_PARAMS,
    "joint_states_topic": Param("joint_states", "the robot's state topic", read_only=True),
    "command_topic": Param("forward_position_controller/commands", "the safe command topic", read_only=True),
    "image_topic": Param("camera/image_raw", "the camera topic", read_only=True),
    "task_topic": Param("task", "the simulated robot's per-cycle task topic", read_only=True),
    "features_topic": Param("perception/features", "perception's output topic", read_only=True),
    "raw_action_topic": Param("policy/raw_action", "the policy's raw action topic", read_only=True),
    "joint_target_topic": Param("policy/joint_target", "the policy's joint target topic", read_only=True),
}
"""the view node's parameters (launch/bringup.yaml's ``view`` section sets them); all read at start-up"""


class ViewNode(NodeRuntime, Node):
    def __init__(self, **kwargs):
        super().__init__("view", **kwargs)
        self._init_runtime("view")
        declare_params(self, VIEW_PARAMS)
        g = lambda n: self.get_parameter(n).value  # noqa: E731
        from tinker.robot_model import RobotModel

        cmd_cls = command_type(g("command_type"), "view.command_type")
        self.command_joints = joint_list(g("command_joints"))
        self.model = RobotModel(g("urdf") or None)
        self.frame_prefix = str(g("frame_prefix"))
        self.join = CycleJoin(pending=JOIN_PENDING)
        self._live_ends = EpisodeEnds()
        self.recorder: RunRecorder | None = None
        self.live = None
        self.httpd = None
        self.last_error = ""
        if g("record"):
            self.recorder = RunRecorder(g("record"), {"namespace": self.get_namespace(),
                                                      "control_period": str(self.period),
                                                      "urdf": str(self.model.path)})
        if g("serve"):
            from tinker.live_view import LiveView

            self.live = LiveView(g("host"), int(g("port")), self.model.path, name=f"tinker{self.get_namespace()}",
                                 frame_prefix=g("frame_prefix"))
            if int(g("http_port")) >= 0:
                self.httpd = serve_page(int(g("http_port")), self.live.port, g("host"))
            self.get_logger().info(f"live view: ws://{g('host')}:{self.live.port}"
                                   + (f", page http://{g('host')}:{self.httpd.server_port}/" if self.httpd else ""))
        self._stop = threading.Event()
        if self.live is not None and g("learner_control"):
            threading.Thread(target=self._poll_learner, args=(g("learner_control"), float(g("learner_poll_s"))),
                             name="tinker-view-learner", daemon=True).start()
        # a recording keeps every cycle (reliable, and the stage outputs its records join); the live view alone
        # reads best effort and leaves the stage topics inside the cycle without a reader of its own
        per_cycle = RECORD_QOS if self.recorder is not None else OBSERVER_QOS
        subs = [("joint_states_topic", JointState, SENSOR_QOS, self._on_joints),
                ("image_topic", Image, SENSOR_QOS, self._on_image),
                ("command_topic", cmd_cls, per_cycle, self._on_command),
                ("task_topic", Float64MultiArray, per_cycle, self._on_task),
                ("/diagnostics", DiagnosticArray, 50, self._on_diag)]
        if self.recorder is not None:
            subs += [("features_topic", Float32MultiArray, RECORD_QOS, self._on_features),
                     ("raw_action_topic", Float64MultiArray, RECORD_QOS, self._on_raw),
                     ("joint_target_topic", Float64MultiArray, RECORD_QOS, self._on_target)]
        self._subs = {}
        for key, cls, qos, handler in subs:
            topic = self.resolve_topic_name(g(key) if key.endswith("_topic") else key)
            self._subs[topic] = self.create_subscription(cls, topic, partial(self._on_raw_msg, topic, cls, handler),
                                                         qos, raw=True)

    # --- every message: record as it came, then decode for the join and the live view ----------------
    def _on_raw_msg(self, topic: str, cls, handler, data: bytes, info) -> None:
        """``info``: rclpy's MessageInfo; its ``source_timestamp`` is when the publisher sent the message (the
        writer's wall clock), which stays right however late this background process gets to it."""
        now = time.time_ns()
        sent = int(info.get("source_timestamp") or 0) or now
        if self.recorder is not None:
            self.recorder.write_raw(topic, type_name(cls), data, now, sent)
        try:
            handler(deserialize_message(data, cls), sent)
        except (TinkerError, ValueError, KeyError) as e:  # a malformed message must not stop the recording
            self.last_error = f"{topic}: {e}"

    # handlers get the message and its publish time (ns)
    def _on_joints(self, msg: JointState, now: int) -> None:
        stamp = stamp_ns(msg.header)
        q = dict(zip(msg.name, msg.position))
        if self.recorder is not None:
            self.recorder.write_tf(with_frame_prefix(self.model.transforms(q), self.frame_prefix), stamp, now)
        if self.live is not None:
            self.live.joint_state(list(msg.name), list(msg.position), list(msg.velocity), stamp)

    def _on_image(self, msg: Image, now: int) -> None:
        if self.live is not None:
            self.live.image(msg.width, msg.height, msg.encoding, msg.step, bytes(msg.data), stamp_ns(msg.header))

    def _on_command(self, msg, now: int) -> None:
        if isinstance(msg, JointTrajectory):  # tinker's safety node puts the label's metadata in header.frame_id
            if not msg.points:
                return
            meta, values, names = decode_meta(msg.header.frame_id), list(msg.points[0].positions), list(msg.joint_names)
        else:  # in command_joints' order where set
            meta, values, names = meta_of(msg), list(msg.data), list(self.command_joints) or None
        self.join.command(meta, values, now)
        if self.live is None:
            return
        stamp = int(meta.get("stamp_ns", 0) or 0)
        self.live.command(values, stamp or now, names)
        if meta.get("why") == "shutdown" or not stamp:
            return  # a node's stop, not a cycle's answer
        rec = self.join.pending_record(stamp)
        if rec is None:
            return
        if rec.get("_task"):
            self._live_cycle(rec, meta, now)
        else:  # shown once the cycle's task is in (its reward and episode end)
            rec.setdefault("_live_wait", []).append((meta, now))

    def _live_cycle(self, rec: dict, meta: Mapping[str, str], sent_ns: int) -> None:
        """One safe command's cycle on the live view: the SafetyWrapper's outcome with the task's outcome."""
        ends = self._live_ends.mark(rec)
        self.live.cycle(int(meta.get("cycle", 0) or 0), meta.get("status", ""), int(rec["state_stamp_ns"]), sent_ns,
                        meta.get("version", ""), meta.get("why", ""), ends["episode"], ends["reward"],
                        ends["terminated"], ends["truncated"], ends["after_end"])

    def _on_task(self, msg: Float64MultiArray, now: int) -> None:
        meta = meta_of(msg)
        for rec in self.join.task(meta, msg.data):
            self._cycle(rec, now)
        rec = self.join.pending_record(int(meta.get("stamp_ns", 0) or 0))
        if self.live is not None and rec is not None:
            for cmd_meta, sent in rec.pop("_live_wait", []):
                self._live_cycle(rec, cmd_meta, sent)

    def _on_features(self, msg: Float32MultiArray, now: int) -> None:
        self.join.features(meta_of(msg), msg.data, now)

    def _on_raw(self, msg: Float64MultiArray, now: int) -> None:
        self.join.raw_action(meta_of(msg), msg.data, now)

    def _on_target(self, msg: Float64MultiArray, now: int) -> None:
        self.join.joint_target(meta_of(msg), msg.data)

    def _on_diag(self, msg: DiagnosticArray, now: int) -> None:
        if self.live is not None:
            self.live.diagnostics([(s.name, int.from_bytes(s.level, "little") if isinstance(s.level, bytes) else int(s.level),
                                    s.message, {kv.key: kv.value for kv in s.values}) for s in msg.status],
                                  stamp_ns(msg.header) or now)

    def _cycle(self, rec: dict, now: int) -> None:
        if self.recorder is not None:
            self.recorder.write(rec, now)

    def _poll_learner(self, endpoint: str, period: float) -> None:
        """The learner's training curve and gate results: its ``status`` over the control socket (the one
        ``tinker learner ctl status`` asks), every ``period`` s, in a thread of this background process."""
        from tinker_core.transport import ControlClient

        cli = ControlClient(endpoint, timeout_ms=int(period * 1000))
        try:
            while not self._stop.wait(period):
                try:
                    self.live.learner_status(cli.request({"cmd": "status", "timeout_s": period}))
                except TinkerError as e:  # the learner not up yet, or busy gating: try again next time
                    self.last_error = f"learner status: {e}"
                    cli.close()
                    cli = ControlClient(endpoint, timeout_ms=int(period * 1000))
        finally:
            cli.close()

    # --- runtime hooks ---------------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        vals: dict[str, object] = {"recorded_cycles": self.recorder.count if self.recorder else 0,
                                   "last_error": self.last_error}
        if self.live is not None:
            vals.update({"ws_port": self.live.port, **{f"streamed.{k}": v for k, v in self.live.counts.items()}})
        return vals

    def diagnostic_level(self):
        if self.last_error:
            return WARN, self.last_error
        return OK, "observing"

    def on_exit(self) -> None:
        now = time.time_ns()
        for rec in self.join.flush():
            self._cycle(rec, now)

    def close_runtime(self) -> None:
        self._stop.set()
        super().close_runtime()
        if self.recorder is not None:
            self.recorder.close()
        if self.live is not None:
            self.live.close()
        if self.httpd is not None:
            self.httpd.shutdown()


def main(args: list[str] | None = None) -> int:
    """Runs the view node until SIGINT/SIGTERM, on the SingleThreadedExecutor: rclpy's EventsExecutor cannot
    hand a callback its MessageInfo (the publish times), and this process is off the loop's path anyway."""
    os.environ[EXECUTOR_ENV] = "single"
    return main_for(ViewNode)(args)


if __name__ == "__main__":
    raise SystemExit(main())
