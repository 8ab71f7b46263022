"""`sim_robot`: the PyBullet arm in real time, as a robot driver would present it to ROS 2.

An adapter around `tinker_sim.robot_stage.SimRobotStage` (`tinker_sim.robot_loop.SimRobotLoop`: the cycle, episodes,
stale and foreign commands, the suction, the camera's schedule). Publishes ``joint_states`` (with names, reliable
like joint_state_broadcaster), ``camera/image_raw`` (stamped with the state it shows; rendered in a camera process
of its own, `tinker.sim_camera.MirrorCamera`, unless ``camera_rate_hz`` is 0) and ``task`` (simulator only). Takes
joint position commands as ros2_control's forward position controller does (``command_type``: Float64MultiArray
in ``command_joints`` order, or JointTrajectory by joint name); ``task: sort`` takes its suction from
``policy/tool_command``; ``task: reach`` takes a ``goal`` (geometry_msgs/PointStamped) a person publishes: the
target moves there and an episode starts, without a reset. Another node with this node's name on the domain at start-up: exit 3.
"""

from __future__ import annotations

import time

from rclpy.node import Node
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from tinker.node_params import SIM_ROBOT_PARAMS
from tinker.robot_model import RobotModel
from tinker.runtime import NodeRuntime, main_for
from tinker.sim_camera import MirrorCamera, snapshot
from tinker.wire import DRIVER_STATE_QOS, Reader, image_msg, joint_state_msg, task_report_msg
from tinker_core.loop.edges import Frame, SafeCommand
from tinker_sim.robot_loop import SimRobotConfig, SimRobotLoop
from tinker_sim.robot_stage import SimRobotStage

TOPICS = {p: f"{p}_topic" for p in ("joint_states", "image", "task", "command", "tool_command", "episode_end", "goal")}


class SimRobotNode(NodeRuntime, Node):
    quiet_point = "loop_e2e"  # the robot's quiet window opens when the cycle's command is back

    def __init__(self, **kwargs):
        super().__init__("sim_robot", **kwargs)
        self._init_runtime("sim_robot", SIM_ROBOT_PARAMS)
        cfg = SimRobotConfig.from_values(self.param)  # checked before the robot exists: nothing to close
        self.loop = SimRobotLoop(cfg, self.period, log=self.log, topic=self.resolve_topic_name(self.param("command_topic")),
                                 submit_frame=self._submit_frame)
        self.arm, self.env, self.names = self.loop.arm, self.loop.env, self.loop.names
        self.stage, self._arrived = SimRobotStage(self.loop, self._answered), 0
        topics = {k: v for k, v in TOPICS.items() if (k != "image" or cfg.camera) and (k != "tool_command" or
                                                                                       self.loop.suction)}
        self.serve_outputs(self.stage, topics, write={"joint_states": joint_state_msg(self.names),
                                                      "task": task_report_msg, "image": _frame_msg},
                           qos={"joint_states": DRIVER_STATE_QOS})
        self.mirror = None if self.loop.frames is None else MirrorCamera.for_robot(
            cfg, self.period, self.loop.seed, self._publish_frame, int(self.param("realtime_priority")))
        trajectory = cfg.command_type == "joint_trajectory"
        self.reader = Reader("sim_robot", self.names, RobotModel(self.env.robot.urdf_path).root)
        self.reader.set_command_joints(self.param("command_joints"))  # a forward_command_controller's joints
        self.serve_inputs(self.stage, self.reader, topics, stale={"tool_command": None, "episode_end": None, "goal": None},
                          read={"command": self._read_trajectory if trajectory else self._read_command},
                          msg_types={"command": JointTrajectory if trajectory else Float64MultiArray})
        self.loop.publishers = self.edge_subscriptions["command"].get_publisher_count
        self.timer = self.create_timer(self.period, self._tick)
        self.watch_namesake()
        self.on_param_set(self._set_param)  # ranges and read-only are rclpy's

    def _set_param(self, name: str, value) -> str:
        """The dynamic ones take effect at the next cycle."""
        self.loop.set_param(name, value)
        return ""

    def _read_command(self, msg: Float64MultiArray) -> SafeCommand:
        self._arrived = time.time_ns()  # end to end: this state's publish -> the safe command's arrival here
        return self.reader.command(msg)

    def _read_trajectory(self, msg: JointTrajectory) -> SafeCommand:
        self._arrived = time.time_ns()
        return self.reader.trajectory_command(msg)  # by joint name, into the robot's order

    def _answered(self, c: SafeCommand, sent: int) -> None:
        self.span(c.cycle, sent, self._arrived - sent, module="loop_e2e", status=c.status)

    def _tick(self) -> None:
        t_wall, t0 = time.time_ns(), time.perf_counter_ns()
        s, missed = self.stage.tick(t0)
        self.stage.end_cycle(s, t0)
        self.stats.deadline_misses += missed
        self.stats.record(time.perf_counter_ns() - t0)
        self.span(s.cycle, t_wall, time.perf_counter_ns() - t0)

    def _submit_frame(self, stamp: int, seed: int, cycle: int) -> None:
        """Snapshot the scene (~0.1 ms of PyBullet calls) for the frame due and hand it to the camera process."""
        self.mirror.submit(snapshot(self.env.world.client), stamp, seed, cycle)

    def _publish_frame(self, img, stamp: int, cycle: int) -> None:
        """One rgb8 Image stamped with the state it shows (the camera thread calls this)."""
        self.stage.emit("image", Frame(stamp, img, cycle))

    def diagnostic_values(self) -> dict[str, object]:
        return {**self.loop.values(self.namesake), **({} if self.mirror is None else self.mirror.values())}

    def diagnostic_level(self):
        return self.loop.level(self.namesake)

    def on_exit(self) -> None:
        if not self.fatal:
            self.loop.hold_here()

    def close_runtime(self) -> None:
        if self.mirror is not None:
            self.mirror.close()
        super().close_runtime()
        self.loop.close()


def _frame_msg(f: Frame):
    return image_msg(f.image, f.stamp_ns, f.cycle)


main = main_for(SimRobotNode)

if __name__ == "__main__":
    raise SystemExit(main())
