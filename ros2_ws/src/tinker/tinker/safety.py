"""`safety` (lifecycle): the SafetyWrapper between the policy and the robot; watchdog and e-stop.

Subscribes ``policy/joint_target`` and ``joint_states`` (by joint name); publishes the safe command
on ``forward_position_controller/commands`` (Float64MultiArray in URDF joint order, meta
``stamp_ns;cycle;version;status``), the latched e-stop state on ``safety/estop_state``
(diagnostic_msgs/DiagnosticStatus, transient_local: level ERROR + reason while latched) and
/diagnostics. Services: ``~/estop`` and ``~/reset`` (std_srvs/Trigger).

Every decision is the SafetyWrapper's (safety/): a policy command is guarded as it arrives (lowest
latency); a malformed one (wrong length, NaN) goes through the guard too, which holds, counts it and
latches after ``invalid_inputs_to_estop``. Watchdog: every robot state opens a cycle; when no policy
command for it has arrived ``hold_deadline`` (fraction of the period) after the state (a one-shot
timer armed by each state and cancelled by its command: no polling wake-ups), the guard's
``tick`` answers that cycle (hold at the measured pose; ``watchdog_misses_to_estop`` stale ticks in
a row latch the e-stop), so the robot holds within one cycle of a dead or stuck policy. Limits and
e-stop rules come from the safety YAML (``config``); its ``control_period`` and ``watchdog_timeout``
follow this node's ``control_period`` (the launch YAML is the one source of rates). Activation and
reset start the guard's safe-start ramp from the measured pose; deactivation publishes one hold.
"""

from __future__ import annotations

import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger

from tinker.runtime import ERROR, OK, WARN, NodeRuntime, main_for
from tinker.wire import COMMAND_QOS, LATCHED_QOS, SENSOR_QOS, JointMap, array_msg, decode_meta, read_array, stamp_ns
from tinker_core.errors import TinkerError, ValidationError


