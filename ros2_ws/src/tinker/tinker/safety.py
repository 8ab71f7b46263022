"""`safety` (lifecycle): the SafetyWrapper between the policy and the robot; watchdog and e-stop.

An adapter (`tinker.runtime.NodeRuntime.serve_inputs` / ``serve_outputs``) around `tinker_safety.safety_stage.
SafetyStage`: the decisions between topics are `tinker_safety.guard_cycle.GuardCycle`'s (trusted states, cycles
and their deadline, misses in a row, late commands, the policy's lifecycle, the e-stop, a person's takeover), the
node's life around it `tinker_safety.guard_session.GuardSession`'s (configure, the e-stop kept over cleanup,
refusals, /diagnostics); one node per name: `tinker_core.loop.namesake`. Subscribes ``policy/joint_target``,
``joint_states`` (by joint name), the policy's ``transition_event`` and, where ``intervention_topic`` is set, a
person's teleop targets (sensor_msgs/JointState); publishes the safe command on
``forward_position_controller/commands`` (``command_type``: ``float64_array``, meta in ``layout.dim[0].label``, or
``joint_trajectory``, one point reached in one period, meta in ``header.frame_id``), the latched e-stop state on
``safety/estop_state`` (transient_local), each teleop-served cycle on ``safety/intervened`` and /diagnostics.
Services ``~/estop`` and ``~/reset`` (std_srvs/Trigger). The policy's commands are an ERROR when silent longer
than ``input_timeout`` only while the policy is active.
"""

from __future__ import annotations

from lifecycle_msgs.msg import State, TransitionEvent
from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from tinker.node_params import SAFETY_PARAMS
from tinker.runtime import NodeRuntime, main_for
from tinker.wire import Reader, command_meta, estop_msg, trajectory_msg
from tinker_core.loop.input_ages import Level
from tinker_safety.guard_session import GATE_PARAMS, TAKEOVER_PARAMS, read_scene_items
from tinker_safety.safety_stage import SafetyStage

TOPICS = {"joint_target": "policy_command_topic", "joint_states": "joint_states_topic",
          "intervention": "intervention_topic", "command": "command_topic", "estop_state": "estop_state_topic",
          "intervened": "intervened_topic"}
TRANSITION_QOS = 10
"""Depth of the policy's transition_event subscription (reliable, volatile: what rclpy publishes with)."""
PRIMARY_STATES = (State.PRIMARY_STATE_UNCONFIGURED, State.PRIMARY_STATE_INACTIVE, State.PRIMARY_STATE_ACTIVE,
                  State.PRIMARY_STATE_FINALIZED)


