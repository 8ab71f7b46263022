"""`ScriptedReachController`: a non-learned ArmReach controller (IK + proportional joint steps).

It proves the task is solvable and the success test honest: it reads only the observation (joint
positions and the target, decoded through ``obs_terms``), solves damped-least-squares IK on a private
kinematic copy of the robot (its own PyBullet client, never the env's), and outputs the normalized
delta action that moves each joint toward the IK solution.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tinker_sim.pybullet_world import PyBulletWorld
from tinker_sim.robot import ArmRobot
from tinker_core.errors import ConfigError


def decode_terms(obs_terms: list[dict[str, Any]], vector: np.ndarray) -> dict[str, np.ndarray]:
    """Raw values of every named term of a flat observation vector (inverse of ``(raw - offset) * scale``)."""
    out, i = {}, 0
    for t in obs_terms:
        n = t["size"]
        out[t["name"]] = np.asarray(vector[i:i + n], dtype=np.float64) / np.asarray(t["scale"]) + np.asarray(t["offset"])
        i += n
    return out


class _JointIK:
    """A private kinematic copy of the env's robot (own PyBullet client) and the action scaling of its chain."""

    def __init__(self, env: Any, required: tuple[str, ...]):
        u = env.unwrapped
        names = [t["name"] for t in u.obs_terms]
        for needed in required:
            if needed not in names:
                raise ConfigError(f"{type(self).__name__}: observation has no {needed!r} term (terms: {names})")
        cfg = u.action_chain_config
        if cfg.mode != "delta":
            raise ConfigError(f"{type(self).__name__}: expected action_chain mode 'delta', got {cfg.mode!r}")
        self.obs_terms = u.obs_terms
        self.step_rad = cfg.max_delta * cfg.scale
        self.n_act = int(np.prod(u.action_space.shape))
        self._world = PyBulletWorld(ground=False)
        self._kin = ArmRobot(self._world, u.robot.urdf_path)

    def decode(self, obs: Any) -> dict[str, np.ndarray]:
        state = obs["state"] if isinstance(obs, dict) else obs
        return decode_terms(self.obs_terms, np.asarray(state))

    def joint_action(self, q: np.ndarray, ee_goal: np.ndarray, gain: float = 1.0) -> np.ndarray:
        """Normalized action moving the joints toward the IK solution for ``ee_goal`` (extra dims zero)."""
        q_goal = self._kin.inverse_kinematics(ee_goal, rest=q)
        action = np.zeros(self.n_act, dtype=np.float32)
        action[: q.shape[0]] = np.clip(gain * (q_goal - q) / self.step_rad, -1.0, 1.0)
        return action

    def close(self) -> None:
        self._world.close()


class ScriptedReachController(_JointIK):
    """``act(obs) -> action`` in the env's action space; build it from the env (``env.unwrapped`` is read)."""

    def __init__(self, env: Any, gain: float = 1.0):
        super().__init__(env, ("joint_pos", "target_pos"))
        self.gain = float(gain)

    def act(self, obs: Any) -> np.ndarray:
        t = self.decode(obs)
        return self.joint_action(t["joint_pos"], t["target_pos"], self.gain)


class ScriptedSortController(_JointIK):
    """A pick-and-place state machine for ArmSort: above object, descend with suction on, lift, carry, release.

    Like the reach controller it reads only the observation (decoded through ``obs_terms``) and uses IK
    on a private kinematic copy of the robot. Call ``reset()`` at each episode start.
    """

    HOVER_Z = 0.27
    """end-effector link height while moving between places, m"""
    TOOL_LENGTH = 0.045
    """distance from the end-effector link frame to the suction face, m"""

    def __init__(self, env: Any):
        super().__init__(env, ("joint_pos", "ee_pos", "suction_active", "obj0_pos", "obj0_sorted"))
        self.num_objects = sum(1 for t in self.obs_terms if t["name"].endswith("_sorted"))
        self.reset()

    def reset(self) -> None:
        self.phase = "approach"
        self.index: int | None = None
        self.release_steps = 0

    def _move(self, t: dict[str, np.ndarray], goal: np.ndarray, suction: bool) -> np.ndarray:
        action = self.joint_action(t["joint_pos"], goal)
        action[-1] = 1.0 if suction else -1.0
        return action

    def act(self, obs: Any) -> np.ndarray:
        t = self.decode(obs)
        ee, holding = t["ee_pos"], t["suction_active"][0] > 0.5
        if self.index is None or (t[f"obj{self.index}_sorted"][0] > 0.5 and not holding):
            pending = [i for i in range(self.num_objects) if t[f"obj{i}_sorted"][0] < 0.5]
            if not pending:
                return self._move(t, ee, suction=False)
            self.index, self.phase = pending[0], "approach"
        obj = t[f"obj{self.index}_pos"]
        goal_bin = obj + t[f"obj{self.index}_bin_minus_obj"]
        hover_obj = np.array([obj[0], obj[1], self.HOVER_Z])
        hover_bin = np.array([goal_bin[0], goal_bin[1], self.HOVER_Z])
        if self.phase == "approach":
            if np.linalg.norm(ee - hover_obj) < 0.03:
                self.phase = "descend"
            return self._move(t, hover_obj, suction=False)
        if self.phase == "descend":
            if holding:
                self.phase = "lift"
            else:
                half = obj[2] - 0.05  # object half-height above the table top (0.05 m)
                grip = np.array([obj[0], obj[1], obj[2] + half + self.TOOL_LENGTH - 0.01])
                return self._move(t, grip, suction=True)
        if self.phase == "lift":
            if not holding:
                self.phase = "approach"  # dropped it: start over
                return self._move(t, hover_obj, suction=False)
            if ee[2] > self.HOVER_Z - 0.05:
                self.phase = "carry"
            return self._move(t, np.array([ee[0], ee[1], self.HOVER_Z]), suction=True)
        if self.phase == "carry":
            if not holding:
                self.phase = "approach"
                return self._move(t, hover_obj, suction=False)
            if np.linalg.norm(ee[:2] - hover_bin[:2]) < 0.02:
                self.phase, self.release_steps = "release", 0
            return self._move(t, hover_bin, suction=True)
        # release: suction off above the bin, wait for the object to settle
        self.release_steps += 1
        if self.release_steps > 8:
            self.phase = "approach"
        return self._move(t, hover_bin, suction=False)
