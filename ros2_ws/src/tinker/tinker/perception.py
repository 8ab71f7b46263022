"""`perception`: camera image + joint state (+ task terms) -> feature vector, with onnxruntime.

Runs the bundle's ``perception.onnx``. JointState is mapped BY NAME with the manifest's joint names;
a JointState that lacks one of them stops this node at start-up (or is refused at run time) with a
message naming the missing and extra joints. Non-joint observation terms come from the robot's
``task`` topic (``ee_pos`` and task terms, named in its meta ``terms``) and ``last_action`` from the
policy's ``policy/raw_action``. The observation is assembled term by term exactly as in sim.

Publishes ``perception/features`` (Float32MultiArray) once per robot cycle; meta
``stamp_ns;cycle;episode;perception_sha256``. A cycle runs on its JointState and the task terms
of the same stamp, never on another state's. Camera frames (``camera_rate_hz``, the same ``/**``
parameter sim_robot reads): > 0, the camera runs at its own rate and each JointState runs at once with
the newest frame; its age (JointState stamp - frame stamp) goes into the trace span (``frame_age_us``,
next to ``since_state_us``: when this stage started after the robot's state, as in policy and safety)
and a frame older than ``max_frame_age`` s is refused (safety holds the cycle). 0: every cycle waits
for the frame of its own stamp (sim_robot renders in line).
"""

from __future__ import annotations

import time

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray

from tinker.bundle_io import ObsAssembler
from tinker.runtime import OK, WARN, NodeRuntime, main_for
from tinker.wire import COMMAND_QOS, SENSOR_QOS, JointMap, array_msg, read_array, stamp_ns
from tinker_core.errors import ConfigError, TinkerError, ValidationError


