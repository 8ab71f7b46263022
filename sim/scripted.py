"""`ScriptedReachController`: a non-learned ArmReach controller (IK + proportional joint steps).

It proves the task is solvable and the success test honest: it reads only the observation (joint
positions and the target, decoded through ``obs_terms``), solves damped-least-squares IK on a private
kinematic copy of the robot (its own PyBullet client, never the env's), and outputs the normalized
delta action that moves each joint toward the IK solution.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sim.pybullet_world import PyBulletWorld
from sim.robot import ArmRobot
from tinker_core.errors import ConfigError


def decode_terms(obs_terms: list[dict[str, Any]], vector: np.ndarray) -> dict[str, np.ndarray]:
    """Raw values of every named term of a flat observation vector (inverse of ``(raw - offset) * scale``)."""
    out, i = {}, 0
    for t in obs_terms:
        n = t["size"]
        out[t["name"]] = np.asarray(vector[i:i + n], dtype=np.float64) / np.asarray(t["scale"]) + np.asarray(t["offset"])
        i += n
    return out


class ScriptedReachController:
    """``act(obs) -> action`` in the env's action space; build it from the env (``env.unwrapped`` is read)."""

    def __init__(self, env: Any, gain: float = 1.0):
        u = env.unwrapped
        names = [t["name"] for t in u.obs_terms]
        for needed in ("joint_pos", "target_pos"):
            if needed not in names:
                raise ConfigError(f"ScriptedReachController: observation has no {needed!r} term (terms: {names})")
        cfg = u.action_chain_config
        if cfg.mode != "delta":
            raise ConfigError(f"ScriptedReachController: expected action_chain mode 'delta', got {cfg.mode!r}")
        self.obs_terms = u.obs_terms
        self.step_rad = cfg.max_delta * cfg.scale
        self.gain = float(gain)
        self.n_act = int(np.prod(u.action_space.shape))
        self._world = PyBulletWorld(ground=False)
        self._kin = ArmRobot(self._world, u.robot.urdf_path)

    def act(self, obs: Any) -> np.ndarray:
        state = obs["state"] if isinstance(obs, dict) else obs
        terms = decode_terms(self.obs_terms, np.asarray(state))
        q = terms["joint_pos"]
        q_goal = self._kin.inverse_kinematics(terms["target_pos"], rest=q)
        action = np.zeros(self.n_act, dtype=np.float32)
        action[: q.shape[0]] = np.clip(self.gain * (q_goal - q) / self.step_rad, -1.0, 1.0)
        return action

    def close(self) -> None:
        self._world.close()
