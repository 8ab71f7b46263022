"""`SimRobotLoop`: the simulated robot's cycle as a driver presents it, without ROS (the ``sim_robot`` node).

Per cycle (`step`, then `end_cycle` once the state is out): the arm steps in real time, the state, the task
terms (``[reward, done, success, distance, ee_pos, terms...]``) and, rendered in line, the frame of that state
come out; an episode ends after ``episode_cycles`` cycles or on the simulator's own success (``end_on_success``),
and the arm is reset with the next episode's seed. What it decides besides:

- **commands** (`command`): one answering a state from before the last episode reset is stale (the arm is
  elsewhere now), not executed; every executed one is measured against the arm's true pose (``step_max``: the
  largest step as a fraction of the URDF velocity limit times the period);
- **a foreign publisher** on the command topic (more than one publisher): no command is executed, whichever is the
  safety node, and the arm holds its pose until one publisher is left;
- **suction** (a task with one extra action dimension, ArmSort's cup): the policy's tool command for a state
  (`tool_command`: the extra actions as sent) is applied only with the safe command answering that state that the
  safety node passed (not ``held`` or ``estopped``); while the safety node holds, the suction stays as it was;
- **camera frames** off the control path (`FrameSchedule`), and the diagnostics' values and level.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.edges import COMMAND_TYPES, RobotState, TaskReport, task_report
from tinker_core.loop.input_ages import Level, RecentFaults
from tinker_sim.realtime import RealTimeArm

KEEP_STAMPS = 16
"""states remembered for a late command's end-to-end time, and tool commands for their safe command's suction"""


@dataclass
class SimRobotConfig:
    """The simulated robot's settings (the node's parameters of the same names)."""

    task: str = "reach"
    """reach or sort (sim.tasks)"""
    dynamics: str = ""
    """a sim DynamicsParams YAML (domain randomization); '' = nominal"""
    camera: bool = True
    """publish camera images"""
    image_size: int = 64
    camera_views: int = 1
    camera_rate_hz: float = 20.0
    """frames per s, rendered off the control path; 0 = every cycle, in line"""
    seed: int = 0
    """seed of the first episode (episode k uses seed + k)"""
    hold_after_cycles: int = 3
    episode_cycles: int = 0
    """> 0: a new episode after this many cycles or on success; 0 = never"""
    end_on_success: bool = True
    end_on_sensor: bool = True
    """an ``episode_end`` (the success sensor saw the task done) ends that episode at the next cycle"""
    num_objects: int = 0
    max_objects: int = 0
    command_type: str = "float64_array"
    """the command's message: float64_array (Float64MultiArray in joint order) or joint_trajectory"""

    def check(self) -> None:
        """Refuse, before the robot exists, what it cannot act on (a dynamics key too: `check_dynamics_act`)."""
        if self.command_type not in COMMAND_TYPES:
            raise ConfigError(f"sim_robot.command_type: expected one of {list(COMMAND_TYPES)}, got {self.command_type!r}")
        if self.camera_rate_hz < 0:
            raise ConfigError(f"sim_robot.camera_rate_hz: expected >= 0 (0 = every cycle, in line), "
                              f"got {self.camera_rate_hz}")
        if self.task_kwargs() and self.task != "sort":
            raise ConfigError(f"sim_robot.num_objects/max_objects: only the sort task has objects, task is {self.task!r}")
        if self.dynamics:
            from tinker_sim.dynamics import DynamicsParams
            from tinker_sim.dynamics_check import PolicyInputs, check_dynamics_act

            check_dynamics_act(DynamicsParams.load(self.dynamics), self.task, PolicyInputs(camera=self.camera),
                               source=f"sim_robot.dynamics {self.dynamics}",
                               policy=f"a robot that {'publishes' if self.camera else 'renders no'} camera images")

    def task_kwargs(self) -> dict[str, int]:
        return {k: int(getattr(self, k)) for k in ("num_objects", "max_objects") if int(getattr(self, k)) > 0}

    @classmethod
    def from_values(cls, get: Callable[[str], object]) -> "SimRobotConfig":
        """The config from a parameter getter (``get(name)``)."""
        return cls(**{f.name: get(f.name) for f in dataclasses.fields(cls)})