class SafetyNode(NodeRuntime, LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("safety", **kwargs)
        self._init_runtime("safety")
        p = self.declare_parameter
        p("urdf", "")
        p("config", "")
        p("policy_command_topic", "policy/joint_target")
        p("command_topic", "forward_position_controller/commands")
        p("joint_states_topic", "joint_states")
        p("estop_state_topic", "safety/estop_state")
        p("hold_deadline", 0.6)
        self.guard = None
        self.active = False
        self._q = self._qd = None
        self._state_stamp = 0
        self._state_cycle = 0
        self._state_t = 0
        self._served_stamp = -1
        self._misses_in_row = 0
        self.holds = 0
        self.refused = 0
        self.last_error = ""
        self._subs, self._srvs, self._own_timers = [], [], []
        # publishers live for the node's whole life: deactivate keeps them, the stop needs them
        self.cmd_pub = self.create_publisher(Float64MultiArray, self.get_parameter("command_topic").value, COMMAND_QOS)
        self.estop_pub = self.create_publisher(DiagnosticStatus, self.get_parameter("estop_state_topic").value,
                                               LATCHED_QOS)

    # --- lifecycle ----------------------------------------------------------------------------
    def on_configure(self, state) -> TransitionCallbackReturn:
        g = lambda n: self.get_parameter(n).value  # noqa: E731
        try:
            from safety.config import DEFAULT_CONFIG_PATH
            from safety.safety_wrapper import SafetyWrapper
            from tinker_core.config import read_yaml

            cfg = read_yaml(g("config") or DEFAULT_CONFIG_PATH)
            if float(cfg.get("watchdog_timeout", self.period)) == float(cfg.get("control_period", self.period)):
                cfg["watchdog_timeout"] = self.period
            cfg["control_period"] = self.period
            self.guard = SafetyWrapper.from_urdf(g("urdf") or None, cfg)
        except TinkerError as e:
            self.last_error = str(e)
            self.get_logger().error(f"configure failed: {e}")
            return TransitionCallbackReturn.FAILURE
        self.names = list(self.guard.limits.names)
        self.jmap = JointMap(self.names, "safety.joint_states")
        self.hold_deadline_ns = int(float(g("hold_deadline")) * self.period * 1e9)
        self._subs = [self.create_subscription(Float64MultiArray, g("policy_command_topic"), self._on_command, COMMAND_QOS),
                      self.create_subscription(JointState, g("joint_states_topic"), self._on_joints, SENSOR_QOS)]
        self._srvs = [self.create_service(Trigger, "~/estop", self._on_estop),
                      self.create_service(Trigger, "~/reset", self._on_reset)]
        self._wd_timer = self.create_timer(self.hold_deadline_ns / 1e9, self._watchdog)
        self._wd_timer.cancel()  # armed by each state (no ``autostart`` argument: older rclpy lacks it)
        self._own_timers = [self._wd_timer]
        self._publish_estop_state()
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state) -> TransitionCallbackReturn:
        if self._q is not None:
            self.guard.reset(self._q, self._qd)  # the start ramp begins at the measured pose
        self._needs_reset = self._q is None
        self._served_stamp = self._state_stamp
        self._misses_in_row = 0
        self.active = True
        self._publish_estop_state()
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        self._send_hold("deactivated")
        self.active = False
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        if self.active:
            self._send_hold("shutdown")
        self.active = False
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        self.destroy_entities(self._subs + self._srvs + self._own_timers)
        self._subs, self._srvs, self._own_timers = [], [], []
        self.guard = None

    # --- inputs -------------------------------------------------------------------------------
    def _on_joints(self, msg: JointState) -> None:
        try:
            self._q, self._qd = self.jmap.read(msg)
        except ValidationError as e:
            self._refuse(e)
            return
        if getattr(self, "_needs_reset", False) and self.active:
            self.guard.reset(self._q, self._qd)
            self._needs_reset = False
        self._state_stamp = stamp_ns(msg.header)
        cyc = msg.header.frame_id.split("=", 1)[-1]
        self._state_cycle = int(cyc) if cyc.isdigit() else self._state_cycle + 1
        self._state_t = time.monotonic_ns()
        if self.active and self._served_stamp < self._state_stamp:
            self._wd_timer.reset()  # this state's command is due within hold_deadline

    def _refuse(self, err: Exception) -> None:
        self.refused += 1
        self.last_error = str(err)
        self.get_logger().warning(f"input refused, holding: {err}", throttle_duration_sec=1.0)

    def _on_command(self, msg: Float64MultiArray) -> None:
        if not self.active or self._q is None:
            return
        t_wall, t0 = time.time_ns(), time.perf_counter_ns()
        meta = decode_meta(msg.layout.dim[0].label) if msg.layout.dim else {}
        try:
            target, _ = read_array(msg, len(self.names), "safety.policy_command")
        except ValidationError as e:
            self._refuse(e)
            target = np.asarray(msg.data, dtype=np.float64)  # the guard holds, counts and may latch
        stamp = int(meta["stamp_ns"]) if meta.get("stamp_ns", "").isdigit() else 0
        if meta.get("stop") == "1":
            self._send_hold("policy node stopped")
            return
        cmd, status = self.guard(target, self._q, self._qd)
        self._served_stamp = max(self._served_stamp, stamp or self._state_stamp)
        if self._served_stamp >= self._state_stamp:
            self._wd_timer.cancel()
        self._misses_in_row = 0
        self._publish(cmd, stamp, int(meta.get("cycle", 0)), meta.get("version", ""), status.outcome.name.lower(),
                      why=status.summary[:240] if status.intervened else "")
        dur = time.perf_counter_ns() - t0
        self.stats.record(dur)
        self.span(int(meta.get("cycle", 0)), t_wall, dur, since_state_us=(t_wall - stamp) // 1000 if stamp else -1)
        if self.guard.estopped and status.outcome.name != "ESTOPPED":
            self.get_logger().error(f"e-stop latched: {status.summary}")
            self._publish_estop_state()
        elif status.outcome.name == "ESTOPPED":
            self.get_logger().warning(f"holding: {status.summary}", throttle_duration_sec=2.0)

    # --- watchdog and stop ---------------------------------------------------------------------
    def _watchdog(self) -> None:
        self._wd_timer.cancel()  # one shot per state
        if not self.active or self._q is None or self._served_stamp >= self._state_stamp:
            return
        self._served_stamp = self._state_stamp  # this cycle is answered by the watchdog
        self.stats.deadline_misses += 1
        self._misses_in_row += 1
        was = self.guard.estopped
        cmd, status = self.guard.tick(time.monotonic(), self._q, self._qd)
        self.holds += status.outcome.name in ("HELD", "ESTOPPED")
        self._publish(cmd, self._state_stamp, self._state_cycle, "", status.outcome.name.lower())
        if self.guard.estopped != was:
            self.get_logger().error(f"e-stop latched: {status.summary}")
            self._publish_estop_state()

    def _send_hold(self, why: str) -> None:
        """The stop: hold at the measured pose (what the guard's hold command is)."""
        if self._q is None:
            return
        self.holds += 1
        status = "estopped" if self.guard is not None and self.guard.estopped else "held"
        self._publish(self._q, self._state_stamp, self._state_cycle, "", status, why=why)

    def _publish(self, cmd: np.ndarray, stamp: int, cycle: int, version, status: str, why: str = "") -> None:
        meta = {"stamp_ns": stamp, "cycle": cycle, "version": version, "status": status}
        if why:
            meta["why"] = why.replace(";", ",").replace("=", ":")
        self.cmd_pub.publish(array_msg(cmd, meta))

    def _publish_estop_state(self) -> None:
        latched = self.guard is not None and self.guard.estopped
        reason = ""
        if latched:
            rep = self.guard.report()
            reason = f"{rep['estop_cause']}: {rep['estop_detail']}"
        st = DiagnosticStatus(level=ERROR if latched else OK, name=f"{self.get_fully_qualified_name()}/estop",
                              message=f"e-stop latched: {reason}" if latched else "e-stop clear",
                              hardware_id=self.get_fully_qualified_name())
        st.values = [KeyValue(key="estopped", value=str(latched).lower())]
        self.estop_pub.publish(st)

    def _on_estop(self, request, response):
        if self.guard is None:
            response.success, response.message = False, "not configured"
            return response
        self.guard.estop("~/estop service call")
        self._send_hold("e-stop requested")
        self._publish_estop_state()
        response.success, response.message = True, "e-stop latched"
        return response

    def _on_reset(self, request, response):
        if self.guard is None or self._q is None:
            response.success, response.message = False, "no joint state yet: reset needs a measured pose"
            return response
        ok = self.guard.reset(self._q, self._qd)
        self._misses_in_row = 0
        self._publish_estop_state()
        response.success = bool(ok)
        response.message = ("e-stop cleared; the next targets ramp from the measured pose" if ok
                            else self.guard.last_reset_refusal)
        return response

    # --- runtime hooks ---------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        vals: dict[str, object] = {"active": self.active, "holds": self.holds, "refused_inputs": self.refused,
                                   "misses_in_row": self._misses_in_row, "last_error": self.last_error}
        if self.guard is not None:
            vals["estopped"] = self.guard.estopped
            rep = self.guard.report()
            vals["estop_cause"] = rep["estop_cause"] or ""
            vals["phase"] = rep["phase"]
            for k, v in rep["counters"].items():
                vals[f"interventions.{k}"] = v
        return vals

    def diagnostic_level(self):
        if self.guard is not None and self.guard.estopped:
            return ERROR, "e-stop latched"
        if not self.active:
            return WARN, "inactive: not commanding"
        if self._misses_in_row:
            return WARN, f"holding: {self._misses_in_row} cycle(s) without a policy command"
        return OK, "guarding"

    def on_exit(self) -> None:
        """SIGINT/SIGTERM: the last command the robot gets is the hold at the measured pose."""
        if self._q is not None:
            self._send_hold("shutdown")
        self.active = False


main = main_for(SafetyNode)

if __name__ == "__main__":
    raise SystemExit(main())
