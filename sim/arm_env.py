"""`ArmEnv`: one gymnasium environment composing a `PyBulletWorld`, an `ArmRobot` and a `Task`.

Per step: the normalized action goes through the shared `ActionChain` to a joint position target
within the URDF limits, then through ``command_filter`` if one is given (the composition root passes
the SafetyWrapper here), then through ``action_latency_steps`` control periods of delay, to the
position motors; the physics advances one control period (``control_period / timestep`` substeps).

Observation (``camera=False``): a flat float32 vector of named terms, ``value = (raw - offset) * scale``
(see ``obs_terms``), clipped to +-OBS_BOUND
(`tinker_core.loop.observation`, the assembly perception runs too). With ``camera=True``: ``{"image": uint8 (S, S * camera_views, 3), "state": that vector}``.
Each episode's dynamics are: the fixed set ``dynamics`` if given, else a draw from ``randomize``'s
ranges (from the env's seeded RNG), else nominal; ``reset(options={"dynamics": ...})`` overrides one episode.
``latency_compensation`` (control periods; 0: off) plays the compensating policy side of a lagged robot
(`tinker_core.loop.latency_compensation`): the action chain's delta is taken from the newest target sent
(``commanded_target``), and the task's extra actions (ArmSort's suction) are held back that many periods. The
observation the env gives stays the measured one; the compensated policy's perception rewrites it.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import pybullet as p
from gymnasium import spaces

from tinker_sim.camera import Camera
from tinker_sim.dynamics import DynamicsParams, RandomizationRanges, resolve_dynamics, resolve_ranges
from tinker_sim.pybullet_world import PyBulletWorld
from tinker_sim.robot import ArmRobot
from tinker_sim.tasks import TASKS, Task, term
from tinker_core.action_chain import ActionChain, ActionChainConfig
from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.latency_compensation import DelayedActions, check_steps, predicted_pose
from tinker_core.loop.observation import OBS_BOUND, ObservationAssembly

CommandFilter = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, Any]]
HOME_NOISE_RAD = 0.1
"""half-width of the uniform noise added to the home pose at reset, rad"""


class ArmEnv(gym.Env):
    """A 7-DoF arm task; see the module docstring for the step pipeline and the observation layout."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, task: str | type[Task] = "reach", dynamics: str | os.PathLike | DynamicsParams | None = None,
                 randomize: bool | str | os.PathLike | RandomizationRanges = False, camera: bool = False,
                 image_size: int = 64, camera_views: int = 1, control_period: float = 0.05, action_chain: ActionChainConfig | None = None,
                 command_filter: CommandFilter | None = None, render_mode: str | None = None,
                 urdf_path: str | os.PathLike | None = None, task_kwargs: dict[str, Any] | None = None,
                 latency_compensation: int = 0):
        if isinstance(task, type) and issubclass(task, Task):
            task_cls = task
        elif task in TASKS:
            task_cls = TASKS[task]
        else:
            raise ConfigError(f"ArmEnv.task: expected one of {sorted(TASKS)} or a Task subclass, got {task!r}")
        if render_mode not in (None, "rgb_array"):
            raise ConfigError(f"ArmEnv.render_mode: expected None or 'rgb_array', got {render_mode!r}")
        self.fixed_dynamics = resolve_dynamics(dynamics)
        self.ranges = resolve_ranges(randomize) if self.fixed_dynamics is None else None
        self.render_mode = render_mode
        self.command_filter = command_filter
        self.world = PyBulletWorld(control_period=control_period)
        self.robot = ArmRobot(self.world, urdf_path)
        self.task = task_cls(self.world, self.robot, **(task_kwargs or {}))
        self.use_camera = bool(camera)
        self.camera = Camera(self.world, image_size, views=camera_views) if (camera or render_mode == "rgb_array") else None
        self.action_chain_config = action_chain if action_chain is not None else ActionChainConfig()
        self.action_chain = ActionChain(self.action_chain_config, self.robot.lower, self.robot.upper)
        self.latency_compensation = check_steps(latency_compensation, "ArmEnv.latency_compensation")
        self._delayed = DelayedActions(self.latency_compensation, self.task.extra_action_dims)
        self.joint_names = list(self.robot.joint_names)
        self.control_period = self.world.control_period
        dof = self.robot.dof

        c = self.action_chain_config
        if c.mode == "delta":
            joint_action = term("joint_pos_delta", dof, "rad", 1.0 / (c.scale * c.max_delta), 0.0, "joint")
        else:
            joint_action = term("joint_pos_target", dof, "rad", 2.0 / (self.robot.upper - self.robot.lower),
                                (self.robot.upper + self.robot.lower) / 2, "joint")
        self.action_terms = [joint_action] + [dict(t) for t in self.task.action_terms]
        n_act = dof + self.task.extra_action_dims
        self.action_space = spaces.Box(-1.0, 1.0, (n_act,), np.float32)

        ws_c, ws_h = self.task.workspace_center, self.task.workspace_half
        self.obs_terms = [
            term("joint_pos", dof, "rad", 2.0 / (self.robot.upper - self.robot.lower),
                 (self.robot.upper + self.robot.lower) / 2, "joint"),
            term("joint_vel", dof, "rad/s", self.control_period / c.max_step, 0.0, "joint"),
            term("ee_pos", 3, "m", 1.0 / ws_h, ws_c, "base"),
            *self.task.obs_terms(),
            term("last_action", n_act, "normalized", 1.0, 0.0, "action"),
        ]
        self.obs_assembly = ObservationAssembly(self.obs_terms, -OBS_BOUND, OBS_BOUND)
        """the one observation assembly (perception on the robot runs the same, from the bundle's terms)"""
        n_obs = self.obs_assembly.size
        state_space = spaces.Box(-OBS_BOUND, OBS_BOUND, (n_obs,), np.float32)
        if self.use_camera:
            self.observation_space = spaces.Dict(
                {"image": spaces.Box(0, 255, self.camera.shape, np.uint8), "state": state_space})
        else:
            self.observation_space = state_space

        self.dynamics = DynamicsParams()
        self._dyn_dict = self.dynamics.to_dict()
        self._queue: deque[np.ndarray] = deque()
        self._last_action = np.zeros(n_act)
        self._interventions = 0
        self._violations = 0
        self.violations: dict[str, int] = {"joint_position": 0, "joint_velocity": 0, "contact": 0}
        """unsafe states the simulated robot reached since construction (cycles, per kind): what a
        safety layer must prevent, counted from the physics, independently of that layer"""
        self._q, self._qd = self.robot.joint_state()
        self._ee = self.robot.ee_position()
        self._target = self._q.copy()

    # ---- episode ----------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        rng = self.np_random
        override = resolve_dynamics((options or {}).get("dynamics"))
        if override is not None:
            params = override
        elif self.fixed_dynamics is not None:
            params = self.fixed_dynamics
        elif self.ranges is not None:
            params = self.ranges.sample(rng)
        else:
            params = DynamicsParams()
        self.apply_dynamics(params)
        q0 = np.clip(self.robot.home + rng.uniform(-HOME_NOISE_RAD, HOME_NOISE_RAD, self.robot.dof),
                     self.robot.lower, self.robot.upper)
        self.robot.reset_joints(q0)
        self.robot.command(q0)
        self.action_chain.reset(q0)
        self._delayed.reset()
        self._queue = deque([q0.copy() for _ in range(params.action_latency_steps)])
        self._target = q0.copy()
        self.task.reset(rng, params)
        if self.camera is not None:
            self.camera.set_params(params, rng)
        self._last_action = np.zeros(self.action_space.shape[0])
        self._interventions = 0
        self._violations = 0
        self._read_state()
        _, success, task_info = self.task.evaluate(self._ee)
        return self._observe(), self._info(success, task_info)

    def set_curriculum(self, param: str, value: float) -> None:
        """A curriculum level (`tinker_core.curriculum`): sets the task's ``param``, e.g. the reach task's
        ``success_distance``; the task must have it."""
        if not hasattr(self.task, param):
            raise ConfigError(f"ArmEnv.set_curriculum: the {self.task.name!r} task has no parameter {param!r}")
        setattr(self.task, param, type(getattr(self.task, param))(value))

    def apply_dynamics(self, params: DynamicsParams) -> None:
        """Put a dynamics set in force (normally done by `reset`)."""
        self.dynamics = params
        self._dyn_dict = params.to_dict()
        self.robot.apply_dynamics(params.mass_scale, params.joint_damping_scale, params.actuator_gain, params.friction)
        if hasattr(self.task, "apply_dynamics"):
            self.task.apply_dynamics(params)

    def step(self, action):
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape[0] != self._last_action.shape[0]:
            raise ValidationError("ArmEnv.step.action", f"float[{self._last_action.shape[0]}]", f"float[{a.shape[0]}]")
        dof = self.robot.dof
        base = predicted_pose(self._target, self._q, self.latency_compensation, self.action_chain_config.max_step)
        target = self.action_chain(a[:dof], base)
        last = np.clip(a, -1.0, 1.0)
        last[np.isnan(last)] = 0.0
        self._last_action = last
        if dof < a.shape[0]:
            self.task.apply_action(self._delayed(self._last_action[dof:]), self._ee)
        self.step_joint_target(target, filtered=False)
        reward, success, task_info = self.task.evaluate(self._ee)
        terminated = bool(success and self.task.terminate_on_success)
        return self._observe(), float(reward), terminated, False, self._info(success, task_info)

    def step_joint_target(self, q_target: np.ndarray, filtered: bool = False) -> None:
        """Advance one control period commanding joint position target ``q_target`` (rad).

        ``command_filter`` runs unless ``filtered`` (the caller already filtered it); latency applies.
        The real-time robot drives the env through this, bypassing the action chain (the policy node ran it).
        """
        target = np.clip(np.asarray(q_target, dtype=np.float64), self.robot.lower, self.robot.upper)
        if self.command_filter is not None and not filtered:
            filtered_target, status = self.command_filter(target, self._q, self._qd)
            # None: the filter sends nothing (no valid state yet); the motors keep the target they have
            target = self._target if filtered_target is None else np.clip(
                np.asarray(filtered_target, dtype=np.float64), self.robot.lower, self.robot.upper)
            if getattr(status, "intervened", False):
                self._interventions += 1
        self._target = target
        if self._queue:
            self._queue.append(target)
            target = self._queue.popleft()
        self.robot.command(target)
        self.world.step()
        self._read_state()
        self._count_violations()

    def _count_violations(self) -> None:
        """Count the unsafe states this step reached: a joint beyond its URDF position limit (1 mrad slack) or
        velocity limit, or an arm link touching the ground or a task obstacle (the base link stands on the
        ground and is not counted)."""
        r, c = self.robot, self.world.client
        found = []
        if np.any(self._q < r.lower - 1e-3) or np.any(self._q > r.upper + 1e-3):
            found.append("joint_position")
        if np.any(np.abs(self._qd) > r.velocity_limits):
            found.append("joint_velocity")
        bodies = ([self.world.ground] if self.world.ground is not None else []) + self.task.obstacles()
        if any(pt[3] >= 0 for b in bodies for pt in p.getContactPoints(r.body, b, physicsClientId=c)):
            found.append("contact")
        for kind in found:
            self.violations[kind] += 1
        self._violations += bool(found)

    # ---- observation ------------------------------------------------------------------------------
    def _read_state(self) -> None:
        self._q, self._qd = self.robot.joint_state()
        self._ee = self.robot.ee_position()

    def _state_vector(self) -> np.ndarray:
        q, qd = self._q, self._qd
        std = self.dynamics.obs_noise_std
        if std > 0:
            noise = self.np_random.normal(0.0, std, 2 * self.robot.dof)
            q, qd = q + noise[: self.robot.dof], qd + noise[self.robot.dof:]
        return self.obs_assembly.scaled(np.concatenate([q, qd, self._ee, self.task.observe(self._ee), self._last_action]))

    def _observe(self):
        state = self._state_vector()
        if self.use_camera:
            return {"image": self.camera.capture(), "state": state}
        return state

    def _info(self, success: bool, task_info: dict[str, Any]) -> dict[str, Any]:
        return {"is_success": bool(success), **task_info, "dynamics": dict(self._dyn_dict),
                "safety_interventions": self._interventions, "safety_violations": self._violations}

    # ---- accessors for the real-time robot and tools -------------------------------------------
    @property
    def joint_state(self) -> tuple[np.ndarray, np.ndarray]:
        """Measured (noise-free) joint positions and velocities after the last step."""
        return self._q.copy(), self._qd.copy()

    @property
    def ee_position(self) -> np.ndarray:
        return self._ee.copy()

    @property
    def commanded_target(self) -> np.ndarray:
        """The newest joint target sent toward the motors (after the command filter, before the latency): the
        setpoint a robot's driver reports, which latency compensation predicts the pose from."""
        return self._target.copy()

    def task_state(self) -> dict[str, Any]:
        return self.task.state(self._ee)

    def render(self):
        if self.render_mode == "rgb_array":
            return self.camera.capture()
        return None

    def close(self) -> None:
        if getattr(self, "world", None) is not None:
            self.world.close()
