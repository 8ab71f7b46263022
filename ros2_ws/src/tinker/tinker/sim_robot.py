"""`sim_robot`: the PyBullet arm in real time, as a robot driver would present it to ROS 2.

Publishes ``joint_states`` (sensor_msgs/JointState with names; reliable like joint_state_broadcaster,
so default subscribers get it), ``camera/image_raw``
(sensor_msgs/Image rgb8) and ``task`` (Float64MultiArray ``[reward, done, success, distance,
target...]``, meta ``stamp_ns;cycle;episode``). Takes joint position commands like ros2_control's
forward position controller: ``forward_position_controller/commands`` as std_msgs/Float64MultiArray
(in ``joint_names`` order), or trajectory_msgs/JointTrajectory (``command_type: joint_trajectory``;
the first point's positions, mapped by joint name). ``task: sort`` (ArmSort) takes its suction cup from the
policy's raw action (``policy/raw_action``, the value after the joints, > 0 = on), applied only together with
the safe command that answers the same state and that the safety node passed (not ``held`` or ``estopped``):
while the safety node holds, the suction stays as it was. When no fresh command arrives within
``hold_after_cycles`` cycles the arm holds its measured position (the robot side's own watchdog).
While the command topic has more than one publisher no command is executed (the arm holds, ERROR
diagnostic naming the topic). Every executed command is measured against the arm's true pose (the
physics): ``max_command_step`` in /diagnostics is the largest step as a fraction of the URDF velocity
limit times the period. Another node with this node's name on the domain at start-up: exit 3.
Domain randomization: ``dynamics`` names a DynamicsParams YAML (sim/config/dynamics/*.yaml).
The command topic is a watched input (`tinker.runtime.NodeRuntime.watch_subscription`): silent longer
than ``input_timeout`` (the safety node stopped) it is ERROR in /diagnostics, naming the topic and its age.

Camera (``camera_rate_hz``, from the launch YAML's ``/**`` section, shared with perception): > 0
renders like a real camera at its own rate, off the control path: when a frame is due, the scene is
snapshotted once this cycle's command has arrived (the loop's quiet window; at the next cycle if none
came) and `tinker.sim_camera.MirrorCamera` renders it in a camera process of its own. The Image
carries the stamp of the state it shows, so its age at use is known (one period at 20 Hz/20 Hz).
``0`` renders every cycle in line, before the state goes out (the frame of that very state, as in
training; the cycle then costs a render). The first frame of an episode is rendered at once (nothing can
be commanded before a model that looks sees the new scene). ``camera_views``: 1, or 2 (that view and its
mirror from the front-left, side by side: what a target locator triangulates from); `tinker bringup` and the
launch file set it, ``image_size`` and ``camera`` from the bundle's image input (`tinker.bundle_io.camera_settings`).
"""

from __future__ import annotations

import time
from array import array

import numpy as np
from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, ParameterType, SetParametersResult
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from tinker.runtime import ERROR, OK, WARN, NodeRuntime, main_for
from tinker.sim_camera import MirrorCamera, snapshot
from tinker.wire import COMMAND_QOS, SENSOR_QOS, JointMap, array_msg, read_array, set_stamp
from tinker_core.errors import TinkerError, ValidationError
from tinker_core.loop.input_ages import RecentFaults


JOINT_STATE_QOS = QoSProfile(depth=10, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.VOLATILE)
"""``joint_states`` as ros2_control's joint_state_broadcaster publishes it (reliable, volatile, 10): default
(reliable) subscribers get it, and the graph's best-effort subscribers match it too."""
NAME_CHECK_WINDOW_S = 6.0
"""Seconds after start-up in which another node with this node's name makes the process refuse to run
(Fast DDS re-announces participants every 3 s)."""