class PerceptionNode(NodeRuntime, Node):
    def __init__(self, **kwargs):
        super().__init__("perception", **kwargs)
        self._init_runtime("perception")
        p = self.declare_parameter
        p("bundle", "")
        p("image_topic", "camera/image_raw")
        p("joint_states_topic", "joint_states")
        p("task_topic", "task")
        p("raw_action_topic", "policy/raw_action")
        p("features_topic", "perception/features")
        p("startup_timeout", 10.0)
        p("warmup_iterations", 100)
        p("camera_rate_hz", 20.0)
        p("max_frame_age", 0.25)
        g = lambda n: self.get_parameter(n).value  # noqa: E731
        if not g("bundle"):
            raise ConfigError("perception.bundle: no bundle path given (set the 'bundle' parameter)")
        self.rejected = 0
        self.last_error = ""
        self.model = None
        self._load(g("bundle"))
        self.add_on_set_parameters_callback(self._on_params)
        self.pub = self.create_publisher(Float32MultiArray, g("features_topic"), COMMAND_QOS)
        self.create_subscription(Image, g("image_topic"), self._on_image, SENSOR_QOS)
        self.create_subscription(JointState, g("joint_states_topic"), self._on_joints, SENSOR_QOS)
        self.create_subscription(Float64MultiArray, g("task_topic"), self._on_task, COMMAND_QOS)
        self.create_subscription(Float64MultiArray, g("raw_action_topic"), self._on_action, COMMAND_QOS)
        self._js: tuple[int, int, np.ndarray, np.ndarray] | None = None
        self._img: tuple[int, np.ndarray] | None = None
        self._task: dict[str, np.ndarray] = {}
        self._task_stamp = -1
        self._episode = "0"
        self._last_action = np.zeros(self.n_act)
        self._done_stamp = -1
        self._checked_names = False
        self.sync_frames = float(g("camera_rate_hz")) <= 0
        self.max_frame_age_ns = int(float(g("max_frame_age")) * 1e9)
        self.frame_age_ns = 0

    def _load(self, path: str) -> None:
        from deploy.runtime import OnnxPolicy

        model = OnnxPolicy.from_bundle(path, part="perception")
        m = model.manifest
        n_act = sum(t.size for t in m.action_terms) or int(np.prod(m.action_spec.shape))
        asm = ObsAssembler(m, {"joint_pos", "joint_vel", "ee_pos", "last_action",
                               *(t.name for t in m.obs_terms if t.name not in ("joint_pos", "joint_vel", "last_action"))})
        r = model.warmup(int(self.get_parameter("warmup_iterations").value))
        self.get_logger().info(f"perception v{model.version} ({model.sha256[:12]}) p99 {r['p99_us']:.0f} us, "
                               f"max {r['max_us']:.0f} us after warm-up")
        self.model, self.asm, self.n_act = model, asm, n_act
        self.jmap = JointMap(m.joint_names, "perception.joint_states")
        self._needed = {t[0] for t in asm.terms} - {"joint_pos", "joint_vel", "last_action"}
        self.sha = model.sha256
        self._checked_names = False

    def _on_params(self, params):
        from rcl_interfaces.msg import SetParametersResult

        for prm in params:
            if prm.name == "bundle" and self.model is not None:
                try:
                    self._load(str(prm.value))  # verified before it replaces the running model
                except TinkerError as e:
                    return SetParametersResult(successful=False, reason=str(e))
        return SetParametersResult(successful=True)

    # --- inputs ---------------------------------------------------------------------------------
    def _refuse(self, err: Exception) -> None:
        self.rejected += 1
        self.last_error = str(err)
        self.get_logger().warning(f"input refused: {err}", throttle_duration_sec=1.0)

    def _on_joints(self, msg: JointState) -> None:
        if not self._checked_names:
            err = self.jmap.mismatch(msg.name)
            if err:
                # a robot with other joints is fatal: name them, and the runtime stops this node
                self.fatal = f"perception refuses to start: {err}"
                return
            self._checked_names = True
        try:
            q, qd = self.jmap.read(msg)
        except ValidationError as e:
            self._refuse(e)
            return
        cyc = msg.header.frame_id.split("=", 1)[-1]
        self._js = (stamp_ns(msg.header), int(cyc) if cyc.isdigit() else 0, q, qd)
        self._maybe_run()

    def _on_image(self, msg: Image) -> None:
        if msg.encoding != "rgb8" or len(msg.data) != msg.height * msg.width * 3:
            self._refuse(ValidationError("perception.image", "rgb8 with height*width*3 bytes",
                                         f"{msg.encoding} with {len(msg.data)} bytes"))
            return
        img = np.frombuffer(msg.data, dtype=np.uint8).reshape(msg.height, msg.width, 3)
        self._img = (stamp_ns(msg.header), img)
        self._maybe_run()  # a cycle that waited for its (or the first) frame runs now

    def _on_task(self, msg: Float64MultiArray) -> None:
        try:
            v, meta = read_array(msg, None, "perception.task")
            off = 4
            for item in filter(None, meta.get("terms", "").split(",")):
                name, size = item.split(":")
                self._task[name] = v[off: off + int(size)]
                off += int(size)
            self._episode = meta.get("episode", "0")
            self._task_stamp = int(meta.get("stamp_ns", 0) or 0)
        except (ValidationError, ValueError) as e:
            self._refuse(e)
            return
        self._maybe_run()  # a cycle whose JointState came before its task terms runs now

    def _on_action(self, msg: Float64MultiArray) -> None:
        try:
            v, _ = read_array(msg, self.n_act, "perception.last_action")
            self._last_action = np.clip(v, -1.0, 1.0)
        except ValidationError as e:
            self._refuse(e)

    # --- the cycle ----------------------------------------------------------------------------
    def _maybe_run(self) -> None:
        if self._js is None or (self.asm.image_key and self._img is None) or not self._needed <= self._task.keys():
            return  # the first messages of each input are still on their way
        stamp, cycle, q, qd = self._js
        if stamp == self._done_stamp or (self.asm.image_key and self.sync_frames and self._img[0] != stamp):
            return
        if self._needed and self._task_stamp != stamp:
            return  # this state's task terms (target, target - ee) are still on their way: never mix two states
        t_wall, t0 = time.time_ns(), time.perf_counter_ns()
        self._done_stamp = stamp
        extra = {"since_state_us": (t_wall - stamp) // 1000}  # where in the cycle this stage starts
        try:
            if self.asm.image_key:
                self.frame_age_ns = age = stamp - self._img[0]
                extra["frame_age_us"] = age // 1000
                if age > self.max_frame_age_ns:
                    raise ValidationError("perception.image", f"a frame at most {self.max_frame_age_ns / 1e9:g} s "
                                          f"older than the joint state", f"{age / 1e9:.3f} s old")
            sources = {**self._task, "joint_pos": q, "joint_vel": qd, "last_action": self._last_action}
            obs = self.asm.obs(sources, self._img[1] if self._img else None)
            feats = self.model.forward(obs)
            if not np.isfinite(feats).all():
                raise ValidationError("perception.features", "finite values", "NaN/inf from the model")
        except (ValidationError, KeyError) as e:
            self._refuse(e)
            return
        self.pub.publish(array_msg(feats, {"stamp_ns": stamp, "cycle": cycle, "episode": self._episode,
                                           "perception_sha256": self.sha}, double=False))
        dur = time.perf_counter_ns() - t0
        self.stats.record(dur)
        self.span(cycle, t_wall, dur, **extra)

    def diagnostic_values(self) -> dict[str, object]:
        return {"model_version": self.model.version, "perception_sha256": self.sha,
                "frame_age_ms": f"{self.frame_age_ns / 1e6:.1f}",
                "refused_inputs": self.rejected, "last_error": self.last_error}

    def diagnostic_level(self):
        if self.rejected and self.last_error:
            return WARN, f"refused {self.rejected} input(s): {self.last_error}"
        return OK, "running"


main = main_for(PerceptionNode)

if __name__ == "__main__":
    raise SystemExit(main())
