"""`safety` (lifecycle): the SafetyWrapper between the policy and the robot; watchdog and e-stop.

Subscribes ``policy/joint_target`` and ``joint_states`` (by joint name); publishes the safe command
on ``forward_position_controller/commands`` (``command_type``: ``float64_array`` = Float64MultiArray
in URDF joint order for ros2_control's forward_command_controller, meta ``stamp_ns;cycle;version;status``
in ``layout.dim[0].label``; ``joint_trajectory`` = trajectory_msgs/JointTrajectory with one point
reached in one period, for joint_trajectory_controller, the same meta in ``header.frame_id``), the
latched e-stop state on ``safety/estop_state`` (diagnostic_msgs/DiagnosticStatus, transient_local:
level ERROR + reason while latched) and /diagnostics. Services: ``~/estop`` and ``~/reset``
(std_srvs/Trigger). A person's teleop targets on ``intervention`` (sensor_msgs/JointState) take over the policy's
cycles through the same SafetyWrapper (`tinker_safety.takeover.Takeover`); each cycle served from them is marked
``intervention=1`` on the command and published on ``safety/intervened`` (target and measured pose) for the
experience bridge.

Every limit is the SafetyWrapper's, every decision between topics `tinker_safety.guard_cycle.GuardCycle`'s
(trusted states, cycles and their deadline on this node's monotonic clock, misses in a row, late commands,
the policy's lifecycle, the e-stop). This node turns messages into its calls and adds what only ROS sees:

- the number of publishers on ``joint_states`` (`tinker_safety.state_gate.StateGate` refuses states while
  there is more than one) and the simulator's declared episode starts (``episode=E`` in the frame_id);
- **policy lifecycle**: the policy's ``transition_event`` (the standard lifecycle topic of ``policy_node``)
  tells a deactivated policy from a dead one;
- **E-stop**: only ``~/reset`` with a trusted measured state clears it. No lifecycle transition does:
  activate keeps a latched e-stop, and one latched before cleanup is latched again at configure;
- **stale inputs** (`tinker.runtime.NodeRuntime.watch_subscription`): the policy's commands and
  ``joint_states`` are ERROR in /diagnostics when silent longer than ``input_timeout``; the policy's
  commands only while the policy is active;
- **one node per name**: another node with this node's fully qualified name on the domain (a second
  graph) makes configure fail; seen within ``NAME_CHECK_WINDOW_S`` of start-up the process refuses to
  run (exit 3), seen later it is an ERROR diagnostic.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
from lifecycle_msgs.msg import State, TransitionEvent
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from tinker.runtime import ERROR, OK, WARN, NodeRuntime, Param, main_for
from tinker.wire import (COMMAND_QOS, LATCHED_QOS, SENSOR_QOS, JointMap, array_msg, decode_meta, encode_meta, read_array,
                         stamp_ns, state_tags)
from tinker_safety.guard_cycle import Command, GuardCycle
from tinker_safety.state_gate import StateGate
from tinker_safety.takeover import Takeover
from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.input_ages import Level

COMMAND_TYPES = ("float64_array", "joint_trajectory")
"""Command message types: forward_command_controller's Float64MultiArray, joint_trajectory_controller's JointTrajectory."""
NAME_CHECK_WINDOW_S = 6.0
"""Seconds after start-up in which a namesake on the domain makes the process refuse to run. Fast DDS
re-announces participants every 3 s, so a namesake missed in the first burst shows within this window."""
TRANSITION_QOS = 10
"""Depth of the policy's transition_event subscription (reliable, volatile: what rclpy publishes with)."""
_RECONF = " Changed only while unconfigured; takes effect at the next configure."
_FIXED = " Fixed at start-up."
PARAMS = {
    "urdf": Param("", "Robot URDF path; '' = kuka_iiwa/model.urdf from pybullet_data." + _RECONF),
    "config": Param("", "Safety YAML (safety.config.SafetyConfig); '' = safety/config/kuka_iiwa.yaml. Its "
                        "watchdog_misses_to_estop is the number of missed cycles in a row that latch the e-stop." + _RECONF),
    **{name: Param(default, f"Topic or node name: {what}." + _FIXED, read_only=True) for name, default, what in (
        ("policy_command_topic", "policy/joint_target", "joint targets from the policy"),
        ("command_topic", "forward_position_controller/commands", "safe commands to the robot"),
        ("joint_states_topic", "joint_states", "the robot's measured state"),
        ("estop_state_topic", "safety/estop_state", "latched e-stop state"),
        ("intervention_topic", "", "a person's teleop joint targets (sensor_msgs/JointState); empty: no takeover"),
        ("intervened_topic", "safety/intervened", "each cycle served from teleop: target and measured pose"),
        ("policy_node", "policy", "the policy lifecycle node (its transition_event tells a deactivated policy "
                                  "from a dead one)"))},
    "command_type": Param("float64_array", "Command message: float64_array (Float64MultiArray, "
                                           "forward_command_controller) or joint_trajectory (JointTrajectory, "
                                           "joint_trajectory_controller)." + _FIXED, read_only=True),
    "hold_deadline": Param(0.6, "Fraction of the control period after a state before the hold goes out (a missed "
                                "cycle). Takes effect at the next state.", (0.05, 0.95)),
    "max_state_age": Param(0.5, "s: a JointState stamped further in the past than this (node clock) is refused and "
                                "the robot held. Takes effect at the next state.", (0.01, 10.0)),
    "max_state_future": Param(0.1, "s: a JointState stamped further in the future than this (node clock) is "
                                   "refused and the robot held.", (0.0, 10.0)),
    "state_jump_tolerance": Param(0.2, "rad beyond the URDF velocity limit times the time between two states' "
                                       "arrivals; a larger jump is an implausible state.", (0.0, 3.0)),
    "state_quarantine": Param(0.5, "s: two implausible states within this time refuse every state for this long "
                                   "(two interleaved sources).", (0.0, 60.0)),
    "intervention_max_age": Param(0.2, "s: a teleop target (intervention topic) replaces the policy's while its stamp "
                                       "is at most this old (node clock); older ones are refused, and control "
                                       "returns to the policy this long after the person stops.", (0.01, 5.0)),
    "intervention_max_future": Param(0.1, "s: a teleop target stamped further in the future than this (node clock) "
                                          "is refused.", (0.0, 10.0)),
}
TAKEOVER_PARAMS = ("intervention_max_age", "intervention_max_future")
GATE_PARAMS = ("max_state_age", "max_state_future", "state_jump_tolerance", "state_quarantine")


