"""`safety` (lifecycle): the SafetyWrapper between the policy and the robot; watchdog and e-stop.

An adapter around `tinker_safety.safety_stage.SafetyStage` (the cycle: `GuardCycle`; the node's life: `GuardSession`).
In: ``policy/joint_target``, ``joint_states`` (by joint name), the policy's ``transition_event`` and, where
``intervention_topic`` is set, a person's teleop targets. Out: the safe command (``command_type``: Float64MultiArray
or JointTrajectory), the latched ``safety/estop_state``, ``safety/intervened``, the latched
``safety/command_latency`` (``latency_auto``), /diagnostics. Services ``~/estop``,
``~/reset``. Topics and parameters: `tinker.wire.TOPICS`, `tinker.node_params.SAFETY_PARAMS`.
"""

from __future__ import annotations

from rclpy.lifecycle import LifecycleNode
from trajectory_msgs.msg import JointTrajectory

from tinker.lifecycle import LifecycleAdapter, watch_lifecycle
from tinker.node_params import SAFETY_PARAMS
from tinker.runtime import Deadline, NodeRuntime, main_for
from tinker.wire import (CommandOrder, Reader, command_latency_msg, command_meta, command_msg, estop_msg,
                         trajectory_msg)
from tinker_core.loop.input_ages import Level
from tinker_safety.safety_stage import SafetyStage

TOPICS = {"joint_target": "policy_command_topic", "joint_states": "joint_states_topic",
          "intervention": "intervention_topic", "command": "command_topic", "estop_state": "estop_state_topic",
          "intervened": "intervened_topic", "command_latency": "command_latency_topic"}


class SafetyNode(LifecycleAdapter, NodeRuntime, LifecycleNode):
    refuse_namesake = True  # the command topic may be another graph's

    def __init__(self, **kwargs):
        super().__init__("safety", **kwargs)
        self._init_runtime("safety", SAFETY_PARAMS)
        self.stage = SafetyStage(self, self.param("command_type"),  # this node hosts its deadline, log, input watch
                                 wall_ns=lambda: self.get_clock().now().nanoseconds)
        self.stage.compensate(int(self.param("latency_compensation")), bool(self.param("latency_auto")))
        self.session, self.cycle, self.command_type = self.stage.session, self.stage.cycle, self.stage.session.command_type
        self.on_param_set(self.session.param_refusal)
        self.add_post_set_parameters_callback(self._after_set_parameters)
        self.deadline = Deadline(self, float(self.param("hold_deadline")) * self.period, self._on_deadline)
        self.arm_deadline, self.cancel_deadline = self.deadline.arm, self.deadline.cancel  # (`SafetyHost`)
        trajectory = self.command_type == "joint_trajectory"  # publishers live for the node's whole life
        self.order = CommandOrder()  # the Float64MultiArray's joint order (command_joints), set at configure
        self.serve_outputs(self.stage, TOPICS, write={
            "estop_state": lambda e: estop_msg(self.get_fully_qualified_name(), e.reason),
            "command_latency": lambda c: command_latency_msg(self.get_fully_qualified_name(), c),
            "command": ((lambda c: trajectory_msg(self.session.names, c.q, command_meta(c), self.period)) if trajectory
                        else (lambda c: command_msg(c, self.order)))},
            msg_types={"command": JointTrajectory} if trajectory else None)
        self.watch_namesake(log_while_present=True)

    @property
    def active(self) -> bool:
        return self.cycle.active

    def _after_set_parameters(self, params) -> None:
        self.session.limits_from(self.param)
        if any(prm.name == "hold_deadline" for prm in params):
            self.deadline.set_delay(float(self.param("hold_deadline")) * self.period)

    # --- the lifecycle's steps (`LifecycleAdapter`) ------------------------------------------------
    def configure_entities(self, made: list) -> None:
        teleop = self.param("intervention_topic")  # empty: nothing on the graph can take over from the policy
        states = self.resolve_topic_name(self.param("joint_states_topic"))
        self.session.configure_from(self.param, self.period, states, self.resolve_topic_name(teleop) if teleop else "")
        self.order = CommandOrder.of(self.param("command_joints"), self.session.names, "safety.command_joints",
                                     sends=True)
        reader = Reader("safety", self.session.names)
        made += self.serve_inputs(self.stage, reader, {k: v for k, v in TOPICS.items() if k != "intervention" or teleop},
                                  read={"joint_target": reader.unchecked_action},
                                  stale={"joint_target": Level.ERROR if self.cycle.policy_active else None,
                                         "intervention": None})
        made += [watch_lifecycle(self, self.param("policy_node"), self.cycle.policy_lifecycle),
                 self.trigger_service("~/estop", lambda: self.session.estop("~/estop service call")),
                 self.trigger_service("~/reset", self.session.reset)]
        subs = self.edge_subscriptions
        self.stage.state_publishers = subs["joint_states"].get_publisher_count
        if teleop:
            self.stage.teleop_publishers = subs["intervention"].get_publisher_count

    def release(self) -> None:
        super().release()
        self.deadline.cancel()

    def shutdown(self) -> None:
        self.stage.shutdown(hold=self.cycle.active)
        self.release()

    def _on_deadline(self) -> None:
        misses = self.cycle.deadline_misses
        self.cycle.deadline()
        self.stats.deadline_misses += self.cycle.deadline_misses - misses

    def callback_failed(self, topic: str, err: Exception) -> None:
        super().callback_failed(topic, err)
        self.stage.internal_error(topic, err)

    # --- the stage's host (`SafetyHost`; its log is NodeRuntime.log, its deadline self.deadline) ----------
    def expect_commands(self, expected: bool, arrived: bool) -> None:
        """The policy's commands are an input that must flow (ERROR when stale) only while it is active."""
        if self._entities:
            self.inputs.expect(self.edge_subscriptions["joint_target"].topic_name, expected, arrived)

    def diagnostic_values(self) -> dict[str, object]:
        return {**self.session.values(self.namesake), **self.stage.latency_values()}

    def diagnostic_level(self):
        return self.stage.level(self.namesake)

    def on_exit(self) -> None:
        """SIGINT/SIGTERM: the hold goes out (none when this node refused to run: the topic may be another graph's)."""
        self.stage.shutdown(hold=not self.fatal)


main = main_for(SafetyNode)

if __name__ == "__main__":
    raise SystemExit(main())
