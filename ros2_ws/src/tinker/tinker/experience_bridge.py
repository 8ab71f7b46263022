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

A person in the loop (`docs/sim2real/human_in_the_loop.md`): each cycle the safety node served from a teleop target comes on
``safety/intervened`` (target and measured pose); its transition's action becomes the raw action that maps to that
target through the running bundle's action chain (`tinker_core.action_chain.ActionChain.invert`; the chain is the
one of the policy node's ``bundle``, asked every few seconds, or of the bundle this bridge last handed over), with
``info["intervention"] = True``. The service ``~/label_episode`` (std_srvs/SetBool: true = success) labels an
episode through `tinker_core.loop.episode_label.EpisodeLabels` (the episode that ended within ``label_window``,
else the running one); each episode's newest transition waits there so none goes out twice.
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
from std_srvs.srv import SetBool

from tinker.bundle_io import write_bundle
from tinker.runtime import OK, WARN, NodeRuntime, Param, main_for
from tinker.wire import RECORD_QOS, meta_of, read_array, read_task, topic_params
from tinker_core.errors import ConfigError, TinkerError, ValidationError
from tinker_core.loop.cycle_join import CycleJoiner
from tinker_core.loop.episode_label import EpisodeLabels, LabelRecord
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
    **topic_params(task_topic="task", features_topic="features", raw_action_topic="raw_action",
                   joint_target_topic="joint_target", command_topic="command", estop_state_topic="estop_state",
                   intervened_topic="intervened"),
    "urdf": Param("", "robot model: forward kinematics for reward_source 'sensors', joint limits of the action chain a "
                      "person's target is inverted through (empty: the KUKA iiwa, kuka_iiwa/model.urdf)", read_only=True),
    "label_window": Param(3.0, "s: a label_episode call applies to the episode that ended within this time, else to "
                               "the running one; each episode's last transition waits this long for a label",
                          (0.0, 60.0)),
    "label_success_reward": Param(1.0, "reward of an episode's last transition labelled success", (-1e3, 1e3)),
    "label_failure_reward": Param(-1.0, "penalty (<= 0) added to the reward of an episode's last transition "
                                  "labelled failure; that transition stays bootstrapped", (-1e3, 0.0)),
}
LABEL_PARAMS = ("label_window", "label_success_reward", "label_failure_reward")


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
        self.labels = EpisodeLabels(*(g(n) for n in LABEL_PARAMS))
        self.add_post_set_parameters_callback(lambda _: self.labels.configure(*(self.param(n) for n in LABEL_PARAMS)))
        self.chain, self.chain_bundle, self.interventions, self._ticks = None, "", 0, 0
        self.intervention_transitions = 0
        if g("learner_endpoint"):
            from tinker_core.transport import TransitionSender

            self.sender = TransitionSender(g("learner_endpoint"), hwm=1000)
        if g("weights_endpoint"):
            from tinker_core.transport import WeightsSubscriber

            self.weights = WeightsSubscriber(g("weights_endpoint"))
            self.bundle_dir = Path(g("bundle_dir") or tempfile.mkdtemp(prefix="tinker-bundles-"))
            self.bundle_dir.mkdir(parents=True, exist_ok=True)
            self.create_timer(0.1, self._poll_weights)
        from rclpy.parameter_client import AsyncParameterClient  # hands bundles over; reads the policy's bundle

        ns = self.get_namespace().rstrip("/")
        self._param_clients = {n: AsyncParameterClient(self, f"{ns}/{g(n + '_node')}") for n in ("policy", "perception")}
        if g("record"):
            from tinker.recording import CycleRecorder

            self.recorder = CycleRecorder(g("record"), {"namespace": self.get_namespace(), "control_period": str(self.period)})
        for role, callback in (("task", self._on_task), ("features", self._on_features), ("raw_action", self._on_raw),
                               ("joint_target", self._on_target), ("command", self._on_command)):
            self.subscribe(f"{role}_topic", role, callback, RECORD_QOS)
        self.subscribe("estop_state_topic", "estop_state", self._on_estop, stale=None)
        self.subscribe("intervened_topic", "intervened", self._on_intervened, RECORD_QOS, stale=None)
        self.create_service(SetBool, "~/label_episode", self._on_label)
        self.create_timer(0.2, self._tick)

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
        meta = meta_of(msg)
        self.join.command(_stamp(msg), np.asarray(msg.data), meta.get("status", ""), time.time_ns())
        if meta.get("intervention") == "1":  # flagged even should its target never come (no transition then)
            self.join.intervention(_stamp(msg))

    # --- a person in the loop --------------------------------------------------------------------
    def _on_intervened(self, msg: Float64MultiArray) -> None:
        try:
            v, meta = read_array(msg, None, "experience_bridge.intervened")
            if self.chain is None:
                raise ValidationError("experience_bridge.intervened", "the running bundle's action chain",
                                      "none known yet (the policy node's bundle parameter not read)")
            n = v.shape[0] // 2
            self.join.intervention(_stamp(msg), self.chain.invert(v[:n], v[n:]))
            self.interventions += 1
        except TinkerError as e:
            self.last_error = str(e)

    def _on_label(self, request, response):
        done, released = self.labels.label(bool(request.data), time.monotonic())
        if done.episode is not None and self.recorder is not None:  # so that `tinker replay import` applies it too
            now_ns = time.time_ns()
            self.recorder.write_label(LabelRecord.of(done.episode, released[0], now_ns), now_ns)
        self._send(released)
        response.success, response.message = done.episode is not None, done.message
        at = f"; at cycle {released[0].info.get('cycle')}" if done.episode is not None and released else ""
        self.get_logger().info(f"label_episode: {done.message}{at}, the newest cycle in: {self.join.newest_cycle}")
        return response

    def _tick(self) -> None:
        self._send(self.labels.release(time.monotonic()))
        self._ticks += 1
        client = self._param_clients["policy"]
        if self._ticks % 10 == 1 and client.services_are_ready():  # the policy's bundle: the chain to invert through
            client.get_parameters(["bundle"], callback=self._on_policy_bundle)

    def _on_policy_bundle(self, future) -> None:
        try:
            path = future.result().values[0].string_value
        except Exception as e:  # the policy node is not up (yet): asked again later
            self.last_error = f"policy bundle not read: {e!r}"
            return
        if path and path != self.chain_bundle:
            self.use_chain(path)

    def use_chain(self, path: str) -> None:
        """Invert a person's targets through the action chain of bundle ``path`` from now on."""
        from tinker.bundle_io import chain_config
        from tinker_core.action_chain import ActionChain
        from tinker_deploy.manifest import Manifest
        from tinker_safety.limits import JointLimits

        self.chain, self.chain_bundle = None, path  # never another bundle's chain; a failing path is not retried
        try:
            m = Manifest.from_json((Path(path) / "manifest.json").read_bytes())
            limits = JointLimits.from_urdf(self.param("urdf") or None, joint_names=m.joint_names)
            self.chain = ActionChain(chain_config(m), limits.lower, limits.upper)
        except (OSError, TinkerError) as e:
            self.last_error = f"action chain of bundle {path} not read (interventions give no transition): {e}"
            self.get_logger().error(self.last_error)

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
        now, out = time.monotonic(), []
        for c in closed:
            if self.recorder is not None:
                self.recorder.write(c.record, time.time_ns())
            if c.transition is not None:  # each episode's newest waits for a label (EpisodeLabels)
                out += self.labels.add(c.transition, int(c.record["episode"]), now)
        self._send(out)

    def _send(self, transitions) -> None:
        for t in transitions:
            if self.sender is not None:
                try:
                    self.sender.send(t)
                    self.transitions += 1
                    self.intervention_transitions += bool((t.info or {}).get("intervention"))
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
        self.use_chain(str(path))
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
                "estopped": self.estopped, "last_error": self.last_error, "interventions": self.interventions,
                "intervention_transitions": self.intervention_transitions,
                "interventions_without_action": self.join.interventions_without_action,
                "labels": self.labels.labels, "after_label": self.labels.after_label,
                "after_label_interventions": self.labels.after_label_interventions,
                **{f"interventions_lost.{k}": v for k, v in self.join.interventions_lost.items()},
                "chain_bundle": self.chain_bundle,
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
        self._send(self.labels.flush())

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