class SimRobotNode(NodeRuntime, Node):
    quiet_point = "loop_e2e"  # the robot's quiet window opens when the cycle's command is back

    def __init__(self, **kwargs):
        super().__init__("sim_robot", **kwargs)
        self._init_runtime("sim_robot")
        self._declare_parameters()
        g = lambda n: self.get_parameter(n).value  # noqa: E731
        from tinker_sim.realtime import RealTimeArm

        camera_rate = float(g("camera_rate_hz"))
        if camera_rate < 0:
            raise TinkerError(f"sim_robot.camera_rate_hz: expected >= 0 (0 = every cycle, in line), got {camera_rate}")
        task_kwargs = {k: int(g(k)) for k in ("num_objects", "max_objects") if int(g(k)) > 0}
        if task_kwargs and g("task") != "sort":
            raise TinkerError(f"sim_robot.num_objects/max_objects: only the sort task has objects, task is {g('task')!r}")
        if g("dynamics"):  # read-only, before the robot exists: a key it cannot act on is refused, not ignored
            from tinker_sim.dynamics import DynamicsParams
            from tinker_sim.dynamics_check import PolicyInputs, check_dynamics_act

            camera = bool(g("camera"))
            check_dynamics_act(DynamicsParams.load(g("dynamics")), g("task"), PolicyInputs(camera=camera),
                               source=f"sim_robot.dynamics {g('dynamics')}",
                               policy=f"a robot that {'publishes' if camera else 'renders no'} camera images")
        self.arm = RealTimeArm(task=g("task"), dynamics=g("dynamics") or None, task_kwargs=task_kwargs or None,
                               camera=bool(g("camera")) and camera_rate == 0,
                               image_size=int(g("image_size")), camera_views=int(g("camera_views")),
                               control_period=self.period, seed=int(g("seed")),
                               hold_after_cycles=int(g("hold_after_cycles")))
        self.env = self.arm.env
        self.names = list(self.arm.joint_names)
        self.dof = len(self.names)
        self.jmap = JointMap(self.names, "sim_robot.command")
        self.task_terms = [("ee_pos", 3)] + [(t["name"], int(t["size"])) for t in self.env.task.obs_terms()]
        self.terms_meta = ",".join(f"{n}:{k}" for n, k in self.task_terms)
        self.episode_cycles = int(g("episode_cycles"))
        self.end_on_success = bool(g("end_on_success"))
        self.seed = int(g("seed"))
        self.camera = bool(g("camera"))
        self.js_pub = self.create_publisher(JointState, g("joint_states_topic"), JOINT_STATE_QOS)
        self.img_pub = self.create_publisher(Image, g("image_topic"), SENSOR_QOS) if self.camera else None
        self.mirror: MirrorCamera | None = None
        self._frame_job: tuple | None = None
        self._next_frame_ns = 0
        self.frame_period_ns = int(1e9 / camera_rate) if camera_rate > 0 else 0
        if self.camera and camera_rate > 0:
            scene = {"task": g("task"), "dynamics": g("dynamics") or None, "image_size": int(g("image_size")),
                     "camera_views": int(g("camera_views")), "control_period": self.period}
            self.mirror = MirrorCamera(scene, self.seed, self._publish_frame,
                                       loop_priority=int(g("realtime_priority")))
        self.task_pub = self.create_publisher(Float64MultiArray, g("task_topic"), COMMAND_QOS)
        if g("command_type") == "joint_trajectory":
            self.cmd_sub = self.watch_subscription(JointTrajectory, g("command_topic"), self._on_trajectory,
                                                   COMMAND_QOS)
        elif g("command_type") == "float64_array":
            self.cmd_sub = self.watch_subscription(Float64MultiArray, g("command_topic"), self._on_array, COMMAND_QOS)
        else:
            raise TinkerError(f"sim_robot.command_type: expected 'float64_array' or 'joint_trajectory', "
                              f"got {g('command_type')!r}")
        self.suction_sub = None
        self._raw_suction: dict[int, bool] = {}  # state stamp -> the policy's suction for it
        self.suction_switches = 0
        if self.env.task.extra_action_dims == 1:
            self.suction_sub = self.create_subscription(Float64MultiArray, g("raw_action_topic"), self._on_raw_action,
                                                        COMMAND_QOS)
        self.rejections = RecentFaults()
        self.foreign = ""  # why commands are not executed: a second publisher on the command topic
        self.foreign_holds = 0
        self.namesake = ""
        self._vel_step = self.env.robot.velocity_limits * self.period  # the URDF's largest step per cycle
        self.step_max = 0.0  # largest executed |command - true pose| / (URDF velocity limit * period)
        self.step_max_window = 0.0  # the same since the last heartbeat
        self.steps_over_limit = 0
        self.stale = 0
        self._reset_at_ns = 0
        self.cycle = 0
        self.episode = 0
        self.episode_step = 0
        self.successes = 0  # episodes that reached success
        self._success_episode = -1
        self._last_tick_ns = 0
        self._episode_framed = False  # this episode's first frame was submitted
        self._published: dict[int, int] = {}
        self.timer = self.create_timer(self.period, self._tick)
        self._name_timer = self.create_timer(0.5, self._check_namesake)
        self._constructed = time.monotonic()
        self.add_on_set_parameters_callback(self._on_set_parameters)

    def _declare_parameters(self) -> None:
        """Every parameter with a descriptor (a number with its range): read-only where a change needs a restart."""
        S, I, B, D = (ParameterType.PARAMETER_STRING, ParameterType.PARAMETER_INTEGER, ParameterType.PARAMETER_BOOL,
                      ParameterType.PARAMETER_DOUBLE)
        fixed = " Fixed at start-up."

        def p(name, default, kind, description, read_only=True, lo=None, hi=None):
            d = ParameterDescriptor(description=description + (fixed if read_only else ""), read_only=read_only,
                                    type=kind)
            if lo is not None and kind == D:
                d.floating_point_range = [FloatingPointRange(from_value=float(lo), to_value=float(hi), step=0.0)]
            elif lo is not None:
                d.integer_range = [IntegerRange(from_value=lo, to_value=hi, step=1)]
            self.declare_parameter(name, default, d)

        p("task", "reach", S, "Task: reach or sort (sim.tasks).")
        p("dynamics", "", S, "A sim DynamicsParams YAML (domain randomization); '' = nominal.")
        p("camera", True, B, "Publish camera images.")
        p("image_size", 64, I, "Camera image width and height, px.", lo=8, hi=1024)
        p("camera_views", 1, I, "Camera views side by side in one image: 1, or 2 (and its mirror from the "
                                "front-left).", lo=1, hi=2)
        p("camera_rate_hz", 20.0, D, "Camera frames per s, rendered off the control path; 0 = every cycle, in line.",
          lo=0.0, hi=1000.0)
        p("seed", 0, I, "Seed of the first episode (episode k uses seed + k).", lo=0, hi=2**31 - 1)
        p("hold_after_cycles", 3, I, "Cycles without a fresh command before the arm holds its measured pose.",
          read_only=False, lo=1, hi=1000)
        p("episode_cycles", 0, I, "> 0: a new episode (reset) after this many cycles or on success; 0 = never.",
          read_only=False, lo=0, hi=1_000_000)
        p("end_on_success", True, B, "true: an episode also ends (reset) on the simulator's own success; false: only "
                                     "after episode_cycles (a learner rewarded by a success sensor then learns nothing "
                                     "from when the simulator resets).")
        p("command_type", "float64_array", S, "Command input: float64_array (Float64MultiArray in joint order) or "
                                              "joint_trajectory (JointTrajectory, first point, by joint name).")
        p("command_topic", "forward_position_controller/commands", S, "Topic of the joint position commands.")
        p("joint_states_topic", "joint_states", S, "Topic of the measured joint state.")
        p("image_topic", "camera/image_raw", S, "Topic of the camera images.")
        p("task_topic", "task", S, "Topic of the task terms (simulator only).")
        p("num_objects", 0, I, "Sort task: objects per episode (0: the task's default).", lo=0, hi=16)
        p("max_objects", 0, I, "Sort task: object slots in the task terms (0: num_objects); a policy trained "
                               "with slots needs the same.", lo=0, hi=16)
        p("raw_action_topic", "policy/raw_action", S, "Sort task: the policy's raw action (the suction after the "
                                                      "joints), applied with the safe command of the same state.")

    def _on_set_parameters(self, params) -> SetParametersResult:
        """Ranges and read-only are rclpy's; the dynamic ones take effect at the next cycle."""
        for prm in params:
            if prm.name == "hold_after_cycles":
                self.arm.hold_after_cycles = int(prm.value)
            elif prm.name == "episode_cycles":
                self.episode_cycles = int(prm.value)
        return SetParametersResult(successful=True)

    def _check_namesake(self) -> None:
        """Another node with this node's name on the domain: refuse to run while starting, ERROR later."""
        up = time.monotonic() - self._constructed
        me = (self.get_name(), self.get_namespace())
        twins = sum(1 for n, ns in self.get_node_names_and_namespaces() if (n, ns) == me)
        self.namesake = "" if twins <= 1 else (f"{twins - 1} other node(s) named {self.get_fully_qualified_name()} "
                                               f"on this ROS domain (a second graph with the same names?)")
        if self.namesake and up <= NAME_CHECK_WINDOW_S:
            self.fatal = f"{self.namesake}: refusing to run; give this graph its own namespace or ROS_DOMAIN_ID"
        if up > NAME_CHECK_WINDOW_S:
            self._name_timer.cancel()
            self._name_timer = self.create_timer(2.0, self._check_namesake_later)

    def _check_namesake_later(self) -> None:
        before = self.namesake
        me = (self.get_name(), self.get_namespace())
        twins = sum(1 for n, ns in self.get_node_names_and_namespaces() if (n, ns) == me)
        self.namesake = "" if twins <= 1 else (f"{twins - 1} other node(s) named {self.get_fully_qualified_name()} "
                                               f"on this ROS domain (a second graph with the same names?)")
        if self.namesake and not before:
            self.get_logger().error(self.namesake)

    # --- commands ----------------------------------------------------------------------------
    def _accept(self, q: np.ndarray) -> None:
        """Execute ``q`` at the next cycle, unless the command topic has a second publisher (then hold)."""
        if self._foreign_publisher():
            return
        q_true, _ = self.env.joint_state  # the physics' pose: what a command's step is measured from
        ratio = float(np.max(np.abs(q - q_true) / self._vel_step))
        self.step_max = max(self.step_max, ratio)
        self.step_max_window = max(self.step_max_window, ratio)
        self.steps_over_limit += ratio > 1.0
        self.arm.set_command(q)  # applied at the next cycle; RealTimeArm holds when commands stop

    def _foreign_publisher(self) -> bool:
        """True (and the arm held at its pose) while the command topic has more than one publisher:
        commands from neither are executed, whichever is the safety node."""
        n = self.cmd_sub.get_publisher_count()
        if n <= 1:
            if self.foreign:
                self.get_logger().info(f"{self.cmd_sub.topic_name}: one publisher again; executing commands")
            self.foreign = ""
            return False
        if not self.foreign:
            self.foreign = (f"{self.cmd_sub.topic_name}: {n} publishers (expected 1, the safety node): holding, "
                            f"executing no command")
            self.get_logger().error(self.foreign)
            q, _ = self.env.joint_state
            self.arm.set_command(q)
            self.foreign_holds += 1
        return True

    def _reject(self, err: Exception) -> None:
        self.rejections.note(str(err))
        self.get_logger().warning(f"command rejected: {err}", throttle_duration_sec=1.0)

    def _on_array(self, msg: Float64MultiArray) -> None:
        now = time.time_ns()
        try:
            q, meta = read_array(msg, self.dof, "sim_robot.command")
        except ValidationError as e:
            self._reject(e)
            return
        stamp = meta.get("stamp_ns", "")
        if stamp.isdigit() and int(stamp) < self._reset_at_ns:
            self.stale += 1  # answers a state from before the episode reset: the arm is elsewhere now
        else:
            self._accept(q)
            if self.suction_sub is not None and stamp.isdigit() and not self.foreign \
                    and meta.get("status", "") not in ("held", "estopped"):
                self._apply_suction(int(stamp))
        sent = self._published.get(int(meta["stamp_ns"])) if meta.get("stamp_ns", "").isdigit() else None
        if sent is not None:  # end to end: this state's publish -> the safe command's arrival here
            self.span(int(meta.get("cycle", 0)), sent, now - sent, module="loop_e2e", status=meta.get("status", ""))
        if self._frame_job is not None:  # the cycle's loop is done: the camera renders in the quiet window
            self._submit_frame()

    def _on_raw_action(self, msg: Float64MultiArray) -> None:
        try:
            raw, meta = read_array(msg, None, "sim_robot.raw_action")
        except ValidationError as e:
            return self._reject(e)
        stamp = meta.get("stamp_ns", "")
        if raw.shape[0] <= self.dof or not stamp.isdigit():
            return self._reject(ValidationError("sim_robot.raw_action", f"> {self.dof} values with a stamp_ns",
                                                f"{raw.shape[0]} values, stamp {stamp!r}"))
        self._raw_suction[int(stamp)] = bool(raw[self.dof] > 0.0)
        while len(self._raw_suction) > 16:
            self._raw_suction.pop(next(iter(self._raw_suction)))

    def _apply_suction(self, stamp: int) -> None:
        """The suction the policy chose for state ``stamp``, with that state's safe command (none came: unchanged)."""
        on = self._raw_suction.get(stamp)
        if on is not None and on != self.arm.suction:
            self.arm.set_suction(on)
            self.suction_switches += 1

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
        if self.foreign:  # hold while a second command publisher remains (the arm's own hold: its pose)
            self._foreign_publisher()
        self.arm.step()
        q, qd, stamp = self.arm.state()
        self.cycle += 1
        self.episode_step += 1
        inline = self.img_pub is not None and self.mirror is None
        img = self.arm.image() if inline else None  # in line: state and frame go out together
        js = JointState()
        set_stamp(js.header, stamp)
        js.header.frame_id = f"cycle={self.cycle};episode={self.episode}"  # a new episode: reset, declared
        js.name = self.names
        js.position = array("d", q.tobytes())
        js.velocity = array("d", qd.tobytes())
        ee = self.env.ee_position
        reward, success, info = self.env.task.evaluate(ee)
        done = (bool(success) and self.end_on_success) or (self.episode_cycles > 0 and self.episode_step >= self.episode_cycles)
        values = np.concatenate([[float(reward), float(done), float(success), float(info.get("distance", 0.0))],
                                 ee, self.env.task.observe(ee)])
        # e2e starts before the first publish of the state: waking the subscribers (3 processes on 2 cores
        # may preempt this one before publish() returns) is part of the loop's latency. The task terms go
        # first, so perception has this state's terms when its JointState arrives.
        self._published[stamp] = time.time_ns()
        self.task_pub.publish(array_msg(values, {"stamp_ns": stamp, "cycle": self.cycle, "episode": self.episode,
                                                 "terms": self.terms_meta}))
        self.js_pub.publish(js)
        if len(self._published) > 16:
            self._published.pop(next(iter(self._published)))
        if img is not None:
            self._publish_frame(img, stamp, self.cycle)
        if self.mirror is not None:
            self._camera_tick(t0, stamp)
        self.successes += bool(success) and self._success_episode != self.episode
        if success:
            self._success_episode = self.episode  # one success per episode
        if done and self.episode_cycles > 0:
            if self._frame_job is not None:  # the reset moves the scene: this state's frame is taken now
                self._submit_frame()
            self.episode += 1
            self.episode_step = 0
            self._episode_framed = False
            self.arm.reset(self.seed + self.episode)
            self._reset_at_ns = stamp + 1  # commands for this state or older ones no longer apply
        self.stats.record(time.perf_counter_ns() - t0)
        self.span(self.cycle, t_wall, time.perf_counter_ns() - t0)

    # --- the camera --------------------------------------------------------------------------
    def _camera_tick(self, t0: int, stamp: int) -> None:
        """Mark a frame due; it is snapshotted and rendered in the quiet window (the scene only moves in
        ``arm.step()``, so the snapshot then still shows this state). A frame still waiting because the
        last cycle's command never came is replaced by this state's, which goes now."""
        late = self._frame_job is not None
        due = t0 + self.period * 5e8 >= self._next_frame_ns  # half a cycle early counts: same-rate camera
        if due:
            self._next_frame_ns = max(self._next_frame_ns + self.frame_period_ns, t0 + self.frame_period_ns // 2)
        if due or late or not self._episode_framed:
            self._frame_job = (stamp, self.seed + self.episode, self.cycle)
        if late or not self._episode_framed:  # an episode's first frame: no command can come before it
            self._episode_framed = True
            self._submit_frame()

    def _submit_frame(self) -> None:
        """Snapshot the scene (~0.1 ms of PyBullet calls) for the frame due and hand it to the camera thread."""
        stamp, seed, cycle = self._frame_job
        self._frame_job = None
        self.mirror.submit(snapshot(self.env.world.client), stamp, seed, cycle)

    def _publish_frame(self, img: np.ndarray, stamp: int, cycle: int) -> None:
        """One rgb8 Image stamped with the state it shows (the camera thread calls this too)."""
        m = Image()
        set_stamp(m.header, stamp)
        m.header.frame_id = f"cycle={cycle}"
        m.height, m.width = int(img.shape[0]), int(img.shape[1])
        m.encoding = "rgb8"
        m.step = m.width * 3
        m.data = np.ascontiguousarray(img, dtype=np.uint8).tobytes()
        self.img_pub.publish(m)

    # --- runtime hooks -----------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        window, self.step_max_window = self.step_max_window, 0.0
        vals = {"holding": self.arm.holding, "holds": self.arm.holds, "command_publishers_error": self.foreign,
                "foreign_publisher_holds": self.foreign_holds, "namesake": self.namesake,
                "max_command_step": f"{self.step_max:.4f}", "max_command_step_window": f"{window:.4f}",
                "commands_over_velocity_limit": self.steps_over_limit,
                "rejected_commands": self.rejections.count, "stale_commands": self.stale, "sim_misses": self.arm.misses,
                "episode": self.episode, "successes": self.successes, "suction_switches": self.suction_switches,
                "last_error": self.rejections.last,
                **{f"unsafe_states.{k}": v for k, v in self.arm.env.violations.items()}}
        if self.mirror is not None:
            vals.update({"camera_frames": self.mirror.frames, "camera_dropped": self.mirror.dropped,
                         "camera_render_ms": f"{self.mirror.last_render_ns / 1e6:.1f}",
                         "camera_error": self.mirror.error})
        return vals

    def diagnostic_level(self):
        if self.namesake:
            return ERROR, self.namesake
        if self.foreign:
            return ERROR, self.foreign
        level, message = self.rejections.level("rejected", "command")  # WARN while rejecting, OK once it stops
        if level:
            return WARN, message
        if self.arm.holding:
            return WARN, "holding: no fresh command"
        return OK, "running"

    def on_exit(self) -> None:
        if self.fatal:
            return
        q, _, _ = self.arm.state()
        self.arm.set_command(q)

    def close_runtime(self) -> None:
        if self.mirror is not None:
            self.mirror.close()
        super().close_runtime()
        self.arm.close()


main = main_for(SimRobotNode)

if __name__ == "__main__":
    raise SystemExit(main())
