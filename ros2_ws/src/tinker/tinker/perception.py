"""`perception`: joint state + task terms or goal (+ camera image) -> feature vector, with onnxruntime.

An adapter: the cycle is `tinker_core.loop.perception.PerceptionCycle` (which inputs make a cycle, synced task
terms or the newest goal with ``ee_pos`` from forward kinematics of ``urdf``, camera frames and their age,
``image_terms`` and ``hold_estimate``, the observation assembled exactly as the sim env does), the model the
bundle's ``perception.onnx`` (`tinker.bundle_io.open_perception`); topics as declared in `tinker.wire.TOPICS`.
Joints are mapped BY NAME with the manifest's joint names: a robot without them stops this node at start-up
with a message naming the missing and extra joints. Inputs watched for staleness
(`tinker.runtime.NodeRuntime.subscribe`): ``joint_states`` (ERROR when silent), ``task`` (ERROR when
``task_synced``), the camera image (ERROR when the model takes one), ``policy/raw_action`` (WARN), ``goal`` and
each channel (age only). Channels (`tinker.channel_io`, set by `tinker.fleet`): each heard channel's topic feeds
the inbox (`tinker_core.multiagent.channel_edge.ChannelInbox`: checked, refused with a WARN, newest or zeros).
"""

from __future__ import annotations

import time
from functools import partial

import numpy as np
from geometry_msgs.msg import PointStamped
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray

from tinker.bundle_io import open_perception, resolve_bundle
from tinker.channel_io import CHANNEL_QOS, PublisherWatch, declared, read_channel_msg, topic
from tinker.node_params import PERCEPTION_PARAMS
from tinker.runtime import OK, WARN, NodeRuntime, main_for
from tinker.wire import GOAL_TERM, JointMap, array_msg, read_array, read_image, read_task, stamp_ns, state_cycle
from tinker_core.errors import TinkerError, ValidationError
from tinker_core.loop.input_ages import Level, RecentFaults
from tinker_core.multiagent.channel_edge import ChannelInbox