class SafetyNode(NodeRuntime, LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("safety", **kwargs)
        self._init_runtime("safety", PARAMS)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.add_post_set_parameters_callback(self._after_set_parameters)
        self.command_type = self.param("command_type")
        if self.command_type not in COMMAND_TYPES:
            raise ConfigError(f"safety.command_type: expected one of {list(COMMAND_TYPES)}, got {self.command_type!r}")
        self.cycle = GuardCycle(self)  # this node is its Ports
        self._estop_carry = self.namesake = self.last_error = ""
        self._names_checked, self.refused = 0.0, 0
        self._subs, self._srvs, self._own_timers = [], [], []
        # publishers live for the node's whole life: deactivate keeps them, the stop needs them
        cmd_type = JointTrajectory if self.command_type == "joint_trajectory" else Float64MultiArray
        self.cmd_pub = self.create_publisher(cmd_type, self.param("command_topic"), COMMAND_QOS)
        self.estop_pub = self.create_publisher(DiagnosticStatus, self.param("estop_state_topic"), LATCHED_QOS)
        self.intervened_pub = self.create_publisher(Float64MultiArray, self.param("intervened_topic"), COMMAND_QOS)
        self._name_timer = self.create_timer(0.5, self._check_namesake)
        self._constructed = time.monotonic()

    @property
    def active(self) -> bool:
        return self.cycle.active

    # --- parameters ---------------------------------------------------------------------------
    def _on_set_parameters(self, params) -> SetParametersResult:
        """Refuse, with the reason, what cannot take effect now (ranges and read-only are rclpy's)."""
        for prm in params:
            if prm.name in ("urdf", "config"):
                if self.cycle.guard is not None:
                    return SetParametersResult(successful=False, reason=(
                        f"safety.{prm.name}: takes effect at configure; the node is configured: deactivate and "
                        f"cleanup first"))
                v = str(prm.value or "")
                if v and not Path(v).is_file():
                    return SetParametersResult(successful=False, reason=f"safety.{prm.name}: file not found: {v}")
        return SetParametersResult(successful=True)

    def _after_set_parameters(self, params) -> None:
        """The state checks take their limits at once; hold_deadline too: the deadline's one-shot timer is made
        anew with it (a running executor does not see a changed period of an existing timer)."""
        if self.cycle.gate is not None:
            self.cycle.gate.configure(*(self.param(n) for n in GATE_PARAMS))
        if self.cycle.takeover is not None:
            self.cycle.takeover.configure(*(self.param(n) for n in TAKEOVER_PARAMS))
        if any(prm.name == "hold_deadline" for prm in params) and self._own_timers:
            armed = not self._wd_timer.is_canceled()
            self.destroy_entities(self._own_timers)
            self._wd_timer = self.create_timer(self._deadline_s(), self._on_deadline)
            if not armed:
                self._wd_timer.cancel()
            self._own_timers = [self._wd_timer]

    def _check_namesake(self) -> None:
        """Another node with this node's name on the domain: refuse to run while starting, ERROR later."""
        up = time.monotonic() - self._constructed
        if up > NAME_CHECK_WINDOW_S and time.monotonic() - self._names_checked < 2.0:
            return
        self._names_checked = time.monotonic()
        me = (self.get_name(), self.get_namespace())
        twins = sum(1 for n, ns in self.get_node_names_and_namespaces() if (n, ns) == me)
        if twins <= 1:
            self.namesake = ""
            return
        self.namesake = (f"{twins - 1} other node(s) named {self.get_fully_qualified_name()} on this ROS domain "
                         f"(a second graph with the same names?)")
        if up <= NAME_CHECK_WINDOW_S:
            self.fatal = f"{self.namesake}: refusing to run; give this graph its own namespace or ROS_DOMAIN_ID"
        else:
            self.get_logger().error(self.namesake, throttle_duration_sec=5.0)

    # --- lifecycle ----------------------------------------------------------------------------
    def on_configure(self, state) -> TransitionCallbackReturn:
        g = self.param
        self._check_namesake()
        if self.namesake:
            self.last_error = f"configure refused: {self.namesake}"
            self.get_logger().error(self.last_error)
            return TransitionCallbackReturn.FAILURE
        try:
            from tinker_safety.config import DEFAULT_CONFIG_PATH
            from tinker_safety.safety_wrapper import SafetyWrapper
            from tinker_core.config import read_yaml

            cfg = read_yaml(g("config") or DEFAULT_CONFIG_PATH)
            if float(cfg.get("watchdog_timeout", self.period)) == float(cfg.get("control_period", self.period)):
                cfg["watchdog_timeout"] = self.period
            cfg["control_period"] = self.period
            guard = SafetyWrapper.from_urdf(g("urdf") or None, cfg)
            self.cycle.configure(guard, StateGate(guard.limits.velocity, self.resolve_topic_name(g("joint_states_topic")),
                                                  *(g(n) for n in GATE_PARAMS)))
            self.names = list(guard.limits.names)
            self.jmap = JointMap(self.names, "safety.joint_states")
            teleop = g("intervention_topic")  # empty: nothing on the graph can take over from the policy
            self.tmap = JointMap(self.names, "safety.intervention")
            self.cycle.takeover = Takeover(len(self.names), self.resolve_topic_name(teleop),
                                           *(g(n) for n in TAKEOVER_PARAMS)) if teleop else None
            if self._estop_carry:  # an e-stop latched before cleanup stays latched: only ~/reset clears it
                guard.estop(f"latched before cleanup ({self._estop_carry})")
            watch = self.watch_subscription
            self._subs = [
                watch(Float64MultiArray, g("policy_command_topic"), self._on_command, COMMAND_QOS,
                      Level.ERROR if self.cycle.policy_active else None),
                watch(JointState, g("joint_states_topic"), self._on_joints, SENSOR_QOS),
                watch(TransitionEvent, f"{g('policy_node')}/transition_event", self._on_policy_transition,
                      TRANSITION_QOS, None),
                *([watch(JointState, teleop, self._on_intervention, SENSOR_QOS, None)] if teleop else [])]
            self._js_sub, self._teleop_sub = self._subs[1], (self._subs[3] if teleop else None)
            self._srvs = [self.create_service(Trigger, "~/estop", self._on_estop),
                          self.create_service(Trigger, "~/reset", self._on_reset)]
            self._wd_timer = self.create_timer(self._deadline_s(), self._on_deadline)
            self._wd_timer.cancel()  # armed by each state (no ``autostart`` argument: older rclpy lacks it)
            self._own_timers = [self._wd_timer]
        except Exception as e:  # a failed configure leaves nothing behind and can be retried
            self._release()
            self.last_error = f"configure failed: {e}"
            self.get_logger().error(self.last_error)
            return TransitionCallbackReturn.FAILURE
        self.last_error = ""
        self.estop_changed()
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state) -> TransitionCallbackReturn:
        self.cycle.activate()
        self.estop_changed()
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        self.cycle.deactivate()
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        if self.cycle.active:
            self.cycle.hold("shutdown")
        self.cycle.active = False
        self._release()
        return TransitionCallbackReturn.SUCCESS

    def _release(self) -> None:
        guard = self.cycle.guard
        if guard is not None and guard.estopped:
            rep = guard.report()
            self._estop_carry = f"{rep['estop_cause']}: {rep['estop_detail']}"
        self.destroy_entities(self._subs + self._srvs + self._own_timers)
        self._subs, self._srvs, self._own_timers = [], [], []
        self.cycle.release()

    def _deadline_s(self) -> float:
        return float(self.param("hold_deadline")) * self.period

    # --- messages in --------------------------------------------------------------------------
    def _on_joints(self, msg: JointState) -> None:
        try:
            q, qd = self.jmap.read(msg)
        except ValidationError as e:
            self._refuse(e)
            return
        cycle, episode = state_tags(msg)
        self.cycle.state(q, qd, stamp_ns(msg.header), cycle, episode, self._js_sub.get_publisher_count(),
                         self.get_clock().now().nanoseconds, time.monotonic_ns())

    def _on_intervention(self, msg: JointState) -> None:
        takeover = self.cycle.takeover
        try:
            target = self.tmap.read(msg)[0]
        except ValidationError as e:
            takeover.refuse("shape", str(e))
            return
        takeover.offer(target, stamp_ns(msg.header), self._teleop_sub.get_publisher_count(),
                       self.get_clock().now().nanoseconds)

    def _on_command(self, msg: Float64MultiArray) -> None:
        t_wall, t0 = time.time_ns(), time.perf_counter_ns()
        meta = decode_meta(msg.layout.dim[0].label) if msg.layout.dim else {}
        valid = self.cycle.active and self.cycle.q is not None and not self.cycle.untrusted
        if valid:  # (a command that cannot go on is not read: only holds answer it)
            try:
                target, _ = read_array(msg, len(self.names), "safety.policy_command")
            except ValidationError as e:
                self._refuse(e)
                valid = False
                target = np.asarray(msg.data, dtype=np.float64)  # the guard holds, counts and may latch
        else:
            target = np.asarray(msg.data, dtype=np.float64)
        if not self.cycle.command(target, valid, meta, self.get_clock().now().nanoseconds):
            return
        dur = time.perf_counter_ns() - t0
        self.stats.record(dur)
        stamp = int(meta["stamp_ns"]) if meta.get("stamp_ns", "").isdigit() else 0
        self.span(int(meta.get("cycle", 0)), t_wall, dur, since_state_us=(t_wall - stamp) // 1000 if stamp else -1)

    def _on_policy_transition(self, msg: TransitionEvent) -> None:
        """The policy's primary states only: a late event can then only be followed by the rest of its chain
        (one reliable writer, in order), and every chain that re-activates ends with ``active``."""
        goal = msg.goal_state.id
        if goal in (State.PRIMARY_STATE_UNCONFIGURED, State.PRIMARY_STATE_INACTIVE, State.PRIMARY_STATE_ACTIVE,
                    State.PRIMARY_STATE_FINALIZED):
            self.cycle.policy_lifecycle(goal == State.PRIMARY_STATE_ACTIVE, msg.goal_state.label)

    def _on_deadline(self) -> None:
        misses = self.cycle.deadline_misses
        self.cycle.deadline()
        self.stats.deadline_misses += self.cycle.deadline_misses - misses

    def _refuse(self, err: Exception) -> None:
        self.refused += 1
        self.last_error = str(err)
        self.get_logger().warning(f"input refused, holding: {err}", throttle_duration_sec=1.0)

    def _on_estop(self, request, response):
        if self.cycle.guard is None:
            response.success, response.message = False, "not configured"
            return response
        self.cycle.estop("~/estop service call")
        response.success, response.message = True, "e-stop latched"
        return response

    def _on_reset(self, request, response):
        response.success, response.message = self.cycle.reset()
        if response.success:
            self._estop_carry = ""
        return response

    def callback_failed(self, topic: str, err: Exception) -> None:
        """A failed callback leaves the guard's state in doubt: the e-stop latches (holds at the measured pose)."""
        super().callback_failed(topic, err)
        if self.cycle.guard is not None and not self.cycle.guard.estopped:
            try:
                self.cycle.estop(f"internal error in the callback on {topic}: {err!r}")
            except Exception as e2:  # the hold itself failed: nothing more can be done here; logged
                self.get_logger().error(f"e-stop after a failed callback failed too: {e2!r}")

    # --- GuardCycle's ports ----------------------------------------------------------------------
    def send(self, command: Command) -> None:
        meta = {"stamp_ns": command.stamp, "cycle": command.cycle, "version": command.version,
                "status": command.status}
        if command.why:
            meta["why"] = command.why.replace(";", ",").replace("=", ":")
        if command.teleop is not None:  # served from a person's target: marked, and recorded for the learner
            meta["intervention"] = 1
            self.intervened_pub.publish(array_msg(np.concatenate([command.teleop, command.measured]),
                                                  {"stamp_ns": command.stamp, "cycle": command.cycle}))
        if self.command_type == "joint_trajectory":
            msg = JointTrajectory(joint_names=self.names)  # header.stamp 0: start now
            msg.header.frame_id = encode_meta(meta)
            sec, nsec = divmod(int(self.period * 1e9), 1_000_000_000)
            pt = JointTrajectoryPoint(positions=command.q.tolist())
            pt.time_from_start.sec, pt.time_from_start.nanosec = sec, nsec
            msg.points = [pt]
            self.cmd_pub.publish(msg)
        else:
            self.cmd_pub.publish(array_msg(command.q, meta))

    def arm_deadline(self) -> None:
        self._wd_timer.reset()

    def cancel_deadline(self) -> None:
        if self._own_timers:
            self._wd_timer.cancel()

    def log(self, level: str, message: str) -> None:
        # one call site per severity: rclpy's logger refuses a call site whose severity changes
        if level == "error":
            self.get_logger().error(message)
        elif level == "warning":
            self.get_logger().warning(message, throttle_duration_sec=2.0)
        else:
            self.get_logger().info(message)

    def estop_changed(self) -> None:
        """Publish the latched e-stop state (transient_local: a late subscriber gets the newest)."""
        guard = self.cycle.guard
        latched = guard is not None and guard.estopped
        reason = ""
        if latched:
            rep = guard.report()
            reason = f"{rep['estop_cause']}: {rep['estop_detail']}"
        st = DiagnosticStatus(level=ERROR if latched else OK, name=f"{self.get_fully_qualified_name()}/estop",
                              message=f"e-stop latched: {reason}" if latched else "e-stop clear",
                              hardware_id=self.get_fully_qualified_name())
        st.values = [KeyValue(key="estopped", value=str(latched).lower())]
        self.estop_pub.publish(st)

    def expect_commands(self, expected: bool, arrived: bool) -> None:
        """The policy's commands are an input that must flow (ERROR when stale) only while it is active."""
        topic = self._subs[0].topic_name if self._subs else None
        if topic is None:
            return
        if expected and not arrived:
            self.inputs.declare(topic, Level.ERROR)  # waited for again: its grace starts now
        elif expected:
            self.inputs.set_stale_level(topic, Level.ERROR)
        else:
            self.inputs.set_stale_level(topic, None)

    # --- runtime hooks ---------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        c = self.cycle
        vals: dict[str, object] = {"active": c.active, "holds": c.holds, "no_command": c.no_command,
                                   "refused_inputs": self.refused, "state_refusal": c.untrusted,
                                   "episode_starts": c.gate.episode_starts if c.gate else 0,
                                   "stale_commands": c.order.dropped,
                                   **{f"refused_states.{k}": v for k, v in c.refused_states.items()},
                                   "policy_active": c.policy_active, "ramp_restarts": c.ramp_restarts,
                                   "misses_in_row": c.misses_in_row,
                                   "namesake": self.namesake, "command_type": self.command_type,
                                   "last_error": self.last_error}
        if c.guard is not None:
            vals["estopped"] = c.guard.estopped
            rep = c.guard.report()
            vals["estop_cause"] = rep["estop_cause"] or ""
            vals["phase"] = rep["phase"]
            for k, v in rep["counters"].items():
                vals[f"interventions.{k}"] = v
        if c.takeover is not None:
            vals.update({f"teleop.{k}": v for k, v in c.takeover.counters().items()},
                        **{"teleop.engaged": c.takeover.engaged, "teleop.last_refusal": c.takeover.last_refusal})
        return vals

    def diagnostic_level(self):
        c = self.cycle
        if self.namesake:
            return ERROR, self.namesake
        if c.guard is not None and c.guard.estopped:
            return ERROR, "e-stop latched"
        if c.untrusted:
            return ERROR, f"holding: state refused: {c.untrusted}"
        if c.guard is None:
            return WARN, f"unconfigured{': ' + self.last_error if self.last_error else ''}"
        if not c.active:
            return WARN, "inactive: not commanding"
        if not c.policy_active:
            return WARN, "holding: the policy is not active"
        if c.misses_in_row:
            return WARN, f"holding: {c.misses_in_row} cycle(s) without a policy command"
        return OK, "guarding"

    def on_exit(self) -> None:
        """SIGINT/SIGTERM: the last command the robot gets is the hold at the measured pose (none when this
        node refused to run: the command topic may be another graph's)."""
        if not self.fatal:
            self.cycle.hold("shutdown")
        self.cycle.active = False


main = main_for(SafetyNode)

if __name__ == "__main__":
    raise SystemExit(main())
