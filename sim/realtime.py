"""`RealTimeArm`: the simulated robot stepped against the wall clock, as the robot behind the ROS 2 stack.

It is the same `ArmEnv` (robot, task, dynamics), driven by joint position commands instead of
normalized actions: the policy node already ran the action chain and the safety node filtered it.
Each control cycle advances one control period of physics using the latest command. When no fresh
command arrives for ``hold_after_cycles`` cycles the robot holds the position it had at that moment
(the robot side holds when commands stop). Timing: a cycle is *missed* when it starts more than one
period after it was due or ends after its slot; ``misses`` and ``cycles`` count them.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable

import numpy as np

from tinker_sim.arm_env import ArmEnv
from tinker_sim.dynamics import DynamicsParams, RandomizationRanges
from tinker_core.errors import ConfigError, ValidationError


class RealTimeArm:
    """One simulated arm with a command input, joint-state/camera outputs and its own timing counters."""

    def __init__(self, task: str = "reach", dynamics: str | os.PathLike | DynamicsParams | None = None,
                 camera: bool = True, image_size: int = 64, camera_views: int = 1, control_period: float = 0.05,
                 seed: int = 0,
                 hold_after_cycles: int | None = 4, randomize: bool | str | os.PathLike | RandomizationRanges = False,
                 urdf_path: str | os.PathLike | None = None, clock_ns: Callable[[], int] = time.monotonic_ns,
                 task_kwargs: dict[str, Any] | None = None):
        if hold_after_cycles is not None and int(hold_after_cycles) < 1:
            raise ConfigError(f"RealTimeArm.hold_after_cycles: expected >= 1 or None, got {hold_after_cycles}")
        self.env = ArmEnv(task=task, dynamics=dynamics, randomize=randomize, camera=camera, image_size=image_size,
                          camera_views=camera_views, control_period=control_period, urdf_path=urdf_path,
                          task_kwargs=task_kwargs)
        self.robot = self.env.robot
        self.joint_names = list(self.env.joint_names)
        self.control_period = self.env.control_period
        self.period_ns = int(round(self.control_period * 1e9))
        self.hold_after_cycles = None if hold_after_cycles is None else int(hold_after_cycles)
        self.clock_ns = clock_ns
        self._lock = threading.Lock()
        self.cycles = 0
        """control cycles run since construction"""
        self.misses = 0
        """cycles that started late or overran their slot"""
        self.holds = 0
        """times the robot started holding because commands stopped"""
        self.last_cycle_ns = 0
        self.max_cycle_ns = 0
        self._due_ns: int | None = None
        self.reset(seed)

    # ---- episode ---------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> None:
        """New episode (new target/objects, dynamics); clears the command so the arm holds still."""
        with self._lock:
            self.env.reset(seed=seed)
            q, _ = self.env.joint_state
            self._command: np.ndarray | None = None
            self._age = 0
            self._hold = q
            self._suction = False
            self.holding = True
            self._stamp_ns = time.time_ns()

    # ---- I/O -------------------------------------------------------------------------------------
    def set_command(self, q_target: Any) -> None:
        """Store the latest joint position command (rad, one per joint); it is applied at the next cycle."""
        q = np.asarray(q_target, dtype=np.float64).reshape(-1)
        if q.shape[0] != self.robot.dof:
            raise ValidationError("RealTimeArm.command", f"float[{self.robot.dof}]", f"float[{q.shape[0]}]")
        if not np.all(np.isfinite(q)):
            raise ValidationError("RealTimeArm.command", "finite joint positions", "NaN/inf")
        with self._lock:
            self._command = q.copy()
            self._age = 0

    def set_suction(self, on: bool) -> None:
        """ArmSort's suction cup (the task's extra action): on grips the touched object, off releases it."""
        if self.env.task.extra_action_dims != 1:
            raise ConfigError(f"RealTimeArm.set_suction: task {self.env.task.name!r} has no suction")
        with self._lock:
            self._suction = bool(on)

    def set_goal(self, goal: Any) -> None:
        """A goal the robot is told (`tinker_sim.tasks.base.Task.set_goal`), from the next cycle on."""
        with self._lock:
            self.env.task.set_goal(np.asarray(goal, dtype=np.float64))

    @property
    def suction(self) -> bool:
        """The suction command in force (reset turns it off)."""
        return self._suction

    def state(self) -> tuple[np.ndarray, np.ndarray, int]:
        """Measured joint positions (rad), velocities (rad/s) and the wall-clock stamp (ns) of that state."""
        with self._lock:
            q, qd = self.env.joint_state
            return q, qd, self._stamp_ns

    def image(self) -> np.ndarray:
        """The camera frame of the current state, uint8 (H, W, 3)."""
        if self.env.camera is None:
            raise ConfigError("RealTimeArm.image: this arm was built with camera=False")
        with self._lock:
            return self.env.camera.capture()

    def task_state(self) -> dict[str, Any]:
        """The task's state (ArmReach: target, distance, success)."""
        with self._lock:
            return self.env.task_state()

    # ---- stepping --------------------------------------------------------------------------------
    def step(self) -> None:
        """Advance one control period of physics with the latest command (or the hold position)."""
        with self._lock:
            fresh = self._command is not None and (self.hold_after_cycles is None or self._age < self.hold_after_cycles)
            if fresh:
                target = self._command
                self.holding = False
            else:
                if not self.holding:
                    self._hold, _ = self.env.joint_state
                    self.holding = True
                    self.holds += 1
                target = self._hold
            if self.env.task.extra_action_dims:
                self.env.task.apply_action(np.array([1.0 if self._suction else -1.0]), self.env.ee_position)
            self.env.step_joint_target(target, filtered=True)
            self._age += 1
            self.cycles += 1
            self._stamp_ns = time.time_ns()

    def run_cycle(self, now_ns: int | None = None) -> bool:
        """One timed cycle at ``now_ns`` (monotonic ns; default: the clock). Returns True if it was on time."""
        start = self.clock_ns() if now_ns is None else int(now_ns)
        if self._due_ns is None:
            self._due_ns = start
        late = start - self._due_ns
        on_time = True
        if late >= self.period_ns:  # woke a whole period or more after this cycle was due: those slots are lost
            lost = late // self.period_ns
            self.misses += int(lost)
            self._due_ns += int(lost) * self.period_ns
            on_time = False
        self.step()
        end = self.clock_ns()
        self.last_cycle_ns = end - start
        self.max_cycle_ns = max(self.max_cycle_ns, self.last_cycle_ns)
        if end > self._due_ns + self.period_ns:
            self.misses += 1
            on_time = False
        self._due_ns += self.period_ns
        return on_time

    def spin(self, cycles: int | None = None, stop: threading.Event | None = None) -> None:
        """Run cycles on the wall clock (one per control period) until ``cycles`` ran or ``stop`` is set."""
        done = 0
        while (cycles is None or done < cycles) and not (stop is not None and stop.is_set()):
            if self._due_ns is not None:
                wait = self._due_ns - self.clock_ns()
                if wait > 0:
                    if stop is not None:
                        if stop.wait(wait / 1e9):
                            break
                    else:
                        time.sleep(wait / 1e9)
            self.run_cycle()
            done += 1

    def close(self) -> None:
        self.env.close()