class PerceptionNode(NodeRuntime, Node):
    def __init__(self, **kwargs):
        super().__init__("perception", **kwargs)
        self._init_runtime("perception", PERCEPTION_PARAMS)
        self.refusals, self._checked, self.cycle, self._image_topic = RecentFaults(), False, None, None
        self.agent, _, heard = declared(self)
        self.inbox = ChannelInbox(heard) if heard else None
        if not self.param("bundle"):  # param get shows the bundle that runs
            self.set_parameters([Parameter("bundle", value=str(resolve_bundle("")))])
        self._load(self.param("bundle"))
        self.add_on_set_parameters_callback(self._on_params)
        self.pub = self.advertise("features_topic", "features")
        synced = Level.ERROR if self.param("task_synced") else None
        for param, role, callback, stale in (
                ("image_topic", "image", self._on_image, self._image_level()),
                ("task_topic", "task", self._on_task, synced),
                ("joint_states_topic", "joint_states", self._on_joints, Level.ERROR),
                ("goal_topic", "goal", self._on_goal, None),
                ("raw_action_topic", "raw_action", self._on_action, Level.WARN)):
            self.subscribe(param, role, callback, stale=stale)
        self._image_topic = self.resolve_topic_name(self.param("image_topic"))
        self.channel_watch = None
        if self.inbox is not None:
            for ch in self.inbox.heard:
                self.watch_subscription(Float32MultiArray, topic(ch), partial(self._on_channel, ch.name), CHANNEL_QOS,
                                        stale=None)
            self.channel_watch = PublisherWatch(self, [topic(ch) for ch in self.inbox.heard])
            self.create_timer(1.0, self.channel_watch.check)

    def _image_level(self) -> Level | None:
        """A quiet camera is an ERROR only for a model that takes images."""
        return Level.ERROR if self.cycle.image_key else None

    def _load(self, path: str) -> None:
        from tinker_core.loop.kinematics import ForwardKinematics

        synced = bool(self.param("task_synced"))
        ee_fn = None if synced else ForwardKinematics.from_urdf(self.param("urdf") or None).ee_position
        model, cycle, line = open_perception(path, int(self.param("warmup_iterations")), synced=synced,
                                             sync_frames=float(self.param("camera_rate_hz")) <= 0, ee_fn=ee_fn,
                                             max_frame_age_ns=int(float(self.param("max_frame_age")) * 1e9),
                                             hold_estimate=bool(self.param("hold_estimate")),
                                             channels=self.inbox)
        self.get_logger().info(line)
        if self.cycle is not None:
            cycle.take_inputs(self.cycle)
        self.model, self.cycle, self.sha, self._checked = model, cycle, model.sha256, False
        self.jmap = JointMap(model.manifest.joint_names, "perception.joint_states")
        if self._image_topic is not None:
            self.inputs.set_stale_level(self._image_topic, self._image_level())

    def _on_params(self, params):
        from rcl_interfaces.msg import SetParametersResult

        try:
            for prm in params:
                if prm.name == "bundle":
                    self._load(str(prm.value))  # verified before it replaces the running model
                elif prm.name == "max_frame_age":
                    self.cycle.max_frame_age_ns = int(float(prm.value) * 1e9)
        except TinkerError as e:
            return SetParametersResult(successful=False, reason=str(e))
        return SetParametersResult(successful=True)

    def _refuse(self, err: Exception) -> None:
        self.refusals.note(str(err))
        self.get_logger().warning(f"input refused: {err}", throttle_duration_sec=1.0)

    def _on_joints(self, msg: JointState) -> None:
        if not self._checked:
            err = self.jmap.mismatch(msg.name)
            if err:  # a robot with other joints is fatal: name them, and the runtime stops this node
                self.fatal = f"perception refuses to start: {err}"
                return
            self._checked = True
        try:
            q, qd = self.jmap.read(msg)
        except ValidationError as e:
            return self._refuse(e)
        self._run(lambda: self.cycle.on_state(stamp_ns(msg.header), q, qd, state_cycle(msg)))

    def _on_image(self, msg: Image) -> None:
        try:
            img = read_image(msg, "perception.image")
        except ValidationError as e:
            return self._refuse(e)
        self._run(lambda: self.cycle.on_frame(stamp_ns(msg.header), img))

    def _on_task(self, msg: Float64MultiArray) -> None:
        try:
            t = read_task(msg, "perception.task")
        except ValidationError as e:
            return self._refuse(e)
        self._run(lambda: self.cycle.on_task(t.stamp_ns, t.terms, t.episode))

    def _on_goal(self, msg: PointStamped) -> None:
        goal = np.array([msg.point.x, msg.point.y, msg.point.z])
        self._run(lambda: self.cycle.on_task(stamp_ns(msg.header), {GOAL_TERM: goal}))

    def _on_channel(self, name: str, msg: Float32MultiArray) -> None:
        values, sender = read_channel_msg(msg)
        reason = self.cycle.on_channel(name, values, sender)
        if reason:
            self._refuse(ValidationError(f"perception.channel.{name}", "a message within the channel's spec", reason))

    def _on_action(self, msg: Float64MultiArray) -> None:
        self._run(lambda: self.cycle.on_action(read_array(msg, None, "perception.last_action")[0]))

    def _run(self, step) -> None:
        t_wall, t0 = time.time_ns(), time.perf_counter_ns()
        try:
            out = step()
        except (ValidationError, KeyError) as e:
            return self._refuse(e)
        if out is None:
            return
        self.pub.publish(array_msg(out.features, {"stamp_ns": out.stamp_ns, "cycle": out.cycle, "episode": out.episode,
                                                  "perception_sha256": self.sha}, double=False))
        dur = time.perf_counter_ns() - t0
        self.stats.record(dur)
        self.span(out.cycle, t_wall, dur, since_state_us=(t_wall - out.stamp_ns) // 1000, **out.extra)

    def diagnostic_values(self) -> dict[str, object]:
        w = self.channel_watch
        return {"model_version": self.model.version, "perception_sha256": self.sha,
                "frame_age_ms": f"{self.cycle.frame_age_ns / 1e6:.1f}", "refused_inputs": self.refusals.count,
                "last_error": self.refusals.last,
                **({} if self.inbox is None else self.inbox.values(
                    time.time_ns(), {ch.name: w.counts[topic(ch)] for ch in self.inbox.heard}, w.extra_seen))}

    def diagnostic_level(self):
        """WARN while inputs are being refused (the last within `RecentFaults.memory_s`), OK once they stop."""
        level, message = self.refusals.level()
        if level:
            return WARN, message
        if self.channel_watch is not None and self.channel_watch.crowded:
            return WARN, f"a second publisher on {self.channel_watch.crowded}: {self.channel_watch.last}"
        return OK, "running"


main = main_for(PerceptionNode)

if __name__ == "__main__":
    raise SystemExit(main())
