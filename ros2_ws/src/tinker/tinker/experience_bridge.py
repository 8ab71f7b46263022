"""`experience_bridge`: the live loop's transitions to the learner, the learner's bundles to the policy.

An adapter: each message of a cycle's five streams (``task``, features, raw action, joint target, safe command; as
declared in `tinker.wire.TOPICS`), each cycle a person took over (``safety/intervened``) and each call of
``~/label_episode`` (std_srvs/SetBool: true = success) becomes one call of `tinker_core.loop.bridge.
ExperienceBridge`, which joins, labels and sends (docs/sim2real/human_in_the_loop.md). What stays here is ROS:
rewards from ``reward_source`` (`tinker.reward_source`: ``sim``, the ``task`` topic's, or ``sensors``, the success
sensor on each state's features), the running bundle's action chain (the policy node's ``bundle``, asked every few
seconds, or the one last handed over), new bundles from the learner (`WeightsSubscriber`) written atomically
(`tinker.bundle_io.write_bundle`) and handed to the policy node by setting its ``bundle`` parameter (perception
first when its model changed), and /diagnostics: the five streams are watched inputs, one silent longer than
``input_timeout`` is ERROR (no cycle can close without it).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from rclpy.node import Node
from rclpy.parameter import Parameter
from std_srvs.srv import SetBool

from tinker.bundle_io import bundle_chain, write_bundle
from tinker.node_params import BRIDGE_PARAMS as PARAMS
from tinker.runtime import OK, WARN, NodeRuntime, main_for
from tinker.wire import RECORD_QOS, Reader
from tinker_core.errors import ConfigError, TinkerError
from tinker_core.loop.bridge import ExperienceBridge
from tinker_core.loop.bridge_stage import BridgeStage
from tinker_core.loop.episode_label import EpisodeLabels
from tinker_core.loop.input_ages import RecentFaults

LABEL_PARAMS = ("label_window", "label_success_reward", "label_failure_reward")


class ExperienceBridgeNode(NodeRuntime, Node):
    def __init__(self, **kwargs):
        super().__init__("experience_bridge", **kwargs)
        self._init_runtime("experience_bridge", PARAMS)
        g = self.param
        sender = recorder = self.weights = self.deployed_version = None
        self.bundles_received = 0
        self.drops, self._dropped_seen = RecentFaults(), 0  # WARN while transitions are being dropped
        if g("learner_endpoint"):
            from tinker_core.transport import TransitionSender

            sender = TransitionSender(g("learner_endpoint"), hwm=1000)
        if g("record"):
            from tinker.recording import CycleRecorder

            recorder = CycleRecorder(g("record"), {"namespace": self.get_namespace(), "control_period": str(self.period)})
        self.bridge = ExperienceBridge(EpisodeLabels(*(g(n) for n in LABEL_PARAMS)), sender, recorder,
                                       self._reward_source(g("reward_source")),
                                       info={"namespace": self.get_namespace(), "source": "real"})
        self.add_post_set_parameters_callback(
            lambda _: self.bridge.labels.configure(*(self.param(n) for n in LABEL_PARAMS)))
        self._ticks = 0
        if g("weights_endpoint"):
            from tinker_core.transport import WeightsSubscriber

            self.weights = WeightsSubscriber(g("weights_endpoint"))
            self.bundle_dir = Path(g("bundle_dir") or tempfile.mkdtemp(prefix="tinker-bundles-"))
            self.bundle_dir.mkdir(parents=True, exist_ok=True)
            self.create_timer(0.1, self._poll_weights)
        from rclpy.parameter_client import AsyncParameterClient  # hands bundles over; reads the policy's bundle

        ns = self.get_namespace().rstrip("/")
        self._param_clients = {n: AsyncParameterClient(self, f"{ns}/{g(n + '_node')}") for n in ("policy", "perception")}
        self.stage = BridgeStage(self.bridge)
        streams = ("task", "features", "raw_action", "joint_target", "command", "intervened")
        self.serve(self.stage, Reader("experience_bridge"), {p: f"{p}_topic" for p in (*streams, "estop_state")},
                   stale={"intervened": None, "estop_state": None}, qos={p: RECORD_QOS for p in streams})
        self.create_service(SetBool, "~/label_episode", self._on_label)
        self.create_timer(0.2, self._tick)

    def _reward_source(self, source: str):
        """None for the simulator's rewards; the success sensor (`tinker.reward_source`) for 'sensors'."""
        from tinker.reward_source import SOURCES, sensor_outcome

        if source not in SOURCES:
            raise ConfigError(f"experience_bridge.reward_source: expected one of {list(SOURCES)}, got {source!r}")
        if source == "sim":
            return None
        return sensor_outcome(self.param("sensor_bundle"), self.param("sensor_env"), self.param("urdf"))

    # --- a person's label --------------------------------------------------------------------------
    def _on_label(self, request, response):
        done = self.bridge.label(bool(request.data), time.monotonic())
        response.success, response.message = done.episode is not None, done.message
        t = self.bridge.last_labelled
        at = f"; at cycle {t.info.get('cycle')}" if t is not None else ""
        self.get_logger().info(f"label_episode: {done.message}{at}, the newest cycle in: {self.bridge.join.newest_cycle}")
        return response

    # --- the running bundle: its action chain, and new ones from the learner ------------------------
    def _tick(self) -> None:
        self.bridge.tick(time.monotonic())
        self._ticks += 1
        client = self._param_clients["policy"]
        if self._ticks % 10 == 1 and client.services_are_ready():  # the policy's bundle: the chain to invert through
            client.get_parameters(["bundle"], callback=self._on_policy_bundle)

    def _on_policy_bundle(self, future) -> None:
        try:
            path = future.result().values[0].string_value
        except Exception as e:  # the policy node is not up (yet): asked again later
            self.bridge.last_error = f"policy bundle not read: {e!r}"
            return
        if path and path != self.bridge.chain_bundle:
            self.use_chain(path)

    def use_chain(self, path: str) -> None:
        """Invert a person's targets through the action chain of bundle ``path`` from now on."""
        b = self.bridge
        b.chain, b.chain_bundle = None, path  # never another bundle's chain; a failing path is not retried
        try:
            b.chain = bundle_chain(path, self.param("urdf"))
        except (OSError, TinkerError) as e:
            b.last_error = f"action chain of bundle {path} not read (interventions give no transition): {e}"
            self.get_logger().error(b.last_error)

    def _poll_weights(self) -> None:
        got = self.weights.poll(0)
        if got is None or got[0] == self.deployed_version:
            return  # nothing new, or a repeat of what the policy already has
        version, blobs, meta = got
        try:
            path = write_bundle(self.bundle_dir, version, blobs)
        except (OSError, TinkerError) as e:
            self.bridge.last_error = f"bundle v{version} not written: {e}"
            return self.get_logger().error(self.bridge.last_error)
        self.bundles_received, self.deployed_version = self.bundles_received + 1, version
        self.use_chain(str(path))
        self.deploy(str(path), perception_changed=bool(meta.get("perception_changed", False)))

    def deploy(self, path: str, perception_changed: bool = False) -> None:
        """Hands bundle ``path`` to the nodes (perception first when its model changed)."""
        for node in ("perception", "policy") if perception_changed else ("policy",):
            self._param_clients[node].set_parameters([Parameter("bundle", value=path)])
        self.get_logger().info(f"handed bundle {path} to the policy node")

    # --- diagnostics and shutdown -----------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        return {**self.bridge.values(), "bundles_received": self.bundles_received, "estopped": self.stage.estopped}

    def diagnostic_level(self):
        sender = self.bridge.sender
        dropped = sender.dropped if sender is not None else 0
        if dropped > self._dropped_seen:
            self.drops.note(f"{dropped} transition(s) dropped in all")
            self._dropped_seen = dropped
        if self.drops.level()[0]:  # recently: OK again once the learner keeps up
            return WARN, f"dropping transitions ({dropped} in all): learner away or slow"
        return OK, "bridging"

    def on_exit(self) -> None:
        self.bridge.flush(time.monotonic())

    def close_runtime(self) -> None:
        super().close_runtime()
        for part in (self.bridge.recorder, self.weights):
            if part is not None:
                part.close()
        if self.bridge.sender is not None:
            self.bridge.sender.close(linger_ms=200)


main = main_for(ExperienceBridgeNode)

if __name__ == "__main__":
    raise SystemExit(main())
