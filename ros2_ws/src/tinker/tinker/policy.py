"""`policy` (lifecycle): features -> the bundle's actor -> the ActionChain -> a joint target.

Subscribes ``perception/features`` (Float32MultiArray, meta ``stamp_ns;cycle;episode;perception_sha256``)
and ``joint_states`` (mapped by name with the manifest's joint names); publishes
``policy/joint_target`` (Float64MultiArray in manifest joint order, meta ``stamp_ns;cycle;version``)
and ``policy/raw_action`` for the experience bridge. The action chain is the bundle's own
`ActionChainConfig` with the URDF's limits: the one post-processing that sim training uses.

Features made by a perception model other than this bundle's (sha256 in the meta) are refused: the
cycle is held by safety and counted. Online fine-tuning only changes the actor, so its bundles keep
the perception sha and swap without a miss; a bundle with a new perception model must be loaded by
both nodes (the bridge sets ``bundle`` on perception first, then here): the cycles in between are
held, never run on mismatched features.

Hot reload (never an unvalidated model, never a missed cycle): set the ``bundle`` parameter, call
``~/reload`` (std_srvs/Trigger, re-reads ``bundle``), or let the experience bridge set it. The new
bundle is validated in the background by `deploy.hot_reload.HotSwapPolicy` and swapped between calls.
Lifecycle: configure loads, verifies and warms up; activate starts commanding; deactivate stops.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_msgs.msg import Float32MultiArray, Float64MultiArray
from std_srvs.srv import Trigger

from tinker.bundle_io import ActorRunner
from tinker.runtime import ERROR, OK, WARN, NodeRuntime, main_for
from safety.limits import JointLimits
from tinker.wire import COMMAND_QOS, SENSOR_QOS, JointMap, array_msg, read_array, stamp_ns
from tinker_core.action_chain import ActionChain
from tinker_core.errors import TinkerError, ValidationError


class PolicyNode(NodeRuntime, LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("policy", **kwargs)
        self._init_runtime("policy")
        p = self.declare_parameter
        p("bundle", "")
        p("urdf", "")
        p("features_topic", "perception/features")
        p("joint_states_topic", "joint_states")
        p("command_topic", "policy/joint_target")
        p("raw_action_topic", "policy/raw_action")
        p("on_overrun", "hold")
        p("warmup_iterations", 200)
        self.runner: ActorRunner | None = None
        self.chain: ActionChain | None = None
        self.active = False
        self.stopped_by_overrun = False
        self.rejected = 0
        self.reloads = 0
        self.last_error = ""
        self._q: OrderedDict[int, np.ndarray] = OrderedDict()
        self._q_latest: np.ndarray | None = None
        self._waiting: tuple[int, Float32MultiArray] | None = None
        self._episode = None
        self._version = None
        self._subs, self._pubs, self._srvs = [], [], []
        self.add_on_set_parameters_callback(self._on_params)

    # --- lifecycle ----------------------------------------------------------------------------
    def on_configure(self, state) -> TransitionCallbackReturn:
        g = lambda n: self.get_parameter(n).value  # noqa: E731
        if g("on_overrun") not in ("hold", "stop"):
            self.get_logger().error(f"on_overrun: expected 'hold' or 'stop', got {g('on_overrun')!r}")
            return TransitionCallbackReturn.FAILURE
        try:
            self.runner = ActorRunner(g("bundle"))
            trained = self.runner.manifest.control_period
            if trained is not None and abs(float(trained) - self.period) > 1e-9:
                raise TinkerError(f"policy.control_period: the bundle was trained at {trained} s per cycle, this "
                                  f"graph runs at {self.period} s; set control_period in the launch YAML to match")
            self.jmap = JointMap(self.runner.joint_names, "policy.joint_states")
            limits = JointLimits.from_urdf(g("urdf") or None, joint_names=self.runner.joint_names)
            lower, upper = limits.lower, limits.upper
            self.chain = ActionChain(self.runner.chain_config, lower, upper)
            self._limits = (lower, upper)
            p99, mx = self.runner.warmup(int(g("warmup_iterations")))
        except TinkerError as e:
            self.last_error = str(e)
            self.get_logger().error(f"configure failed: {e}")
            self.runner = None
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info(f"bundle {g('bundle')} v{self.runner.version} verified; actor inference after "
                               f"warm-up p99 {p99:.1f} us, max {mx:.1f} us; providers {self.runner.providers}")
        self._version = self.runner.version
        self._actor_sha = self.runner.actor_sha256
        self._pubs = [self.create_publisher(Float64MultiArray, g("command_topic"), COMMAND_QOS),
                      self.create_publisher(Float64MultiArray, g("raw_action_topic"), COMMAND_QOS)]
        self.cmd_pub, self.raw_pub = self._pubs
        self._subs = [self.create_subscription(Float32MultiArray, g("features_topic"), self._on_features, COMMAND_QOS),
                      self.create_subscription(JointState, g("joint_states_topic"), self._on_joints, SENSOR_QOS)]
        self._srvs = [self.create_service(Trigger, "~/reload", self._on_reload)]
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state) -> TransitionCallbackReturn:
        # a fresh chain: its first command starts from the measured pose of the first cycle
        self.chain = ActionChain(self.runner.chain_config, *self._limits)
        self._episode = None
        self.active = True
        self.stopped_by_overrun = False
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        self.active = False
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        self.active = False
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        self.destroy_entities(self._subs + self._pubs + self._srvs)
        self._subs, self._pubs, self._srvs = [], [], []
        if self.runner is not None:
            self.runner.close()
        self.runner = None

    # --- reload ---------------------------------------------------------------------------------
    def _on_params(self, params) -> SetParametersResult:
        for prm in params:
            if prm.name == "bundle" and self.runner is not None:
                if not (Path(str(prm.value)) / "manifest.json").is_file():
                    return SetParametersResult(successful=False,
                                               reason=f"bundle {prm.value}: no manifest.json there; keeping the running bundle")
                try:
                    self.runner.request_reload(str(prm.value))
                except TinkerError as e:
                    return SetParametersResult(successful=False, reason=str(e))
            if prm.name == "control_period" and self.runner is not None:
                return SetParametersResult(successful=False, reason="control_period comes from the bundle and "
                                                                    "the launch YAML; it cannot change while configured")
        return SetParametersResult(successful=True)

    def _on_reload(self, request, response):
        try:
            self.runner.request_reload(str(self.get_parameter("bundle").value))
            response.success, response.message = True, "reload requested; the new bundle is validated first"
        except TinkerError as e:
            response.success, response.message = False, str(e)
        return response

    def _after_swap(self) -> None:
        """A new bundle went live; its action chain config is the one to use from now on."""
        self.reloads += 1
        if self.runner.chain_config.digest() != self.chain.config.digest():
            self.chain = ActionChain(self.runner.chain_config, *self._limits)
            self._episode = None  # the new chain starts from this cycle's measured pose
        self._version = self.runner.version
        self._actor_sha = self.runner.actor_sha256
        self.get_logger().info(f"now running bundle v{self._version} ({self.runner.actor_sha256[:12]})")

    # --- the cycle --------------------------------------------------------------------------------
    def _on_joints(self, msg: JointState) -> None:
        try:
            q, _ = self.jmap.read(msg)
        except ValidationError as e:
            self._refuse(e)
            return
        self._q_latest = q
        stamp = stamp_ns(msg.header)
        self._q[stamp] = q
        while len(self._q) > 8:
            self._q.popitem(last=False)
        if self._waiting is not None and self._waiting[0] == stamp:
            msg, self._waiting = self._waiting[1], None
            self._on_features(msg)  # its features came first: run it now, with this cycle's pose

    def _refuse(self, err: Exception) -> None:
        self.rejected += 1
        self.last_error = str(err)
        self.get_logger().warning(f"input refused, cycle held: {err}", throttle_duration_sec=1.0)

    def _on_features(self, msg: Float32MultiArray) -> None:
        if not self.active or self.runner is None:
            return
        t_wall, t0 = time.time_ns(), time.perf_counter_ns()
        try:
            feats, meta = read_array(msg, None, "policy.features")
            stamp = int(meta.get("stamp_ns", 0))
            q = self._q.get(stamp)
            if q is None:  # the chain needs this cycle's measured pose: wait for its JointState
                self._waiting = (stamp, msg)
                return
            raw = self.runner(feats.astype(np.float32), meta.get("perception_sha256", ""))
        except ValidationError as e:
            self._refuse(e)
            return
        if self.runner.actor_sha256 != self._actor_sha:
            self._after_swap()
        if meta.get("episode") != self._episode:
            self._episode = meta.get("episode")
            self.chain.reset(q)
        target = self.chain(raw, q)
        dur = time.perf_counter_ns() - t0
        cycle = int(meta.get("cycle", 0))
        if self.stats.record(dur):
            self.get_logger().warning(f"cycle {cycle} overran its budget ({dur / 1e6:.2f} ms > "
                                      f"{self.period * 1e3:.0f} ms): {self.get_parameter('on_overrun').value}",
                                      throttle_duration_sec=1.0)  # counted in /diagnostics: no log per cycle
            if self.get_parameter("on_overrun").value == "stop":
                self.active = False
                self.stopped_by_overrun = True
            return  # a late command is not sent: safety holds this cycle
        out = {"stamp_ns": stamp, "cycle": cycle, "version": self._version}
        self.cmd_pub.publish(array_msg(target, out))
        self.raw_pub.publish(array_msg(raw, out))
        self.span(cycle, t_wall, time.perf_counter_ns() - t0, since_state_us=(t_wall - stamp) // 1000)

    # --- runtime hooks ------------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        r = self.runner
        return {"active": self.active, "model_version": self._version,
                "actor_sha256": r.actor_sha256 if r else "", "perception_sha256": r.perception_sha256 if r else "",
                "reloads": self.reloads, "reload_rejections": r.rejected_reloads if r else 0,
                "refused_inputs": self.rejected, "last_error": self.last_error}

    def diagnostic_level(self):
        if self.stopped_by_overrun:
            return ERROR, "stopped after an overrun (on_overrun: stop)"
        if self.runner is None:
            return WARN, "unconfigured"
        if not self.active:
            return WARN, "inactive: not commanding"
        if self.rejected and self.last_error:
            return WARN, f"refused {self.rejected} input(s): {self.last_error}"
        return OK, f"commanding with bundle v{self._version}"

    def on_exit(self) -> None:
        """Stop: hold at the measured position (a command the safety node passes through its guard)."""
        if self.active and self._q_latest is not None and self._pubs:
            self.cmd_pub.publish(array_msg(self._q_latest, {"stamp_ns": 0, "cycle": 0, "version": self._version,
                                                            "stop": 1}))
        self.active = False


main = main_for(PolicyNode)

if __name__ == "__main__":
    raise SystemExit(main())