class FrameSchedule:
    """When a camera frame is due, at ``frame_period_ns``, and which state it shows.

    A due frame is snapshotted once the cycle's command has arrived (the loop's quiet window), or at the next
    cycle when none came: a frame still waiting then is replaced by this state's, which goes at once. An
    episode's first frame goes at once (nothing can be commanded before a model that looks sees the new scene).
    """

    def __init__(self, period_s: float, frame_period_ns: int):
        self.period_s, self.frame_period_ns = float(period_s), int(frame_period_ns)
        self.job: tuple[int, int, int] | None = None
        """(stamp, seed, cycle) of the frame waiting to be taken"""
        self._next_ns = 0
        self.episode_framed = False

    def tick(self, t0: int, stamp: int, seed: int, cycle: int) -> bool:
        """A new state at ``t0`` (monotonic ns); True when its frame must be taken now."""
        late = self.job is not None
        due = t0 + self.period_s * 5e8 >= self._next_ns  # half a cycle early counts: same-rate camera
        if due:
            self._next_ns = max(self._next_ns + self.frame_period_ns, t0 + self.frame_period_ns // 2)
        if due or late or not self.episode_framed:
            self.job = (stamp, seed, cycle)
        if late or not self.episode_framed:  # an episode's first frame: no command can come before it
            self.episode_framed = True
            return True
        return False

    def take(self) -> tuple[int, int, int] | None:
        """The job waiting (None: none), now taken."""
        job, self.job = self.job, None
        return job


@dataclass(slots=True)
class SimState:
    """One cycle's output: the measured state and its task terms (the frame when rendered in line)."""

    q: np.ndarray
    qd: np.ndarray
    stamp: int
    cycle: int
    episode: int
    task: np.ndarray
    """[reward, done, success, distance, ee_pos, terms...]"""
    image: np.ndarray | None
    done: bool
    success: bool


class SimRobotLoop:
    """The arm and its bookkeeping. ``publishers``: the command topic's publisher count (the host reads it from
    the graph); ``submit_frame(stamp, seed, cycle)``: hand a frame to the camera (None: frames in line only);
    ``log(level, message)``: the host's logger; ``topic``: the command topic's name, for messages."""

    def __init__(self, cfg: SimRobotConfig, period: float, publishers: Callable[[], int] = lambda: 1,
                 log: Callable[[str, str], None] = lambda level, message: None, topic: str = "commands",
                 submit_frame: Callable[[int, int, int], None] | None = None):
        cfg.check()
        self.cfg, self.period, self.publishers, self.log, self.topic = cfg, float(period), publishers, log, topic
        offline = cfg.camera and cfg.camera_rate_hz > 0
        self.arm = RealTimeArm(task=cfg.task, dynamics=cfg.dynamics or None, task_kwargs=cfg.task_kwargs() or None,
                               camera=cfg.camera and not offline, image_size=int(cfg.image_size),
                               camera_views=int(cfg.camera_views), control_period=self.period, seed=int(cfg.seed),
                               hold_after_cycles=int(cfg.hold_after_cycles))
        self.env = self.arm.env
        self.names = list(self.arm.joint_names)
        self.dof = len(self.names)
        self.task_terms = [("ee_pos", 3)] + [(t["name"], int(t["size"])) for t in self.env.task.obs_terms()]
        self.episode_cycles, self.seed = int(cfg.episode_cycles), int(cfg.seed)
        self.scene_seed = self.seed  # the seed of the last reset: the camera's copy of the scene is reset with it
        self.suction = self.env.task.extra_action_dims == 1
        """the task takes a suction cup from the policy's tool command"""
        self.frames = FrameSchedule(self.period, int(1e9 / cfg.camera_rate_hz)) if offline else None
        self.submit_frame = submit_frame
        self._suction_for: dict[int, bool] = {}  # state stamp -> the policy's suction for it
        self._published: dict[int, int] = {}  # state stamp -> when it went out (wall ns)
        self.suction_switches = 0
        self.rejections = RecentFaults()
        self.foreign = ""  # why commands are not executed: a second publisher on the command topic
        self.foreign_holds = 0
        self._vel_step = self.env.robot.velocity_limits * self.period  # the URDF's largest step per cycle
        self.step_max = 0.0  # largest executed |command - true pose| / (URDF velocity limit * period)
        self.step_max_window = 0.0  # the same since the last heartbeat
        self.steps_over_limit = 0
        self.stale = 0
        self._reset_at_ns = 0
        self.cycle = self.episode = self.episode_step = 0
        self.successes = 0  # episodes that reached success
        self.objects_sorted = self.objects_total = 0  # a sorting task's objects at its episodes' ends
        self._success_episode = -1
        self._last_tick_ns = 0
        self._end_episode = -1  # an episode the success sensor ended (`end_episode`)
        self.sensor_ends = 0  # episodes ended so
        self.goal: np.ndarray | None = None  # a person's goal in force (`set_goal`); None: each episode draws one
        self._goal_episode = False  # a goal was taken: the next state starts an episode (no reset)
        self.goals = 0
        self.goal_refusals = RecentFaults()

    # --- commands ----------------------------------------------------------------------------
    def accept(self, q: np.ndarray) -> None:
        """Execute ``q`` at the next cycle, unless the command topic has a second publisher (then hold)."""
        if self.foreign_publisher():
            return
        q_true, _ = self.env.joint_state  # the physics' pose: what a command's step is measured from
        ratio = float(np.max(np.abs(q - q_true) / self._vel_step))
        self.step_max = max(self.step_max, ratio)
        self.step_max_window = max(self.step_max_window, ratio)
        self.steps_over_limit += ratio > 1.0
        self.arm.set_command(q)  # applied at the next cycle; RealTimeArm holds when commands stop

    def command(self, q: np.ndarray, meta: dict[str, str]) -> int | None:
        """A safe command with its wire metadata (``stamp_ns``, ``status``); returns when the state it answers
        went out (wall ns; None: unknown), for the loop's end-to-end time."""
        stamp = meta.get("stamp_ns", "")
        if stamp.isdigit() and int(stamp) < self._reset_at_ns:
            self.stale += 1  # answers a state from before the episode reset: the arm is elsewhere now
        else:
            self.accept(q)
            if self.suction and stamp.isdigit() and not self.foreign and meta.get("status", "") not in ("held", "estopped"):
                self._apply_suction(int(stamp))
        return self._published.get(int(stamp)) if stamp.isdigit() else None

    def foreign_publisher(self) -> bool:
        """True (and the arm held at its pose) while the command topic has more than one publisher:
        commands from neither are executed, whichever is the safety node."""
        n = self.publishers()
        if n <= 1:
            if self.foreign:
                self.log("info", f"{self.topic}: one publisher again; executing commands")
            self.foreign = ""
            return False
        if not self.foreign:
            self.foreign = f"{self.topic}: {n} publishers (expected 1, the safety node): holding, executing no command"
            self.log("error", self.foreign)
            q, _ = self.env.joint_state
            self.arm.set_command(q)
            self.foreign_holds += 1
        return True

    def reject(self, err: Exception) -> None:
        """A command (or tool command) failed its wire check: counted, WARN while it goes on."""
        self.rejections.note(str(err))

    def tool_command(self, extra: np.ndarray, meta: dict[str, str]) -> None:
        """The policy's tool command for state ``stamp_ns`` (the task's extra actions: the suction, on > 0), kept
        for that state's safe command."""
        stamp = meta.get("stamp_ns", "")
        if extra.shape[0] != 1 or not np.isfinite(extra).all() or not stamp.isdigit():
            raise ValidationError("sim_robot.tool_command", "1 finite value (the suction) with a stamp_ns",
                                  f"{extra.shape[0]} values, stamp {stamp!r}")
        self._suction_for[int(stamp)] = bool(extra[0] > 0.0)
        while len(self._suction_for) > KEEP_STAMPS:
            self._suction_for.pop(next(iter(self._suction_for)))

    def _apply_suction(self, stamp: int) -> None:
        """The suction the policy chose for state ``stamp``, with that state's safe command (none came: unchanged)."""
        on = self._suction_for.get(stamp)
        if on is not None and on != self.arm.suction:
            self.arm.set_suction(on)
            self.suction_switches += 1

    def set_goal(self, point: np.ndarray) -> bool:
        """A person's or a real system's goal (base frame, m): the robot is told it from the next cycle, and in the
        episodes after (`tinker_sim.tasks.base.Task.set_goal`; the reach target moves there). The next state starts
        an episode, without a reset (the arm stays where it is): what perception held of the last target (a vision
        bundle's estimate), the policy's chain and the learner's transitions do not run across it. A goal the task
        refuses (the sorter's places are fixed; a point outside the reach's box) is logged and counted
        (``refused_goals``) and the target stays. Whether it was taken."""
        try:
            self.arm.set_goal(point)
        except ValidationError as e:
            self.refuse_goal(e)
            return False
        self.goal, self.goals, self._goal_episode = np.array(point, dtype=np.float64), self.goals + 1, True
        self.log("info", f"goal {np.round(self.goal, 3).tolist()} m: the robot is told it from the next cycle, and in "
                         f"the episodes after")
        return True

    def refuse_goal(self, err: Exception) -> None:
        """A goal refused (by the task, or on the wire: another frame): logged and counted; the target stays."""
        self.goal_refusals.note(str(err))
        self.log("warning", f"goal refused, the target stays: {err}")

    def hold_here(self) -> None:
        """The arm's last command: its measured pose (the node stops)."""
        q, _, _ = self.arm.state()
        self.arm.set_command(q)

    # --- the cycle ---------------------------------------------------------------------------
    def step(self, t0: int) -> tuple[SimState, bool]:
        """One cycle at ``t0`` (monotonic ns): the state and its task terms, and whether the cycle began late
        (more than 1.5 periods after the last: a deadline miss)."""
        missed = bool(self._last_tick_ns and t0 - self._last_tick_ns > 1.5 * self.period * 1e9)
        self._last_tick_ns = t0
        if self.foreign:  # hold while a second command publisher remains (the arm's own hold: its pose)
            self.foreign_publisher()
        self.arm.step()
        q, qd, stamp = self.arm.state()
        if self._goal_episode:  # a goal was taken: this state starts an episode, the arm where it is
            self._goal_episode = False
            self.episode, self.episode_step = self.episode + 1, 0
            if self.frames is not None:
                self.frames.episode_framed = False
        self.cycle += 1
        self.episode_step += 1
        img = self.arm.image() if self.cfg.camera and self.frames is None else None  # in line: with its state
        ee = self.env.ee_position
        reward, success, info = self.env.task.evaluate(ee)
        done = ((bool(success) and self.cfg.end_on_success) or (0 < self.episode_cycles <= self.episode_step)
                or self._end_episode == self.episode)
        values = np.concatenate([[float(reward), float(done), float(success), float(info.get("distance", 0.0))],
                                 ee, self.env.task.observe(ee)])
        return SimState(q, qd, stamp, self.cycle, self.episode, values, img, done, bool(success)), missed

    def end_episode(self, episode: str, stamp: int) -> bool:
        """The success sensor saw episode ``episode`` done in its state ``stamp``: it ends at the next cycle (a reset,
        as a cell's reset routine would). Another episode's, or an older state's (before the last reset), is
        ignored; so is every one with ``end_on_sensor`` false. Whether it was taken."""
        if not self.cfg.end_on_sensor or episode != str(self.episode) or stamp < self._reset_at_ns \
                or self._end_episode == self.episode:
            return False
        self._end_episode = self.episode
        self.sensor_ends += 1
        return True

    def report(self, s: SimState) -> TaskReport:
        """State ``s``'s outcome and task terms by name, as the ``task`` topic carries them
        (`tinker_core.loop.edges.task_report`: the same split a node makes of the message)."""
        return task_report(s.task, self.task_terms, s.stamp, s.cycle, s.episode)

    def robot_state(self, s: SimState) -> RobotState:
        """State ``s`` as the ``joint_states`` edge carries it."""
        return RobotState(s.stamp, s.q, s.qd, s.cycle, s.episode)

    def sent(self, stamp: int, wall_ns: int) -> None:
        """State ``stamp`` is going out now (before its first publish: waking subscribers is the loop's latency)."""
        self._published[stamp] = wall_ns
        if len(self._published) > KEEP_STAMPS:
            self._published.pop(next(iter(self._published)))

    def end_cycle(self, s: SimState, t0: int) -> None:
        """After the state went out: the camera's frame, success and episode bookkeeping, a reset when it ended."""
        if self.frames is not None and self.frames.tick(t0, s.stamp, self.scene_seed, s.cycle):
            self.take_frame()
        self.successes += s.success and self._success_episode != self.episode
        if s.success:
            self._success_episode = self.episode  # one success per episode
        if s.done and self.episode_cycles > 0:
            objects = self.report(s).objects()
            if objects is not None:
                self.objects_sorted += objects[0]
                self.objects_total += objects[1]
            self.take_frame()  # the reset moves the scene: this state's frame is taken now
            self.episode += 1
            self.episode_step = 0
            if self.frames is not None:
                self.frames.episode_framed = False
            self.arm.reset(self.seed + self.episode)
            self.scene_seed = self.seed + self.episode
            if self.goal is not None:  # a person's goal stays until they send another
                self.arm.set_goal(self.goal)
            self._reset_at_ns = s.stamp + 1  # commands for this state or older ones no longer apply

    def take_frame(self) -> None:
        """Hand the frame waiting (if any) to the camera: the scene only moves in ``arm.step()``, so it still
        shows the state the frame was due for."""
        job = self.frames.take() if self.frames is not None else None
        if job is not None and self.submit_frame is not None:
            self.submit_frame(*job)

    def set_param(self, name: str, value: object) -> None:
        """A changed dynamic parameter, from the next cycle on (``hold_after_cycles``, ``episode_cycles``)."""
        if name == "hold_after_cycles":
            self.arm.hold_after_cycles = int(value)
        elif name == "episode_cycles":
            self.episode_cycles = int(value)

    # --- status ------------------------------------------------------------------------------
    def values(self, namesake: str = "") -> dict[str, object]:
        """The /diagnostics values (``max_command_step_window`` starts again with each call)."""
        window, self.step_max_window = self.step_max_window, 0.0
        return {"holding": self.arm.holding, "holds": self.arm.holds, "command_publishers_error": self.foreign,
                "foreign_publisher_holds": self.foreign_holds, "namesake": namesake,
                "max_command_step": f"{self.step_max:.4f}", "max_command_step_window": f"{window:.4f}",
                "commands_over_velocity_limit": self.steps_over_limit,
                "rejected_commands": self.rejections.count, "stale_commands": self.stale, "sim_misses": self.arm.misses,
                "episode": self.episode, "successes": self.successes, "sensor_ends": self.sensor_ends,
                "goals": self.goals, "refused_goals": self.goal_refusals.count,
                "last_goal_error": self.goal_refusals.last,
                "goal": "" if self.goal is None else ",".join(f"{v:.3f}" for v in self.goal),
                "suction_switches": self.suction_switches,
                "last_error": self.rejections.last,
                **({"objects_sorted": self.objects_sorted, "objects_total": self.objects_total}
                   if self.objects_total else {}),
                **{f"unsafe_states.{k}": v for k, v in self.arm.env.violations.items()}}

    def level(self, namesake: str = "") -> tuple[Level, str]:
        if namesake:
            return Level.ERROR, namesake
        if self.foreign:
            return Level.ERROR, self.foreign
        level, message = self.rejections.level("rejected", "command")  # WARN while rejecting, OK once it stops
        if level:
            return Level.WARN, message
        level, message = self.goal_refusals.level("refused", "goal")
        if level:
            return Level.WARN, message
        if self.arm.holding:
            return Level.WARN, "holding: no fresh command"
        return Level.OK, "running"

    def close(self) -> None:
        self.arm.close()
