"""`sim_robot`: the PyBullet arm in real time, as a robot driver would present it to ROS 2.

Publishes ``joint_states`` (sensor_msgs/JointState with names, sensor QoS), ``camera/image_raw``
(sensor_msgs/Image rgb8) and ``task`` (Float64MultiArray ``[reward, done, success, distance,
target...]``, meta ``stamp_ns;cycle;episode``). Takes joint position commands like ros2_control's
forward position controller: ``forward_position_controller/commands`` as std_msgs/Float64MultiArray
(in ``joint_names`` order), or trajectory_msgs/JointTrajectory (``command_type: joint_trajectory``;
the first point's positions, mapped by joint name). When no fresh command arrives within
``hold_after_cycles`` cycles the arm holds its measured position (the robot side's own watchdog).
Domain randomization: ``dynamics`` names a DynamicsParams YAML (sim/config/dynamics/*.yaml).
"""

from __future__ import annotations

import time

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from tinker.runtime import OK, WARN, NodeRuntime, main_for
from tinker.wire import COMMAND_QOS, SENSOR_QOS, JointMap, array_msg, read_array, set_stamp
from tinker_core.errors import TinkerError, ValidationError


class SimRobotNode(NodeRuntime, Node):
    def __init__(self, **kwargs):
        super().__init__("sim_robot", **kwargs)
        self._init_runtime("sim_robot")
        p = self.declare_parameter
        p("task", "reach")
        p("dynamics", "")
        p("camera", True)
        p("image_size", 64)
        p("seed", 0)
        p("hold_after_cycles", 3)
        p("episode_cycles", 0)
        p("command_type", "float64_array")
        p("command_topic", "forward_position_controller/commands")
        p("joint_states_topic", "joint_states")
        p("image_topic", "camera/image_raw")
        p("task_topic", "task")
        g = lambda n: self.get_parameter(n).value  # noqa: E731
        from sim.realtime import RealTimeArm

        self.arm = RealTimeArm(task=g("task"), dynamics=g("dynamics") or None, camera=bool(g("camera")),
                               image_size=int(g("image_size")), control_period=self.period, seed=int(g("seed")),
                               hold_after_cycles=int(g("hold_after_cycles")))
        self.env = self.arm.env
        self.names = list(self.arm.joint_names)
        self.dof = len(self.names)
        self.jmap = JointMap(self.names, "sim_robot.command")
        self.task_terms = [("ee_pos", 3)] + [(t["name"], int(t["size"])) for t in self.env.task.obs_terms()]
        self.terms_meta = ",".join(f"{n}:{k}" for n, k in self.task_terms)
        self.episode_cycles = int(g("episode_cycles"))
        self.seed = int(g("seed"))
        self.camera = bool(g("camera"))
        self.js_pub = self.create_publisher(JointState, g("joint_states_topic"), SENSOR_QOS)
        self.img_pub = self.create_publisher(Image, g("image_topic"), SENSOR_QOS) if self.camera else None
        self.task_pub = self.create_publisher(Float64MultiArray, g("task_topic"), COMMAND_QOS)
        if g("command_type") == "joint_trajectory":
            self.create_subscription(JointTrajectory, g("command_topic"), self._on_trajectory, COMMAND_QOS)
        elif g("command_type") == "float64_array":
            self.create_subscription(Float64MultiArray, g("command_topic"), self._on_array, COMMAND_QOS)
        else:
            raise TinkerError(f"sim_robot.command_type: expected 'float64_array' or 'joint_trajectory', "
                              f"got {g('command_type')!r}")
        self.rejected = 0
        self.last_error = ""
        self.cycle = 0
        self.episode = 0
        self.episode_step = 0
        self._last_tick_ns = 0
        self._published: dict[int, int] = {}
        self.timer = self.create_timer(self.period, self._tick)

    # --- commands ----------------------------------------------------------------------------
    def _accept(self, q: np.ndarray) -> None:
        self.arm.set_command(q)  # applied at the next cycle; RealTimeArm holds when commands stop

    def _reject(self, err: Exception) -> None:
        self.rejected += 1
        self.last_error = str(err)
        self.get_logger().warning(f"command rejected: {err}", throttle_duration_sec=1.0)

    def _on_array(self, msg: Float64MultiArray) -> None:
        try:
            q, meta = read_array(msg, self.dof, "sim_robot.command")
            self._accept(q)
        except ValidationError as e:
            self._reject(e)
            return
        sent = self._published.get(int(meta["stamp_ns"])) if meta.get("stamp_ns", "").isdigit() else None
        if sent is not None:  # end to end: this state's publish -> the safe command's arrival here
            now = time.time_ns()
            self.span(int(meta.get("cycle", 0)), sent, now - sent, module="loop_e2e")

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        try:
            if not msg.points:
                raise ValidationError("sim_robot.command.points", "at least one point", "none")
            idx = self.jmap.index(msg.joint_names)
            pos = np.asarray(msg.points[0].positions, dtype=np.float64)
            if pos.shape[0] != len(msg.joint_names) or not np.isfinite(pos).all():
                raise ValidationError("sim_robot.command.points[0].positions",
                                      f"{len(msg.joint_names)} finite values", f"{pos.tolist()}")
            self._accept(pos[idx])
        except ValidationError as e:
            self._reject(e)

    # --- the cycle ---------------------------------------------------------------------------
    def _tick(self) -> None:
        t_wall = time.time_ns()
        t0 = time.perf_counter_ns()
        if self._last_tick_ns and t0 - self._last_tick_ns > 1.5 * self.period * 1e9:
            self.stats.deadline_misses += 1
        self._last_tick_ns = t0
        self.arm.step()
        q, qd, stamp = self.arm.state()
        self.cycle += 1
        self.episode_step += 1
        img = self.arm.image() if self.img_pub is not None else None  # state and frame go out together
        js = JointState()
        set_stamp(js.header, stamp)
        js.header.frame_id = f"cycle={self.cycle}"
        js.name = self.names
        js.position = q.tolist()
        js.velocity = qd.tolist()
        self.js_pub.publish(js)
        self._published[stamp] = time.time_ns()
        if len(self._published) > 16:
            self._published.pop(next(iter(self._published)))
        if img is not None:
            m = Image()
            m.header = js.header
            m.height, m.width = int(img.shape[0]), int(img.shape[1])
            m.encoding = "rgb8"
            m.step = m.width * 3
            m.data = np.ascontiguousarray(img, dtype=np.uint8).tobytes()
            self.img_pub.publish(m)
        ee = self.env.ee_position
        reward, success, info = self.env.task.evaluate(ee)
        done = bool(success) or (self.episode_cycles > 0 and self.episode_step >= self.episode_cycles)
        values = np.concatenate([[float(reward), float(done), float(success), float(info.get("distance", 0.0))],
                                 ee, self.env.task.observe(ee)])
        self.task_pub.publish(array_msg(values, {"stamp_ns": stamp, "cycle": self.cycle, "episode": self.episode,
                                                 "terms": self.terms_meta}))
        if done and self.episode_cycles > 0:
            self.episode += 1
            self.episode_step = 0
            self.arm.reset(self.seed + self.episode)
        self.stats.record(time.perf_counter_ns() - t0)
        self.span(self.cycle, t_wall, time.perf_counter_ns() - t0)

    # --- runtime hooks -----------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        return {"holding": self.arm.holding, "holds": self.arm.holds,
                "rejected_commands": self.rejected, "sim_misses": self.arm.misses,
                "episode": self.episode, "last_error": self.last_error}

    def diagnostic_level(self):
        if self.rejected and self.last_error:
            return WARN, f"rejected {self.rejected} command(s): {self.last_error}"
        if self.arm.holding:
            return WARN, "holding: no fresh command"
        return OK, "running"

    def on_exit(self) -> None:
        q, _, _ = self.arm.state()
        self.arm.set_command(q)

    def close_runtime(self) -> None:
        super().close_runtime()
        self.arm.close()


main = main_for(SimRobotNode)

if __name__ == "__main__":
    raise SystemExit(main())
