"""`policy` (lifecycle): features -> the bundle's actor -> the ActionChain -> a joint target.

An adapter (`tinker.runtime.NodeRuntime.serve`) around `tinker_core.loop.policy_stage.PolicyStage`: the cycle
(`tinker_core.loop.policy.PolicyCycle`: features joined to their state's pose, the chain restarted per episode),
the `CommandGate` (active, overruns) and `tinker.bundle_io.PolicyBundle` (the actor behind hot swap, the bundle's
own action chain within the URDF limits). Features of another perception model (sha256 in their metadata) are
refused: safety holds that cycle. Hot reload (never an unvalidated model, never a missed cycle): set ``bundle``,
call ``~/reload`` (std_srvs/Trigger), or let the experience bridge set it. Lifecycle: configure loads, verifies
and warms up; activate starts commanding; deactivate stops. Channels (`tinker.channel_io`): the actor's message
goes out on the channel's topic, never to safety or the robot.
"""

from __future__ import annotations

from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.parameter import Parameter
from std_msgs.msg import Float32MultiArray
from std_srvs.srv import Trigger

from tinker.bundle_io import PolicyBundle, resolve_bundle
from tinker.channel_io import CHANNEL_QOS, PublisherWatch, channel_msg, declared, topic
from tinker.node_params import POLICY_PARAMS
from tinker.runtime import NodeRuntime, main_for
from tinker.wire import Reader, array_msg
from tinker_core.errors import TinkerError
from tinker_core.loop.policy import CommandGate, check_on_overrun
from tinker_core.loop.policy_stage import PolicyStage

TOPICS = {"features": "features_topic", "joint_states": "joint_states_topic", "joint_target": "command_topic",
          "raw_action": "raw_action_topic"}


class PolicyNode(NodeRuntime, LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("policy", **kwargs)
        self._init_runtime("policy", POLICY_PARAMS)
        self.core, self.gate, self._entities = None, CommandGate(), []
        self.agent, self.says, self.say_pub, self.channel_watch = "", None, None, None
        self.stage = PolicyStage(None, self.gate, int(self.period * 1e9), lambda: self.param("on_overrun"),
                                 self._overran, self._say)
        self.add_on_set_parameters_callback(self._on_params)

    def on_configure(self, state) -> TransitionCallbackReturn:
        if not self.param("bundle"):  # param get shows the bundle that runs
            self.set_parameters([Parameter("bundle", value=str(resolve_bundle("")))])
        try:
            check_on_overrun(self.param("on_overrun"))
            self.agent, self.says, _ = declared(self)
            self.core = self.stage.core = PolicyBundle(self.param("bundle"), self.param("urdf"), self.period,
                                                       self.get_logger().info, says=self.says)
            p99, mx = self.core.runner.warmup(int(self.param("warmup_iterations")))
        except TinkerError as e:
            self.gate.last_error, self.core = str(e), None
            self.get_logger().error(f"configure failed: {e}")
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info(f"bundle {self.param('bundle')} v{self.core.version} verified; actor p99 {p99:.1f} us, "
                               f"max {mx:.1f} us after warm-up; providers {self.core.runner.providers}")
        self._entities = [*self.serve(self.stage, Reader("policy", self.core.runner.joint_names), TOPICS),
                          self.create_service(Trigger, "~/reload", self._on_reload)]
        self.cmd_pub = self.edge_publishers["joint_target"]
        if self.says is not None:
            self.say_pub = self.create_publisher(Float32MultiArray, topic(self.says), CHANNEL_QOS)
            self.channel_watch = PublisherWatch(self, [topic(self.says)])
            self._entities += [self.say_pub, self.create_timer(1.0, self.channel_watch.check)]
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state) -> TransitionCallbackReturn:
        self.core.cycle.restart(self.core.new_chain())  # its first command starts from the first cycle's pose
        self.gate.activate()
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        self.gate.deactivate()
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        self.gate.deactivate()
        self.destroy_entities(self._entities)
        if self.core is not None:
            self.core.runner.close()
        self._entities, self.core, self.stage.core, self.say_pub, self.channel_watch = [], None, None, None, None
        return TransitionCallbackReturn.SUCCESS

    on_shutdown = on_cleanup

    def _on_params(self, params) -> SetParametersResult:
        try:
            for prm in params:
                if prm.name == "bundle" and self.core is not None:
                    self.core.reload(str(prm.value))
                if prm.name == "on_overrun":
                    check_on_overrun(prm.value)
        except TinkerError as e:
            return SetParametersResult(successful=False, reason=str(e))
        return SetParametersResult(successful=True)

    def _on_reload(self, request, response):
        try:
            self.core.reload(str(self.param("bundle")))
            response.success, response.message = True, "reload requested; the new bundle is validated first"
        except TinkerError as e:
            response.success, response.message = False, str(e)
        return response

    def _overran(self, step, dur: int, how: str) -> None:
        self.stats.record(dur)  # counted in /diagnostics: no log per cycle
        self.get_logger().warning(f"cycle {step.cycle} overran its budget ({dur / 1e6:.2f} ms > "
                                  f"{self.period * 1e3:.0f} ms): {how}", throttle_duration_sec=1.0)

    def _say(self, step) -> None:
        if self.say_pub is not None:
            self.say_pub.publish(channel_msg(step.message, self.agent, step.stamp_ns, step.cycle))

    @property
    def active(self) -> bool:
        return self.gate.active

    def diagnostic_values(self) -> dict[str, object]:
        w = self.channel_watch
        return self.stage.values(None if w is None else {
            "channels.says": self.says.name, "channels.clipped": self.core.cycle.outbox.clipped if self.core else 0,
            "channels.publishers": w.counts[topic(self.says)], "channels.extra_publishers_seen": w.extra_seen})

    def diagnostic_level(self):
        w = self.channel_watch
        return self.stage.level(w.last if w is not None and w.crowded else "")

    def on_exit(self) -> None:
        """Stop: hold at the measured position (a command the safety node passes through its guard)."""
        q = self.stage.stop_target()
        if self.gate.active and q is not None and self._entities:
            self.cmd_pub.publish(array_msg(q, self.gate.stop_meta(self.core.version)))
        self.gate.deactivate()


main = main_for(PolicyNode)

if __name__ == "__main__":
    raise SystemExit(main())
