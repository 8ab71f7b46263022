"""`policy` (lifecycle): features -> the bundle's actor -> the ActionChain -> a joint target.

An adapter: the cycle is `tinker_core.loop.policy.PolicyCycle` (features joined to their state's pose,
the chain restarted per episode) inside `tinker.bundle_io.PolicyBundle` (the actor behind hot swap, the
bundle's own action chain within the URDF limits); topics as declared in `tinker.wire.TOPICS`. Features
of another perception model (sha256 in their metadata) are refused: safety holds that cycle.
Hot reload (never an unvalidated model, never a missed cycle): set ``bundle``, call ``~/reload``
(std_srvs/Trigger), or let the experience bridge set it; the bundle is validated in the background.
Lifecycle: configure loads, verifies and warms up; activate starts commanding; deactivate stops.
Inputs watched for staleness from configure on (`tinker.runtime.NodeRuntime.subscribe`): the features
and ``joint_states``, each ERROR when silent longer than ``input_timeout`` (a dead perception shows here).
Channels (`tinker.channel_io`): a robot that sends on a declared channel runs a bundle whose actor outputs
its action and its message; `tinker_core.loop.policy.PolicyCycle` splits them, the message (checked,
clipped) goes out on the channel's topic and never to safety or the robot; ``raw_action`` is the action part.
"""

from __future__ import annotations

import time

from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float32MultiArray
from std_srvs.srv import Trigger

from tinker.bundle_io import PolicyBundle, resolve_bundle
from tinker.channel_io import CHANNEL_QOS, PublisherWatch, channel_msg, declared, topic
from tinker.node_params import POLICY_PARAMS
from tinker.runtime import NodeRuntime, main_for
from tinker.wire import JointMap, array_msg, read_array, stamp_ns
from tinker_core.errors import TinkerError, ValidationError
from tinker_core.loop.policy import CommandGate, check_on_overrun

class PolicyNode(NodeRuntime, LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("policy", **kwargs)
        self._init_runtime("policy", POLICY_PARAMS)
        self.core: PolicyBundle | None = None
        self.gate, self._entities = CommandGate(), []
        self.agent, self.says, self.say_pub, self.channel_watch = "", None, None, None
        self.add_on_set_parameters_callback(self._on_params)

    def on_configure(self, state) -> TransitionCallbackReturn:
        if not self.param("bundle"):  # param get shows the bundle that runs
            self.set_parameters([Parameter("bundle", value=str(resolve_bundle("")))])
        try:
            check_on_overrun(self.param("on_overrun"))
            self.agent, self.says, _ = declared(self)
            self.core = PolicyBundle(self.param("bundle"), self.param("urdf"), self.period, self.get_logger().info,
                                     says=self.says)
            self.jmap = JointMap(self.core.runner.joint_names, "policy.joint_states")
            p99, mx = self.core.runner.warmup(int(self.param("warmup_iterations")))
        except TinkerError as e:
            self.gate.last_error, self.core = str(e), None
            self.get_logger().error(f"configure failed: {e}")
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info(f"bundle {self.param('bundle')} v{self.core.version} verified; actor p99 {p99:.1f} us, "
                               f"max {mx:.1f} us after warm-up; providers {self.core.runner.providers}")
        self.cmd_pub, self.raw_pub = self.advertise("command_topic", "joint_target"), self.advertise("raw_action_topic", "raw_action")
        self._entities = [self.cmd_pub, self.raw_pub, self.create_service(Trigger, "~/reload", self._on_reload),
                          self.subscribe("features_topic", "features", self._on_features),
                          self.subscribe("joint_states_topic", "joint_states", self._on_joints)]
        self.say_pub = self.channel_watch = None
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
        self._entities, self.core, self.say_pub, self.channel_watch = [], None, None, None
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

    def _refuse(self, err: Exception) -> None:
        self.gate.refusals.note(str(err))
        self.get_logger().warning(f"input refused, cycle held: {err}", throttle_duration_sec=1.0)

    def _on_joints(self, msg: JointState) -> None:
        try:
            q, _ = self.jmap.read(msg)
        except ValidationError as e:
            return self._refuse(e)
        t_wall, t0 = time.time_ns(), time.perf_counter_ns()
        self._send(self.core.cycle.on_state(stamp_ns(msg.header), q), t_wall, t0)  # features that waited for it

    def _on_features(self, msg: Float32MultiArray) -> None:
        if not self.gate.active or self.core is None:
            return
        t_wall, t0 = time.time_ns(), time.perf_counter_ns()
        try:
            feats, meta = read_array(msg, None, "policy.features")
            out = self.core.cycle.on_features(int(meta.get("stamp_ns", 0)), feats, int(meta.get("cycle", 0)),
                                              meta.get("episode", ""), meta.get("perception_sha256", ""))
        except ValidationError as e:
            return self._refuse(e)
        self._send(out, t_wall, t0)

    def _send(self, out, t_wall: int, t0: int) -> None:
        if out is None or not self.gate.active:
            return
        dur = time.perf_counter_ns() - t0
        if self.stats.record(dur):  # counted in /diagnostics: no log per cycle
            self.get_logger().warning(f"cycle {out.cycle} overran its budget ({dur / 1e6:.2f} ms > {self.period * 1e3:.0f}"
                                      f" ms): {self.param('on_overrun')}", throttle_duration_sec=1.0)
            return self.gate.overran(self.param("on_overrun"))  # a late command is not sent: safety holds this cycle
        out_meta = {"stamp_ns": out.stamp_ns, "cycle": out.cycle, "version": self.core.version}
        self.cmd_pub.publish(array_msg(out.target, out_meta))
        self.raw_pub.publish(array_msg(out.raw, out_meta))
        if out.message is not None and self.say_pub is not None:
            self.say_pub.publish(channel_msg(out.message, self.agent, out.stamp_ns, out.cycle))
        self.span(out.cycle, t_wall, time.perf_counter_ns() - t0, since_state_us=(t_wall - out.stamp_ns) // 1000)

    @property
    def active(self) -> bool:
        return self.gate.active

    def diagnostic_values(self) -> dict[str, object]:
        r, g, w = (self.core.runner if self.core else None), self.gate, self.channel_watch
        return {"active": g.active, "model_version": self.core.version if self.core else None,
                "actor_sha256": r.actor_sha256 if r else "", "perception_sha256": r.perception_sha256 if r else "",
                "reloads": self.core.reloads if self.core else 0, "reload_rejections": r.rejected_reloads if r else 0,
                "refused_inputs": g.refusals.count, "last_error": g.last_error or g.refusals.last,
                **({} if w is None else {
                    "channels.says": self.says.name, "channels.clipped": self.core.cycle.outbox.clipped if self.core else 0,
                    "channels.publishers": w.counts[topic(self.says)], "channels.extra_publishers_seen": w.extra_seen}),
                **(r.diagnostic_values() if hasattr(r, "diagnostic_values") else {})}

    def diagnostic_level(self):
        crowded = self.channel_watch.last if self.channel_watch is not None and self.channel_watch.crowded else ""
        return self.gate.level(self.core.version if self.core else None, crowded)

    def on_exit(self) -> None:
        """Stop: hold at the measured position (a command the safety node passes through its guard)."""
        q = self.core.cycle.q_latest if self.core else None
        if self.gate.active and q is not None and self._entities:
            self.cmd_pub.publish(array_msg(q, self.gate.stop_meta(self.core.version)))
        self.gate.deactivate()


main = main_for(PolicyNode)

if __name__ == "__main__":
    raise SystemExit(main())
