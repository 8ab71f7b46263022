"""`policy` (lifecycle): features -> the bundle's actor -> the ActionChain -> a joint target.

An adapter around `tinker_core.loop.policy_stage.PolicyStage` (the cycle: `PolicyCycle`; the `CommandGate`) and
`tinker.bundle_io.PolicyBundle` (the actor behind hot swap, its action chain within the URDF limits). Features of
another perception model are refused: safety holds that cycle. Hot reload, never of an unvalidated model and never
missing a cycle: set ``bundle``, call ``~/reload``, or let the experience bridge set it. Lifecycle: configure
loads, verifies and warms up; activate commands; deactivate stops. A declared channel: `tinker.channel_io`.
"""

from __future__ import annotations

from rclpy.lifecycle import LifecycleNode
from rclpy.parameter import Parameter

from tinker.bundle_io import PolicyBundle, resolve_bundle
from tinker.channel_io import ChannelSpeaker, declared
from tinker.lifecycle import LifecycleAdapter
from tinker.node_params import POLICY_PARAMS
from tinker.runtime import NodeRuntime, main_for
from tinker.wire import Reader, array_msg
from tinker_core.loop.input_ages import Level
from tinker_core.loop.policy import CommandGate, check_on_overrun
from tinker_core.loop.policy_stage import PolicyStage

TOPICS = {"features": "features_topic", "joint_states": "joint_states_topic", "joint_target": "command_topic",
          "raw_action": "raw_action_topic", "tool_command": "tool_command_topic", "command": "safe_command_topic"}


class PolicyNode(LifecycleAdapter, NodeRuntime, LifecycleNode):
    def __init__(self, **kwargs):
        super().__init__("policy", **kwargs)
        self._init_runtime("policy", POLICY_PARAMS)
        self.gate = CommandGate()
        self.agent, self.says, self.speaker = "", None, None
        self.stage = PolicyStage(None, self.gate, int(self.period * 1e9), lambda: self.param("on_overrun"),
                                 lambda step, dur, how: self.note_overrun(step.cycle, dur, how), self._say)
        self.on_param_set(self.stage.set_param)

    # --- the lifecycle's steps (`LifecycleAdapter`) ------------------------------------------------
    def configure_entities(self, made: list) -> None:
        if not self.param("bundle"):  # param get shows the bundle that runs
            self.set_parameters([Parameter("bundle", value=str(resolve_bundle("")))])
        check_on_overrun(self.param("on_overrun"))
        self.agent, self.says, _ = declared(self)
        core = self.stage.core = PolicyBundle(self.param("bundle"), self.param("urdf"), self.period,
                                              self.get_logger().info, says=self.says,
                                              latency_compensation=int(self.param("latency_compensation")),
                                              latency_auto=bool(self.param("latency_auto")),
                                              at_goal=str(self.param("at_goal")))
        self.get_logger().info(core.warm_up(self.param("bundle"), self.param("warmup_iterations")))
        reader = Reader("policy", core.runner.joint_names)
        reader.set_command_joints(self.param("command_joints"))
        made += [*self.serve(self.stage, reader, TOPICS, stale={"command": Level.WARN}),
                 self.trigger_service("~/reload", lambda: self.stage.reload(self.param("bundle")))]
        self.cmd_pub = self.edge_publishers["joint_target"]
        if self.says is not None:
            self.speaker = ChannelSpeaker(self, self.says, self.agent)
            made += self.speaker.entities

    def release(self) -> None:
        super().release()  # the stage closes the running bundle
        self.speaker = None

    def _say(self, step) -> None:
        if self.speaker is not None:
            self.speaker.say(step.message, step.stamp_ns, step.cycle)

    @property
    def active(self) -> bool:
        return self.gate.active

    def diagnostic_values(self) -> dict[str, object]:
        s, core = self.speaker, self.stage.core
        return self.stage.values(None if s is None else s.values(core.cycle.outbox.clipped if core else 0))

    def diagnostic_level(self):
        return self.stage.level("" if self.speaker is None else self.speaker.crowded())

    def on_exit(self) -> None:
        """Stop: hold at the measured position (a command the safety node passes through its guard)."""
        hold = self.stage.stop()
        if hold is not None and self._entities:
            self.cmd_pub.publish(array_msg(*hold))


main = main_for(PolicyNode)

if __name__ == "__main__":
    raise SystemExit(main())
