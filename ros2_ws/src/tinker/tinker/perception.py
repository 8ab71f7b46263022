"""`perception`: joint state + task terms or goal (+ camera image) -> feature vector, with onnxruntime.

An adapter around `tinker_core.loop.perception_stage.PerceptionStage` (the cycle: `PerceptionCycle`, the observation
assembled exactly as the sim env does) and the bundle's ``perception.onnx`` (`tinker.bundle_io.open_perception`).
Joints are mapped by name: a robot without the manifest's joints stops this node at start-up, naming them. Heard
channels (`tinker.channel_io.ChannelListener`) feed the cycle's inbox. Topics: `tinker.wire.TOPICS`.
"""

from __future__ import annotations

from rclpy.node import Node
from rclpy.parameter import Parameter

from tinker.bundle_io import open_perception, resolve_bundle
from tinker.channel_io import ChannelListener, declared
from tinker.node_params import PERCEPTION_PARAMS
from tinker.robot_model import RobotModel
from tinker.runtime import NodeRuntime, main_for
from tinker.wire import Reader
from tinker_core.errors import ValidationError
from tinker_core.loop.input_ages import Level
from tinker_core.loop.kinematics import ForwardKinematics
from tinker_core.loop.perception_stage import PerceptionStage
from tinker_core.multiagent.channel_edge import ChannelInbox

TOPICS = {**{p: f"{p}_topic" for p in ("image", "task", "joint_states", "goal", "raw_action", "features")},
          "command": "safe_command_topic", "command_latency": "command_latency_topic"}


class PerceptionNode(NodeRuntime, Node):
    def __init__(self, **kwargs):
        super().__init__("perception", **kwargs)
        self._init_runtime("perception", PERCEPTION_PARAMS)
        self.stage, self.reader, self._checked, self.channels = None, None, False, None
        self.agent, _, heard = declared(self)
        self.inbox = ChannelInbox(heard) if heard else None
        if not self.param("bundle"):  # param get shows the bundle that runs
            self.set_parameters([Parameter("bundle", value=str(resolve_bundle("")))])
        self._load(self.param("bundle"))
        self.on_param_set(self._set_param)
        stale = {"image": self._image_level(), "task": Level.ERROR if self.param("task_synced") else None,
                 "goal": None, "raw_action": Level.WARN, "command": Level.WARN, "command_latency": None}
        self.serve(self.stage, self.reader, TOPICS, stale, read={"joint_states": self._read_state},
                   refuse=(ValidationError, KeyError))  # KeyError: a task term the model needs is missing
        self._image_topic = self.resolve_topic_name(self.param("image_topic"))
        if self.inbox is not None:
            self.channels = ChannelListener(self, self.inbox, self._on_channel)

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
                                             estimate=str(g("estimate")), channels=self.inbox,
                                             deadband_m=float(g("calibration_deadband")),
                                             latency_compensation=int(g("latency_compensation")),
                                             latency_auto=bool(g("latency_auto")),
                                             urdf=g("urdf") or None)
        self.get_logger().info(line)
        if self.stage is None:
            self.stage = PerceptionStage(cycle, model.sha256)
        else:  # verified before it replaces the running model
            self.stage.swap(cycle, model.sha256)
            self.inputs.set_stale_level(self._image_topic, self._image_level())
        if self.reader is None:
            self.reader = Reader("perception", base_frame=RobotModel(g("urdf") or None).root)
        self.reader.set_joints(model.manifest.joint_names)  # the served subscriptions keep this one reader
        self.reader.set_command_joints(self.param("command_joints"))
        self.model, self._checked = model, False

    def _set_param(self, name: str, value) -> str:
        """``bundle``: the new model, verified before it replaces the running one (a TinkerError refuses it);
        ``max_frame_age`` and ``calibration_deadband`` apply from the next cycle."""
        if name == "bundle":
            self._load(str(value))
        elif name == "max_frame_age":
            self.cycle.max_frame_age_ns = int(float(value) * 1e9)
        elif name == "calibration_deadband" and hasattr(self.cycle.hold, "deadband_m"):  # a calibrating hold
            self.cycle.hold.deadband_m = float(value)  # from the next cycle; the range is the descriptor's
        return ""

    def _read_state(self, msg):
        if not self._checked:
            err = self.reader.jmap.mismatch(msg.name)
            if err:  # a robot with other joints is fatal: name them, and the runtime stops this node
                self.fatal = f"perception refuses to start: {err}"
                raise ValidationError("perception.joint_states", "the bundle's joints", err)
            self._checked = True
        return self.reader.joint_states(msg)

    def _on_channel(self, name: str, values, sender: str | None) -> None:
        reason = self.cycle.on_channel(name, values, sender)
        if reason:
            self.stage.refuse(ValidationError(f"perception.channel.{name}", "a message within the channel's spec",
                                              reason))
            self.get_logger().warning(f"input refused: {reason}", throttle_duration_sec=1.0)

    def diagnostic_values(self) -> dict[str, object]:
        return {"model_version": self.model.version, **self.stage.values(),
                **({} if self.channels is None else self.channels.values())}

    def diagnostic_level(self):
        return self.stage.level(self.second_publisher("command_latency", "the safety node")
                                or ("" if self.channels is None else self.channels.crowded()))


main = main_for(PerceptionNode)

if __name__ == "__main__":
    raise SystemExit(main())
