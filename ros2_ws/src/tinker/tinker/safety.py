"""`safety` (lifecycle): the SafetyWrapper between the policy and the robot; watchdog and e-stop.

Subscribes ``policy/joint_target`` and ``joint_states`` (by joint name); publishes the safe command
on ``forward_position_controller/commands`` (``command_type``: ``float64_array`` = Float64MultiArray
in URDF joint order for ros2_control's forward_command_controller, meta ``stamp_ns;cycle;version;status``
in ``layout.dim[0].label``; ``joint_trajectory`` = trajectory_msgs/JointTrajectory with one point
reached in one period, for joint_trajectory_controller, the same meta in ``header.frame_id``), the
latched e-stop state on ``safety/estop_state`` (diagnostic_msgs/DiagnosticStatus, transient_local:
level ERROR + reason while latched) and /diagnostics. Services: ``~/estop`` and ``~/reset``
(std_srvs/Trigger).

Every limit is the SafetyWrapper's (safety/). What the node adds is what only the ROS side can see:

- **Trust no state** (`tinker_safety.state_gate.StateGate`): a JointState is refused, and the robot held at
  the last command sent, when ``joint_states`` has more than one publisher (a spoofer, a second graph, a bag
  played into a live robot), when its stamp lies more than ``max_state_future`` ahead of this node's clock or
  more than ``max_state_age`` behind it, or when it jumps further from the previous state than the
  URDF velocity limit allows in the time between their arrivals (this node's monotonic clock) plus
  ``state_jump_tolerance``; a second such jump within ``state_quarantine`` s (states from two sources,
  interleaved) makes every state refused for ``state_quarantine`` s. The diagnostic is ERROR and names the
  topic. The simulated robot declares its episode resets (``episode=E`` in the state's frame_id, from the
  sole publisher): that state skips the jump check and rebases the SafetyWrapper (a new start ramp from it).
- **Watchdog on the node's monotonic clock, never on message stamps**: every trusted state opens a
  cycle and arms a one-shot timer; a policy command answering it (same stamp, or no stamp) closes the
  cycle; when ``hold_deadline`` (fraction of the period) passes first, the cycle is missed: hold at
  the measured pose. A late command still goes on when it answers the newest state or the one before;
  older ones are dropped and counted in ``stale_commands`` (`tinker_safety.command_order.CommandOrder`:
  the robot never steps back to an older plan). ``watchdog_misses_to_estop`` (safety YAML, via ``config``) missed cycles **in a
  row** latch the e-stop; one served cycle resets the count. So a policy stall shorter than
  ``(watchdog_misses_to_estop - 1)`` periods never latches (the tolerance), a dead policy latches
  within ``watchdog_misses_to_estop`` periods.
- **Policy lifecycle**: the policy's ``transition_event`` (the standard lifecycle topic of
  ``policy_node``) tells a deactivated policy from a dead one: while it is not active, each cycle is
  held and no miss counted; its first command after re-activation starts through the start ramp.
- **E-stop**: only ``~/reset`` with a valid measured state clears it. No lifecycle transition does:
  activate keeps a latched e-stop, and one latched before cleanup is latched again at configure.
- **Stale inputs** (`tinker.runtime.NodeRuntime.watch_subscription`): the policy's commands and
  ``joint_states`` are ERROR in /diagnostics when silent longer than ``input_timeout`` (naming the topic
  and its age); the policy's commands only while the policy is active (deactivated, its silence is the
  WARN hold below; re-activated, they are waited for again).
- **One node per name**: another node with this node's fully qualified name on the domain (a second
  graph) makes configure fail; seen within ``NAME_CHECK_WINDOW_S`` of start-up the process refuses to
  run (exit 3), seen later it is an ERROR diagnostic (and the second graph's second publishers on
  ``joint_states`` hold the loop).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus, KeyValue
from lifecycle_msgs.msg import State, TransitionEvent
from rcl_interfaces.msg import FloatingPointRange, ParameterDescriptor, ParameterType, SetParametersResult
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from tinker.runtime import ERROR, OK, WARN, NodeRuntime, main_for
from tinker.wire import (COMMAND_QOS, LATCHED_QOS, SENSOR_QOS, JointMap, array_msg, decode_meta, encode_meta, read_array,
                         stamp_ns, state_tags)
from tinker_safety.command_order import CommandOrder
from tinker_safety.state_gate import StateGate
from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.input_ages import Level

COMMAND_TYPES = ("float64_array", "joint_trajectory")
"""Command message types: forward_command_controller's Float64MultiArray, joint_trajectory_controller's JointTrajectory."""
NAME_CHECK_WINDOW_S = 6.0
"""Seconds after start-up in which a namesake on the domain makes the process refuse to run. Fast DDS
re-announces participants every 3 s, so a namesake missed in the first burst shows within this window."""
TRANSITION_QOS = 10
"""Depth of the policy's transition_event subscription (reliable, volatile: what rclpy publishes with)."""