class SafetyNode(NodeRuntime, LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("safety", **kwargs)
        self._init_runtime("safety", SAFETY_PARAMS)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.add_post_set_parameters_callback(self._after_set_parameters)
        self.stage = SafetyStage(self, self.param("command_type"),  # this node hosts its deadline, log, input watch
                                 wall_ns=lambda: self.get_clock().now().nanoseconds)
        self.session, self.cycle, self.command_type = self.stage.session, self.stage.cycle, self.stage.session.command_type
        self._subs, self._srvs, self._own_timers = [], [], []
        # publishers live for the node's whole life: deactivate keeps them, the stop needs them
        trajectory = self.command_type == "joint_trajectory"
        self.serve_outputs(self.stage, TOPICS, write={
            "estop_state": lambda e: estop_msg(self.get_fully_qualified_name(), e.reason),
            **({"command": lambda c: trajectory_msg(self.session.names, c.q, command_meta(c), self.period)}
               if trajectory else {})}, msg_types={"command": JointTrajectory} if trajectory else None)
        self.watch_namesake(log_while_present=True)

    @property
    def active(self) -> bool:
        return self.cycle.active

    # --- parameters ---------------------------------------------------------------------------
    def _on_set_parameters(self, params) -> SetParametersResult:
        reason = next(filter(None, (self.session.param_refusal(p.name, p.value) for p in params)), "")
        return SetParametersResult(successful=not reason, reason=reason)

    def _after_set_parameters(self, params) -> None:
        """The checks take their limits at once; hold_deadline too: its one-shot timer is made anew with it (a
        running executor does not see a changed period of an existing timer)."""
        self.session.set_limits([self.param(n) for n in GATE_PARAMS], [self.param(n) for n in TAKEOVER_PARAMS])
        if any(prm.name == "hold_deadline" for prm in params) and self._own_timers:
            armed = not self._wd_timer.is_canceled()
            self.destroy_entities(self._own_timers)
            self._make_deadline_timer(armed)

    def _make_deadline_timer(self, armed: bool) -> None:
        self._wd_timer = self.create_timer(float(self.param("hold_deadline")) * self.period, self._on_deadline)
        if not armed:  # armed by each state (no ``autostart`` argument: older rclpy lacks it)
            self._wd_timer.cancel()
        self._own_timers = [self._wd_timer]

    # --- lifecycle ----------------------------------------------------------------------------
    def on_configure(self, state) -> TransitionCallbackReturn:
        g = self.param
        self.check_namesake()
        if self.namesake:
            return self._failed(f"configure refused: {self.namesake}")
        try:
            teleop = g("intervention_topic")  # empty: nothing on the graph can take over from the policy
            self.session.configure(g("config") or None, g("urdf") or None, self.period,
                                   self.resolve_topic_name(g("joint_states_topic")), [g(n) for n in GATE_PARAMS],
                                   self.resolve_topic_name(teleop) if teleop else "", [g(n) for n in TAKEOVER_PARAMS],
                                   read_scene_items(g("task_fixtures"), "safety.task_fixtures"))
            reader, topics = Reader("safety", self.session.names), {k: v for k, v in TOPICS.items()
                                                                     if k != "intervention" or teleop}
            self._subs = [*self.serve_inputs(self.stage, reader, topics, read={"joint_target": reader.unchecked_action},
                                             stale={"joint_target": Level.ERROR if self.cycle.policy_active else None,
                                                    "intervention": None}),
                          self.watch_subscription(TransitionEvent, f"{g('policy_node')}/transition_event",
                                                  self._on_policy_transition, TRANSITION_QOS, None)]
            subs = self.edge_subscriptions
            self.stage.state_publishers = subs["joint_states"].get_publisher_count
            if teleop:
                self.stage.teleop_publishers = subs["intervention"].get_publisher_count
            self._srvs = [self.create_service(Trigger, "~/estop", self._on_estop),
                          self.create_service(Trigger, "~/reset", self._on_reset)]
            self._make_deadline_timer(armed=False)
        except Exception as e:  # a failed configure leaves nothing behind and can be retried
            self._release()
            return self._failed(f"configure failed: {e}")
        self.session.last_error = ""
        self.stage.estop_changed()
        return TransitionCallbackReturn.SUCCESS

    def _failed(self, why: str) -> TransitionCallbackReturn:
        self.session.last_error = why
        self.get_logger().error(why)
        return TransitionCallbackReturn.FAILURE

    def on_activate(self, state) -> TransitionCallbackReturn:
        self.cycle.activate()
        self.stage.estop_changed()
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
        self.destroy_entities(self._subs + self._srvs + self._own_timers)
        self._subs, self._srvs, self._own_timers = [], [], []
        self.session.release()

    # --- messages in --------------------------------------------------------------------------
    def _on_policy_transition(self, msg: TransitionEvent) -> None:
        """The policy's primary states only: a late event can then only be followed by the rest of its chain
        (one reliable writer, in order), and every chain that re-activates ends with ``active``."""
        if msg.goal_state.id in PRIMARY_STATES:
            self.cycle.policy_lifecycle(msg.goal_state.id == State.PRIMARY_STATE_ACTIVE, msg.goal_state.label)

    def _on_deadline(self) -> None:
        misses = self.cycle.deadline_misses
        self.cycle.deadline()
        self.stats.deadline_misses += self.cycle.deadline_misses - misses

    def _on_estop(self, request, response):
        response.success, response.message = self.session.estop("~/estop service call")
        return response

    def _on_reset(self, request, response):
        response.success, response.message = self.session.reset()
        return response

    def callback_failed(self, topic: str, err: Exception) -> None:
        """A failed callback leaves the guard's state in doubt: the e-stop latches (holds at the measured pose)."""
        super().callback_failed(topic, err)
        if self.cycle.guard is not None and not self.cycle.guard.estopped:
            try:
                self.cycle.estop(f"internal error in the callback on {topic}: {err!r}")
            except Exception as e2:  # the hold itself failed: nothing more can be done here; logged
                self.get_logger().error(f"e-stop after a failed callback failed too: {e2!r}")

    # --- the stage's host: deadline, input watch (log: NodeRuntime.log) ---------------------------------
    def arm_deadline(self) -> None:
        self._wd_timer.reset()

    def cancel_deadline(self) -> None:
        if self._own_timers:
            self._wd_timer.cancel()

    def expect_commands(self, expected: bool, arrived: bool) -> None:
        """The policy's commands are an input that must flow (ERROR when stale) only while it is active."""
        if self._subs:
            self.inputs.expect(self.edge_subscriptions["joint_target"].topic_name, expected, arrived)

    # --- runtime hooks ---------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        return self.session.values(self.namesake)

    def diagnostic_level(self):
        return self.session.level(self.namesake)

    def on_exit(self) -> None:
        """SIGINT/SIGTERM: the last command the robot gets is the hold at the measured pose (none when this
        node refused to run: the command topic may be another graph's)."""
        if not self.fatal:
            self.cycle.hold("shutdown")
        self.cycle.active = False


main = main_for(SafetyNode)

if __name__ == "__main__":
    raise SystemExit(main())
