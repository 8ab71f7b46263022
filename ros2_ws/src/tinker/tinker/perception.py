"""`perception`: joint state + task terms or goal (+ camera image) -> feature vector, with onnxruntime.

An adapter (`tinker.runtime.NodeRuntime.serve`) around `tinker_core.loop.perception_stage.PerceptionStage`: the
cycle (`tinker_core.loop.perception.PerceptionCycle`: which inputs make a cycle, the observation assembled exactly
as the sim env does) and the bundle's ``perception.onnx`` (`tinker.bundle_io.open_perception`); topics as declared
in `tinker.wire.TOPICS`. Joints are mapped BY NAME with the manifest's joint names: a robot without them stops this
node at start-up with a message naming the missing and extra joints. Inputs watched for staleness: ``joint_states``
(ERROR), ``task`` (ERROR when ``task_synced``), the camera image (ERROR when the model takes one),
``policy/raw_action`` (WARN), ``goal`` and each channel (age only). Channels (`tinker.channel_io`, set by
`tinker.fleet`): each heard channel's topic feeds `tinker_core.multiagent.channel_edge.ChannelInbox`.
"""

from __future__ import annotations

import time
from functools import partial

from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import Float32MultiArray

from tinker.bundle_io import open_perception, resolve_bundle
from tinker.channel_io import CHANNEL_QOS, PublisherWatch, declared, read_channel_msg, topic
from tinker.node_params import PERCEPTION_PARAMS
from tinker.runtime import NodeRuntime, main_for
from tinker.wire import Reader
from tinker_core.errors import TinkerError, ValidationError
from tinker_core.loop.input_ages import Level
from tinker_core.loop.kinematics import ForwardKinematics
from tinker_core.loop.perception_stage import PerceptionStage
from tinker_core.multiagent.channel_edge import ChannelInbox

TOPICS = {p: f"{p}_topic" for p in ("image", "task", "joint_states", "goal", "raw_action", "features")}


class PerceptionNode(NodeRuntime, Node):
    def __init__(self, **kwargs):
        super().__init__("perception", **kwargs)
        self._init_runtime("perception", PERCEPTION_PARAMS)
        self.stage, self.reader, self._checked, self.channel_watch = None, None, False, None
        self.agent, _, heard = declared(self)
        self.inbox = ChannelInbox(heard) if heard else None
        if not self.param("bundle"):  # param get shows the bundle that runs
            self.set_parameters([Parameter("bundle", value=str(resolve_bundle("")))])
        self._load(self.param("bundle"))
        self.add_on_set_parameters_callback(self._on_params)
        stale = {"image": self._image_level(), "task": Level.ERROR if self.param("task_synced") else None,
                 "goal": None, "raw_action": Level.WARN}
        self.serve(self.stage, self.reader, TOPICS, stale, read={"joint_states": self._read_state},
                   refuse=(ValidationError, KeyError))  # KeyError: a task term the model needs is missing
        self._image_topic = self.resolve_topic_name(self.param("image_topic"))
        if self.inbox is not None:
            for ch in self.inbox.heard:
                self.watch_subscription(Float32MultiArray, topic(ch), partial(self._on_channel, ch.name), CHANNEL_QOS,
                                        stale=None)
            self.channel_watch = PublisherWatch(self, [topic(ch) for ch in self.inbox.heard])
            self.create_timer(1.0, self.channel_watch.check)

    @property
    def cycle(self):
        """The running model's `PerceptionCycle`."""
        return self.stage.cycle

    def _image_level(self) -> Level | None:
        """A quiet camera is an ERROR only for a model that takes images."""
        return Level.ERROR if self.cycle.image_key else None

    def _load(self, path: str) -> None:
        g = self.param
        ee_fn = None if g("task_synced") else ForwardKinematics.from_urdf(g("urdf") or None).ee_position
        model, cycle, line = open_perception(path, int(g("warmup_iterations")), synced=bool(g("task_synced")),
                                             sync_frames=float(g("camera_rate_hz")) <= 0, ee_fn=ee_fn,
                                             max_frame_age_ns=int(float(g("max_frame_age")) * 1e9),
                                             hold_estimate=bool(g("hold_estimate")), channels=self.inbox)
        self.get_logger().info(line)
        if self.stage is None:
            self.stage = PerceptionStage(cycle, model.sha256)
        else:  # verified before it replaces the running model
            self.stage.swap(cycle, model.sha256)
            self.inputs.set_stale_level(self._image_topic, self._image_level())
        if self.reader is None:
            self.reader = Reader("perception")
        self.reader.set_joints(model.manifest.joint_names)  # the served subscriptions keep this one reader
        self.model, self._checked = model, False

    def _on_params(self, params) -> SetParametersResult:
        try:
            for prm in params:
                if prm.name == "bundle":
                    self._load(str(prm.value))
                elif prm.name == "max_frame_age":
                    self.cycle.max_frame_age_ns = int(float(prm.value) * 1e9)
        except TinkerError as e:
            return SetParametersResult(successful=False, reason=str(e))
        return SetParametersResult(successful=True)

    def _read_state(self, msg):
        if not self._checked:
            err = self.reader.jmap.mismatch(msg.name)
            if err:  # a robot with other joints is fatal: name them, and the runtime stops this node
                self.fatal = f"perception refuses to start: {err}"
                raise ValidationError("perception.joint_states", "the bundle's joints", err)
            self._checked = True
        return self.reader.joint_states(msg)

    def _on_channel(self, name: str, msg: Float32MultiArray) -> None:
        values, sender = read_channel_msg(msg)
        reason = self.cycle.on_channel(name, values, sender)
        if reason:
            self.stage.refuse(ValidationError(f"perception.channel.{name}", "a message within the channel's spec",
                                              reason))
            self.get_logger().warning(f"input refused: {reason}", throttle_duration_sec=1.0)

    def diagnostic_values(self) -> dict[str, object]:
        w = self.channel_watch
        return {"model_version": self.model.version, **self.stage.values(),
                **({} if self.inbox is None else self.inbox.values(
                    time.time_ns(), {ch.name: w.counts[topic(ch)] for ch in self.inbox.heard}, w.extra_seen))}

    def diagnostic_level(self):
        w = self.channel_watch
        crowded = f"a second publisher on {w.crowded}: {w.last}" if w is not None and w.crowded else ""
        return self.stage.level(crowded)


main = main_for(PerceptionNode)

if __name__ == "__main__":
    raise SystemExit(main())