def _descriptor(description: str, *, lo: float | None = None, hi: float | None = None, read_only: bool = False,
                kind: int = ParameterType.PARAMETER_NOT_SET) -> ParameterDescriptor:
    d = ParameterDescriptor(description=description, read_only=read_only, type=kind)
    if lo is not None:
        d.floating_point_range = [FloatingPointRange(from_value=float(lo), to_value=float(hi), step=0.0)]
    return d


class SafetyNode(NodeRuntime, LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("safety", **kwargs)
        self._init_runtime("safety")
        p = self.declare_parameter
        S = ParameterType.PARAMETER_STRING
        D = ParameterType.PARAMETER_DOUBLE
        reconf = " Changed only while unconfigured; takes effect at the next configure."
        p("urdf", "", _descriptor("Robot URDF path; '' = kuka_iiwa/model.urdf from pybullet_data." + reconf, kind=S))
        p("config", "", _descriptor("Safety YAML (safety.config.SafetyConfig); '' = safety/config/kuka_iiwa.yaml. "
                                    "Its watchdog_misses_to_estop is the number of missed cycles in a row that "
                                    "latch the e-stop." + reconf, kind=S))
        for name, default, what in (("policy_command_topic", "policy/joint_target", "joint targets from the policy"),
                                    ("command_topic", "forward_position_controller/commands", "safe commands to the robot"),
                                    ("joint_states_topic", "joint_states", "the robot's measured state"),
                                    ("estop_state_topic", "safety/estop_state", "latched e-stop state"),
                                    ("policy_node", "policy", "the policy lifecycle node (its transition_event "
                                                              "tells a deactivated policy from a dead one)")):
            p(name, default, _descriptor(f"Topic or node name: {what}. Fixed at start-up.", read_only=True, kind=S))
        p("command_type", "float64_array",
          _descriptor("Command message: float64_array (Float64MultiArray, forward_command_controller) or "
                      "joint_trajectory (JointTrajectory, joint_trajectory_controller). Fixed at start-up.",
                      read_only=True, kind=S))
        p("hold_deadline", 0.6, _descriptor("Fraction of the control period after a state before the hold goes "
                                            "out (a missed cycle). Takes effect at the next state.",
                                            lo=0.05, hi=0.95, kind=D))
        p("max_state_age", 0.5, _descriptor("s: a JointState stamped further in the past than this (node clock) "
                                            "is refused and the robot held. Takes effect at the next state.",
                                            lo=0.01, hi=10.0, kind=D))
        p("max_state_future", 0.1, _descriptor("s: a JointState stamped further in the future than this (node "
                                               "clock) is refused and the robot held.", lo=0.0, hi=10.0, kind=D))
        p("state_jump_tolerance", 0.2, _descriptor("rad beyond the URDF velocity limit times the time between two "
                                                   "states' arrivals; a larger jump is an implausible state.",
                                                   lo=0.0, hi=3.0, kind=D))
        p("state_quarantine", 0.5, _descriptor("s: two implausible states within this time refuse every state "
                                               "for this long (two interleaved sources).",
                                               lo=0.0, hi=60.0, kind=D))
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.add_post_set_parameters_callback(self._after_set_parameters)
        self.command_type = self.get_parameter("command_type").value
        if self.command_type not in COMMAND_TYPES:
            raise ConfigError(f"safety.command_type: expected one of {list(COMMAND_TYPES)}, got {self.command_type!r}")
        self.guard = None
        self.gate: StateGate | None = None
        self.active = False
        self._q = self._qd = None  # the last TRUSTED measured state
        self._state_stamp = 0
        self._state_cycle = 0
        self._state_seq = 0  # trusted states seen: the watchdog's cycles (never message stamps)
        self._served_seq = 0
        self._misses_in_row = 0
        self._last_cmd_t = 0.0
        self._last_sent: np.ndarray | None = None
        self.untrusted = ""  # why the newest state was refused ('' = trusted)
        self.refused_states: dict[str, int] = {}  # by kind (StateGate.check)
        self.policy_active = True  # until the policy's transition_event says otherwise
        self._restart_ramp = False  # activated before any state: the first state starts the ramp
        self._policy_returning = False  # the policy was seen inactive: its next command starts the ramp
        self._estop_carry = ""
        self.namesake = ""
        self._names_checked = 0.0
        self.holds = 0
        self.order = CommandOrder()  # which late commands may still go on (stale_commands: the ones that may not)
        self.no_command = 0
        self.ramp_restarts = 0  # safe-start ramps begun by activation or a returning policy
        self.refused = 0
        self.last_error = ""
        self._subs, self._srvs, self._own_timers = [], [], []
        # publishers live for the node's whole life: deactivate keeps them, the stop needs them
        cmd_type = JointTrajectory if self.command_type == "joint_trajectory" else Float64MultiArray
        self.cmd_pub = self.create_publisher(cmd_type, self.get_parameter("command_topic").value, COMMAND_QOS)
        self.estop_pub = self.create_publisher(DiagnosticStatus, self.get_parameter("estop_state_topic").value,
                                               LATCHED_QOS)
        self._name_timer = self.create_timer(0.5, self._check_namesake)
        self._constructed = time.monotonic()

    # --- parameters ---------------------------------------------------------------------------
    def _on_set_parameters(self, params) -> SetParametersResult:
        """Refuse, with the reason, what cannot take effect now (ranges and read-only are rclpy's)."""
        for prm in params:
            if prm.name in ("urdf", "config"):
                if self.guard is not None:
                    return SetParametersResult(successful=False, reason=(
                        f"safety.{prm.name}: takes effect at configure; the node is configured: deactivate and "
                        f"cleanup first"))
                v = str(prm.value or "")
                if v and not Path(v).is_file():
                    return SetParametersResult(successful=False, reason=f"safety.{prm.name}: file not found: {v}")
        return SetParametersResult(successful=True)

    def _after_set_parameters(self, params) -> None:
        """hold_deadline takes effect at once: the watchdog's one-shot timer is made anew with it (a running
        executor does not see a changed period of an existing timer)."""
        if self.gate is not None:  # the state checks take their limits at once
            g = lambda n: self.get_parameter(n).value  # noqa: E731
            self.gate.configure(g("max_state_age"), g("max_state_future"), g("state_jump_tolerance"),
                                g("state_quarantine"))
        if any(prm.name == "hold_deadline" for prm in params) and self._own_timers:
            armed = not self._wd_timer.is_canceled()
            self.destroy_entities(self._own_timers)
            self._wd_timer = self.create_timer(self._deadline_s(), self._watchdog)
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
        g = lambda n: self.get_parameter(n).value  # noqa: E731
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
            self.guard = SafetyWrapper.from_urdf(g("urdf") or None, cfg)
            self.names = list(self.guard.limits.names)
            self.jmap = JointMap(self.names, "safety.joint_states")
            self.gate = StateGate(self.guard.limits.velocity, self.resolve_topic_name(g("joint_states_topic")),
                                  g("max_state_age"), g("max_state_future"), g("state_jump_tolerance"),
                                  g("state_quarantine"))
            if self._estop_carry:  # an e-stop latched before cleanup stays latched: only ~/reset clears it
                self.guard.estop(f"latched before cleanup ({self._estop_carry})")
            watch = self.watch_subscription
            self._subs = [
                watch(Float64MultiArray, g("policy_command_topic"), self._on_command, COMMAND_QOS,
                      Level.ERROR if self.policy_active else None),
                watch(JointState, g("joint_states_topic"), self._on_joints, SENSOR_QOS),
                watch(TransitionEvent, f"{g('policy_node')}/transition_event", self._on_policy_transition,
                      TRANSITION_QOS, None)]
            self._js_sub = self._subs[1]
            self._srvs = [self.create_service(Trigger, "~/estop", self._on_estop),
                          self.create_service(Trigger, "~/reset", self._on_reset)]
            self._wd_timer = self.create_timer(self._deadline_s(), self._watchdog)
            self._wd_timer.cancel()  # armed by each state (no ``autostart`` argument: older rclpy lacks it)
            self._own_timers = [self._wd_timer]
        except Exception as e:  # a failed configure leaves nothing behind and can be retried
            self._release()
            self.last_error = f"configure failed: {e}"
            self.get_logger().error(self.last_error)
            return TransitionCallbackReturn.FAILURE
        self.last_error = ""
        self._publish_estop_state()
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state) -> TransitionCallbackReturn:
        if self._q is not None and not self.guard.estopped:
            self._start_ramp(self._q, self._qd)  # the start ramp begins at the measured pose
        self._restart_ramp = self._q is None
        self._served_seq = self._state_seq
        self._misses_in_row = 0
        self.active = True
        self._publish_estop_state()
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        self._send_hold("deactivated")
        self.active = False
        self._wd_timer.cancel()
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
        if self.guard is not None and self.guard.estopped:
            rep = self.guard.report()
            self._estop_carry = f"{rep['estop_cause']}: {rep['estop_detail']}"
        self.destroy_entities(self._subs + self._srvs + self._own_timers)
        self._subs, self._srvs, self._own_timers = [], [], []
        if self.guard is not None:
            self.guard.close()
        self.guard = self.gate = None
        self._q = self._qd = None
        self._last_sent = None
        self._last_cmd_t = 0.0

    def _deadline_s(self) -> float:
        return float(self.get_parameter("hold_deadline").value) * self.period

    # --- inputs -------------------------------------------------------------------------------
    def _on_joints(self, msg: JointState) -> None:
        try:
            q, qd = self.jmap.read(msg)
        except ValidationError as e:
            self._refuse(e)
            return
        stamp = stamp_ns(msg.header)
        cycle, episode = state_tags(msg)
        kind, why = self.gate.check(q, stamp, self._js_sub.get_publisher_count(),
                                    self.get_clock().now().nanoseconds, time.monotonic_ns(), episode)
        if why:
            self._refuse_state(kind, why)
            return
        if self.gate.new_episode:  # the simulator moved the arm itself: a new safe start from where it is now
            if not self.guard.rebase(q, qd):
                self._refuse_state("rebase", f"{self.gate.topic}: episode start: {self.guard.last_reset_refusal}")
                return
            self._last_sent = self.guard.last_command
            self.order.rebase(stamp)  # commands answering states before it were meant for another pose
        if self.untrusted:  # the guard's limits apply from this measured pose on, as for every command
            self.get_logger().info(f"{self.gate.topic}: states trusted again")
            self.untrusted = ""
        self._q, self._qd = q, qd
        if self._restart_ramp and self.active and not self.guard.estopped:
            self._start_ramp(q, qd)
            self._restart_ramp = False
        self._state_stamp = stamp
        self.order.state(stamp)
        self._state_cycle = cycle if cycle is not None else self._state_cycle + 1
        self._state_seq += 1
        if self.active:
            self._wd_timer.reset()  # this state's command is due within hold_deadline

    def _start_ramp(self, q: np.ndarray, qd: np.ndarray) -> None:
        """A new safe start from the measured pose (only while no e-stop is latched: reset would clear it).
        The guard forgets the last action, so the miss count starts again with the next one."""
        self.guard.reset(q, qd)
        self.ramp_restarts += 1
        self._misses_in_row, self._last_cmd_t = 0, 0.0

    def _refuse_state(self, kind: str, why: str) -> None:
        """An untrusted state: not used; the robot holds at the last command sent (never at that state)."""
        self.refused_states[kind] = self.refused_states.get(kind, 0) + 1
        if not self.untrusted:
            self.get_logger().error(f"state refused, holding: {why}")
        self.untrusted = why
        self._wd_timer.cancel()  # a refused state opens no cycle

    def _hold_untrusted(self) -> None:
        if self._last_sent is not None and self.active:
            self.holds += 1
            self._publish(self._last_sent, self._state_stamp, self._state_cycle, "", "held", why=self.untrusted)

    def _refuse(self, err: Exception) -> None:
        self.refused += 1
        self.last_error = str(err)
        self.get_logger().warning(f"input refused, holding: {err}", throttle_duration_sec=1.0)

    def _on_policy_transition(self, msg: TransitionEvent) -> None:
        """The policy's primary states only: a late event can then only be followed by the rest of its chain
        (one reliable writer, in order), and every chain that re-activates ends with ``active``."""
        goal = msg.goal_state.id
        if goal not in (State.PRIMARY_STATE_UNCONFIGURED, State.PRIMARY_STATE_INACTIVE, State.PRIMARY_STATE_ACTIVE,
                        State.PRIMARY_STATE_FINALIZED):
            return
        active = goal == State.PRIMARY_STATE_ACTIVE
        if active != self.policy_active:  # a deactivated policy's silence is no fault; an activated one is waited for
            self._expect_commands(active)
        if not active:
            self._policy_returning = True  # its next command starts through the ramp
            if self.policy_active:
                self._send_hold(f"policy {msg.goal_state.label}")
        self.policy_active = active

    def _on_command(self, msg: Float64MultiArray) -> None:
        if not self.active or self._q is None:
            return
        if self.untrusted:
            self._hold_untrusted()
            return
        t_wall, t0 = time.time_ns(), time.perf_counter_ns()
        meta = decode_meta(msg.layout.dim[0].label) if msg.layout.dim else {}
        valid = True
        try:
            target, _ = read_array(msg, len(self.names), "safety.policy_command")
        except ValidationError as e:
            self._refuse(e)
            valid = False
            target = np.asarray(msg.data, dtype=np.float64)  # the guard holds, counts and may latch
        stamp = int(meta["stamp_ns"]) if meta.get("stamp_ns", "").isdigit() else 0
        if meta.get("stop") == "1":
            self._send_hold("policy node stopped")
            return
        if valid and not self.order.accepts(stamp):  # too old to go on (tinker_safety.command_order)
            return
        if not self.policy_active:  # a command before its activation event: the policy is back
            self.policy_active, self._policy_returning = True, True
            self._expect_commands(True, arrived=True)
        if self._policy_returning and not self.guard.estopped:
            self._start_ramp(self._q, self._qd)
        self._policy_returning = False
        # feed + tick: a fresh action answers this cycle and ends a run of missed ones
        self._last_cmd_t = now = time.monotonic()
        self.guard.feed(target, now)
        cmd, status = self.guard.tick(now, self._q, self._qd)
        self.order.went_out(stamp)
        if stamp in (0, self._state_stamp):  # the answer to the newest state (a late one does not close it)
            self._served_seq = self._state_seq
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

    def _expect_commands(self, expected: bool, arrived: bool = False) -> None:
        """The policy's commands are an input that must flow (ERROR when stale) only while it is active.
        ``arrived``: one has just come (its arrival is already noted)."""
        topic = self._subs[0].topic_name if self._subs else None
        if topic is None:
            return
        if expected and not arrived:
            self.inputs.declare(topic, Level.ERROR)  # waited for again: its grace starts now
        elif expected:
            self.inputs.set_stale_level(topic, Level.ERROR)
        else:
            self.inputs.set_stale_level(topic, None)

    # --- watchdog and stop ---------------------------------------------------------------------
    def _watchdog(self) -> None:
        self._wd_timer.cancel()  # one shot per state
        if not self.active or self._q is None or self.untrusted or self._served_seq >= self._state_seq:
            return
        self._served_seq = self._state_seq  # this cycle is answered by the watchdog
        if not self.policy_active:  # a deactivated policy: hold, no miss
            self._send_hold("policy inactive")
            return
        self.stats.deadline_misses += 1
        self._misses_in_row += 1
        was = self.guard.estopped
        # the node's timer decided the cycle is missed: the tick must see the last action as stale even when
        # states came close together (never run an action twice)
        now = max(time.monotonic(), self._last_cmd_t + self.guard.config.watchdog_timeout + 1e-3)
        cmd, status = self.guard.tick(now, self._q, self._qd)
        limit = self.guard.config.watchdog_misses_to_estop
        if self._misses_in_row >= limit and self._last_cmd_t and not self.guard.estopped:
            # backstop, should the guard stop counting misses after an action it has consumed: the node's count
            # (in a row, since the last action the guard saw) latches too
            self.guard.estop(f"watchdog: {self._misses_in_row} cycles in a row without a policy command")
        self.holds += status.outcome.name in ("HELD", "ESTOPPED")
        self._publish(cmd, self._state_stamp, self._state_cycle, "", status.outcome.name.lower())
        self.order.went_out(self._state_stamp)  # this state's hold went out
        if self.guard.estopped != was:
            self.get_logger().error(f"e-stop latched: {status.summary}")
            self._publish_estop_state()

    def _send_hold(self, why: str) -> None:
        """The stop: hold at the measured pose (what the guard's hold command is), or at the last command
        sent while the state is not trusted."""
        if self._q is None:
            return
        if self.untrusted:
            self._hold_untrusted()
            return
        self.holds += 1
        status = "estopped" if self.guard is not None and self.guard.estopped else "held"
        self._publish(self._q, self._state_stamp, self._state_cycle, "", status, why=why)

    def _publish(self, cmd: np.ndarray | None, stamp: int, cycle: int, version, status: str, why: str = "") -> None:
        if cmd is None:  # the guard has no valid measured state yet: nothing may be commanded
            self.no_command += 1
            return
        meta = {"stamp_ns": stamp, "cycle": cycle, "version": version, "status": status}
        if why:
            meta["why"] = why.replace(";", ",").replace("=", ":")
        self._last_sent = np.array(cmd, dtype=np.float64)
        if self.command_type == "joint_trajectory":
            msg = JointTrajectory(joint_names=self.names)  # header.stamp 0: start now
            msg.header.frame_id = encode_meta(meta)
            sec, nsec = divmod(int(self.period * 1e9), 1_000_000_000)
            pt = JointTrajectoryPoint(positions=self._last_sent.tolist())
            pt.time_from_start.sec, pt.time_from_start.nanosec = sec, nsec
            msg.points = [pt]
            self.cmd_pub.publish(msg)
        else:
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
        if self.untrusted:
            response.success, response.message = False, f"reset refused: the measured state is not trusted: {self.untrusted}"
            return response
        ok = self.guard.reset(self._q, self._qd)
        if ok:
            self._misses_in_row, self._last_cmd_t = 0, 0.0
        self._estop_carry = "" if ok else self._estop_carry
        self._publish_estop_state()
        response.success = bool(ok)
        response.message = ("e-stop cleared; the next targets ramp from the measured pose" if ok
                            else self.guard.last_reset_refusal)
        return response

    # --- runtime hooks ---------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        vals: dict[str, object] = {"active": self.active, "holds": self.holds, "no_command": self.no_command, "refused_inputs": self.refused,
                                   "state_refusal": self.untrusted,
                                   "episode_starts": self.gate.episode_starts if self.gate else 0,
                                   "stale_commands": self.order.dropped,
                                   **{f"refused_states.{k}": v for k, v in self.refused_states.items()},
                                   "policy_active": self.policy_active, "ramp_restarts": self.ramp_restarts,
                                   "misses_in_row": self._misses_in_row,
                                   "namesake": self.namesake, "command_type": self.command_type,
                                   "last_error": self.last_error}
        if self.guard is not None:
            vals["estopped"] = self.guard.estopped
            rep = self.guard.report()
            vals["estop_cause"] = rep["estop_cause"] or ""
            vals["phase"] = rep["phase"]
            for k, v in rep["counters"].items():
                vals[f"interventions.{k}"] = v
        return vals

    def diagnostic_level(self):
        if self.namesake:
            return ERROR, self.namesake
        if self.guard is not None and self.guard.estopped:
            return ERROR, "e-stop latched"
        if self.untrusted:
            return ERROR, f"holding: state refused: {self.untrusted}"
        if self.guard is None:
            return WARN, f"unconfigured{': ' + self.last_error if self.last_error else ''}"
        if not self.active:
            return WARN, "inactive: not commanding"
        if not self.policy_active:
            return WARN, "holding: the policy is not active"
        if self._misses_in_row:
            return WARN, f"holding: {self._misses_in_row} cycle(s) without a policy command"
        return OK, "guarding"

    def on_exit(self) -> None:
        """SIGINT/SIGTERM: the last command the robot gets is the hold at the measured pose (none when this
        node refused to run: the command topic may be another graph's)."""
        if self._q is not None and not self.fatal:
            self._send_hold("shutdown")
        self.active = False


main = main_for(SafetyNode)

if __name__ == "__main__":
    raise SystemExit(main())
