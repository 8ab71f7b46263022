"""`experience_bridge`: the live loop's transitions to the learner, the learner's bundles to the policy.

An adapter: the five streams of a cycle (``task``, features, raw action, joint target, safe command; as
declared in `tinker.wire.TOPICS`) go into `tinker_core.loop.cycle_join.CycleJoiner`, which joins them by
the robot's state stamp into cycles and transitions (the rule ``tinker replay import`` uses too); each
transition goes to the learner with `tinker_core.transport.TransitionSender` (drop-on-full, never
blocks), each closed cycle to the MCAP recording (``record``). New bundles from the learner
(`WeightsSubscriber`) are written atomically (`tinker.bundle_io.write_bundle`) and handed to the policy
node by setting its ``bundle`` parameter (perception first when its model changed).
Rewards come from ``reward_source`` (`tinker.reward_source`): ``sim``, the ``task`` topic's reward and success
(the simulator's true target); ``sensors``, the success sensor of `tinker_core.loop.sensor_reward` on each state's
features (the camera's target, forward kinematics of the measured joints), the ``task`` topic giving only cycle
and episode counters.
The five streams are watched inputs (`tinker.runtime.NodeRuntime.subscribe`): one silent longer than
``input_timeout`` is ERROR in /diagnostics (no cycle can close without it); the e-stop state is latched
and published on change (its age only).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import Float32MultiArray, Float64MultiArray

from tinker.bundle_io import write_bundle
from tinker.runtime import OK, WARN, NodeRuntime, Param, main_for
from tinker.wire import RECORD_QOS, meta_of, read_task, topic_params
from tinker_core.errors import ConfigError, TinkerError, ValidationError
from tinker_core.loop.cycle_join import CycleJoiner
from tinker_core.loop.input_ages import RecentFaults

PARAMS = {
    "learner_endpoint": Param("", "ZeroMQ PUSH endpoint of the learner, e.g. tcp://127.0.0.1:5555 (empty: none)", read_only=True),
    "weights_endpoint": Param("", "ZeroMQ SUB endpoint for new bundles, e.g. tcp://127.0.0.1:5556 (empty: none)", read_only=True),
    "bundle_dir": Param("", "where received bundles are written (empty: a temp dir)", read_only=True),
    "record": Param("", "RUN.mcap: record every cycle (empty: off)", read_only=True),
    "policy_node": Param("policy", "the policy node to hand bundles to (relative to the namespace)", read_only=True),
    "perception_node": Param("perception", "the perception node to hand a new perception model to", read_only=True),
    "reward_source": Param("sim", "where the transitions' reward and episode end come from: 'sim' = the simulated "
                                  "robot's task topic (its true target: an oracle); 'sensors' = the success sensor on "
                                  "each state's features (target found by the camera, FK of the measured joints), the "
                                  "task topic giving only cycle/episode counters", read_only=True),
    "sensor_bundle": Param("", "reward_source 'sensors': the bundle whose features the sensor reads (its obs_terms; "
                               "target_pos must be one of its image_terms)", read_only=True),
    "sensor_env": Param("tinker/ArmReach-v0", "reward_source 'sensors': the env whose task gives the success rule "
                                              "(success distance, bonus) and the time limit", read_only=True),
    "urdf": Param("", "reward_source 'sensors': robot model for forward kinematics (empty: the KUKA iiwa)", read_only=True),
    **topic_params(task_topic="task", features_topic="features", raw_action_topic="raw_action",
                   joint_target_topic="joint_target", command_topic="command", estop_state_topic="estop_state"),
}


def _stamp(msg) -> int:
    v = meta_of(msg).get("stamp_ns", "")
    return int(v) if v.isdigit() else 0


class ExperienceBridgeNode(NodeRuntime, Node):
    def __init__(self, **kwargs):
        super().__init__("experience_bridge", **kwargs)
        self._init_runtime("experience_bridge", PARAMS)
        g = self.param
        self.join = CycleJoiner(info={"namespace": self.get_namespace(), "source": "real"})
        self.sender = self.weights = self.recorder = self.deployed_version = None
        self.transitions = self.bundles_received = 0
        self.last_error, self.estopped = "", False
        self.drops, self._dropped_seen = RecentFaults(), 0  # WARN while transitions are being dropped
        self.sensed = self._reward_source(g("reward_source"))
        if g("learner_endpoint"):
            from tinker_core.transport import TransitionSender

            self.sender = TransitionSender(g("learner_endpoint"), hwm=1000)
        if g("weights_endpoint"):
            from rclpy.parameter_client import AsyncParameterClient
            from tinker_core.transport import WeightsSubscriber

            self.weights = WeightsSubscriber(g("weights_endpoint"))
            self.bundle_dir = Path(g("bundle_dir") or tempfile.mkdtemp(prefix="tinker-bundles-"))
            self.bundle_dir.mkdir(parents=True, exist_ok=True)
            ns = self.get_namespace().rstrip("/")
            self._param_clients = {n: AsyncParameterClient(self, f"{ns}/{g(n + '_node')}") for n in ("policy", "perception")}
            self.create_timer(0.1, self._poll_weights)
        if g("record"):
            from tinker.recording import CycleRecorder

            self.recorder = CycleRecorder(g("record"), {"namespace": self.get_namespace(), "control_period": str(self.period)})
        for role, callback in (("task", self._on_task), ("features", self._on_features), ("raw_action", self._on_raw),
                               ("joint_target", self._on_target), ("command", self._on_command)):
            self.subscribe(f"{role}_topic", role, callback, RECORD_QOS)
        self.subscribe("estop_state_topic", "estop_state", self._on_estop, stale=None)

    def _reward_source(self, source: str):
        """None for the simulator's rewards; the success sensor (`tinker.reward_source`) for 'sensors'."""
        from tinker.reward_source import SOURCES, sensor_outcome

        if source not in SOURCES:
            raise ConfigError(f"experience_bridge.reward_source: expected one of {list(SOURCES)}, got {source!r}")
        if source == "sim":
            return None
        self.join.info["reward_source"] = "sensors"
        return sensor_outcome(self.param("sensor_bundle"), self.param("sensor_env"), self.param("urdf"))

    def _sensed(self, o) -> None:
        if o is not None:
            self._emit(self.join.outcome(o.stamp, o.cycle, o.episode, o.reward, o.terminated, o.truncated))

    # --- message conversion: each stream into the joiner -----------------------------------------
    def _on_features(self, msg: Float32MultiArray) -> None:
        values = np.asarray(msg.data, dtype=np.float32)
        self.join.features(_stamp(msg), values, time.time_ns())
        if self.sensed is not None:
            self._sensed(self.sensed.features(_stamp(msg), values))

    def _on_raw(self, msg: Float64MultiArray) -> None:
        self.join.action(_stamp(msg), np.asarray(msg.data), meta_of(msg).get("version", ""), time.time_ns())

    def _on_target(self, msg: Float64MultiArray) -> None:
        self.join.target(_stamp(msg), np.asarray(msg.data))

    def _on_command(self, msg: Float64MultiArray) -> None:
        self.join.command(_stamp(msg), np.asarray(msg.data), meta_of(msg).get("status", ""), time.time_ns())

    def _on_task(self, msg: Float64MultiArray) -> None:
        try:
            t = read_task(msg, "experience_bridge.task")
        except ValidationError as e:
            self.last_error = str(e)
            return
        if self.sensed is not None:  # the simulator's reward and success never reach the learner: counters only
            return self._sensed(self.sensed.counters(t.stamp_ns, t.cycle, int(t.episode)))
        self._emit(self.join.outcome(t.stamp_ns, t.cycle, int(t.episode), t.reward, terminated=t.success,
                                     truncated=t.done and not t.success))

    def _on_estop(self, msg: DiagnosticStatus) -> None:
        self.estopped = any(kv.key == "estopped" and kv.value == "true" for kv in msg.values)

    def _emit(self, closed) -> None:
        for c in closed:
            if self.recorder is not None:
                self.recorder.write(c.record, time.time_ns())
            if self.sender is not None and c.transition is not None:
                try:
                    self.sender.send(c.transition)
                    self.transitions += 1
                except TinkerError as e:
                    self.last_error = str(e)

    def _poll_weights(self) -> None:
        got = self.weights.poll(0)
        if got is None or got[0] == self.deployed_version:
            return  # nothing new, or a repeat of what the policy already has
        version, blobs, meta = got
        try:
            path = write_bundle(self.bundle_dir, version, blobs)
        except (OSError, TinkerError) as e:
            self.last_error = f"bundle v{version} not written: {e}"
            return self.get_logger().error(self.last_error)
        self.bundles_received, self.deployed_version = self.bundles_received + 1, version
        self.deploy(str(path), perception_changed=bool(meta.get("perception_changed", False)))

    def deploy(self, path: str, perception_changed: bool = False) -> None:
        """Hands bundle ``path`` to the nodes (perception first when its model changed)."""
        for node in ("perception", "policy") if perception_changed else ("policy",):
            self._param_clients[node].set_parameters([Parameter("bundle", value=path)])
        self.get_logger().info(f"handed bundle {path} to the policy node")

    def diagnostic_values(self) -> dict[str, object]:
        s = self.sender
        return {"transitions": self.transitions, "sent": s.sent if s else 0, "dropped": s.dropped if s else 0,
                "bundles_received": self.bundles_received, "incomplete_cycles": self.join.incomplete,
                "recorded_cycles": self.recorder.count if self.recorder else 0,
                "estopped": self.estopped, "last_error": self.last_error,
                "reward_source": "sensors" if self.sensed is not None else "sim",
                **({"sensor": self.sensed.sensor.config.name, "sensor_successes": self.sensed.successes}
                   if self.sensed is not None else {})}

    def diagnostic_level(self):
        dropped = self.sender.dropped if self.sender is not None else 0
        if dropped > self._dropped_seen:
            self.drops.note(f"{dropped} transition(s) dropped in all")
            self._dropped_seen = dropped
        if self.drops.level()[0]:  # recently: OK again once the learner keeps up
            return WARN, f"dropping transitions ({dropped} in all): learner away or slow"
        return OK, "bridging"

    def on_exit(self) -> None:
        self._emit(self.join.flush())

    def close_runtime(self) -> None:
        super().close_runtime()
        for part in (self.recorder, self.weights):
            if part is not None:
                part.close()
        if self.sender is not None:
            self.sender.close(linger_ms=200)


main = main_for(ExperienceBridgeNode)

if __name__ == "__main__":
    raise SystemExit(main())
