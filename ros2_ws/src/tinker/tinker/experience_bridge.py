"""`experience_bridge`: the live loop's transitions to the learner, the learner's bundles to the policy.

An adapter around `tinker_core.loop.bridge_stage.BridgeStage`: each message of a cycle's streams (``task``,
features, raw action, joint target, safe command), each cycle a person took over (``safety/intervened``) and each
call of ``~/label_episode`` (std_srvs/SetBool: true = success) goes to `tinker_core.loop.bridge.ExperienceBridge`,
which joins, labels, rewards (``reward_source``: `tinker.reward_source`) and sends (docs/sim2real/
human_in_the_loop.md). Bundles in and out: `tinker.bundle_handover.BundleHandover`. The streams are watched inputs.
"""

from __future__ import annotations

import time

from rclpy.node import Node
from std_srvs.srv import SetBool

from tinker.bundle_handover import BundleHandover
from tinker.lifecycle import watch_lifecycle
from tinker.node_params import BRIDGE_PARAMS as PARAMS
from tinker.reward_source import reward_source
from tinker.runtime import OK, WARN, NodeRuntime, main_for
from tinker.wire import RECORD_QOS, Reader
from tinker_core.loop.bridge import ExperienceBridge
from tinker_core.loop.bridge_stage import BridgeStage
from tinker_core.loop.episode_label import EpisodeLabels
from tinker_core.loop.graph import ROBOT_LOOP
from tinker_core.loop.input_ages import RecentFaults

LABEL_PARAMS = ("label_window", "label_success_reward", "label_failure_reward")
STREAMS = ("task", "features", "raw_action", "joint_target", "command", "intervened")


class ExperienceBridgeNode(NodeRuntime, Node):
    def __init__(self, **kwargs):
        super().__init__("experience_bridge", **kwargs)
        self._init_runtime("experience_bridge", PARAMS)
        g = self.param
        sender = recorder = None
        self.drops, self._dropped_seen = RecentFaults(), 0  # WARN while transitions are being dropped
        if g("learner_endpoint"):
            from tinker_core.transport import TransitionSender

            ROBOT_LOOP.check_port(self.module, "transitions", "out")
            sender = TransitionSender(g("learner_endpoint"), hwm=1000)
        if g("record"):
            from tinker.recording import CycleRecorder

            recorder = CycleRecorder(g("record"), {"namespace": self.get_namespace(), "control_period": str(self.period)})
        self.bridge = ExperienceBridge(EpisodeLabels(*(g(n) for n in LABEL_PARAMS)), sender, recorder,
                                       reward_source(g("reward_source"), g("sensor_bundle"), g("sensor_env"), g("urdf"),
                                                     g("sensor_hold_target")),
                                       info={"namespace": self.get_namespace(), "source": "real"},
                                       estop_reward=g("estop_reward"))
        self.add_post_set_parameters_callback(self._rewards_set)
        self.handover = BundleHandover(self, self.bridge, g("urdf"), {r: g(f"{r}_node") for r in ("policy", "perception")},
                                       g("weights_endpoint"), g("bundle_dir"))
        self.stage = BridgeStage(self.bridge)
        self.serve(self.stage, Reader("experience_bridge"),
                   {p: f"{p}_topic" for p in (*STREAMS, "estop_state", "episode_end")},
                   stale={"intervened": None, "estop_state": None}, qos={p: RECORD_QOS for p in STREAMS})
        watch_lifecycle(self, g("policy_node"), self.handover.policy_lifecycle)  # a restarted policy: its bundle
        self.create_service(SetBool, "~/label_episode", self._on_label)
        self.create_timer(0.2, self._tick)

    def _rewards_set(self, _) -> None:
        self.bridge.labels.configure(*(self.param(n) for n in LABEL_PARAMS))
        self.bridge.join.estop_reward = float(self.param("estop_reward"))

    def _on_label(self, request, response):
        done = self.bridge.label(bool(request.data), time.monotonic())
        response.success, response.message = done.episode is not None, done.message
        t = self.bridge.last_labelled
        at = f"; at cycle {t.info.get('cycle')}" if t is not None else ""
        self.get_logger().info(f"label_episode: {done.message}{at}, the newest cycle in: {self.bridge.join.newest_cycle}")
        return response

    def _tick(self) -> None:
        self.bridge.tick(time.monotonic())
        self.handover.tick()

    def diagnostic_values(self) -> dict[str, object]:
        return {**self.bridge.values(), "bundles_received": self.handover.bundles_received,
                "bundles_handed_again": self.handover.handed_again,
                "estopped": self.stage.estopped}

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
        self.handover.close()
        if self.bridge.recorder is not None:
            self.bridge.recorder.close()
        if self.bridge.sender is not None:
            self.bridge.sender.close(linger_ms=200)


main = main_for(ExperienceBridgeNode)

if __name__ == "__main__":
    raise SystemExit(main())
