"""`ArmFleet`: several KUKA arms, each its own `tinker_sim.arm_env.ArmEnv` reach task, as one PettingZoo Parallel env.

Each agent (``robot1``, ``robot2`` ... by default) is one arm in its own PyBullet world with its own target, the
same observation, action and reward as ``tinker/ArmReach-v0`` (state only, no camera). The arms do not touch:
what joins them is what the agents file adds, such as a declared channel. Every arm's episode lasts
``max_steps`` steps (the ``ArmReach-v0`` limit); the env ends when all have. `deploy_layout` gives what a deploy
bundle of one agent must record (its observation and action terms, joints, action chain, control period), so an
agent trained here runs on the ROS graph's robot of the same name (`tinker_deploy.agent_export`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from pettingzoo import ParallelEnv

from tinker_core.errors import ConfigError


class ArmFleet(ParallelEnv):
    """``robots`` arms reaching their own targets; ``control_period`` s per step (as the graph runs)."""

    metadata = {"name": "tinker_arm_fleet", "render_modes": []}

    def __init__(self, robots: Sequence[str] = ("robot1", "robot2"), control_period: float = 0.05,
                 max_steps: int = 50):
        from tinker_sim.arm_env import ArmEnv

        if len(set(robots)) != len(robots) or not robots:
            raise ConfigError(f"ArmFleet.robots: expected distinct names, got {list(robots)}")
        if max_steps < 1:
            raise ConfigError(f"ArmFleet.max_steps: expected >= 1, got {max_steps}")
        self.possible_agents = list(robots)
        self.arms = {a: ArmEnv(task="reach", camera=False, control_period=control_period) for a in robots}
        self.control_period = float(control_period)
        self.max_steps = int(max_steps)
        self.agents: list[str] = []
        self._t = 0

    def observation_space(self, agent: str) -> Any:
        return self.arms[agent].observation_space

    def action_space(self, agent: str) -> Any:
        return self.arms[agent].action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents, self._t = list(self.possible_agents), 0
        obs, infos = {}, {}
        for i, a in enumerate(self.possible_agents):
            obs[a], infos[a] = self.arms[a].reset(seed=None if seed is None else seed + i)
        return obs, infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self._t += 1
        obs, rew, term, trunc, info = {}, {}, {}, {}, {}
        for a in self.agents:
            o, r, te, tr, inf = self.arms[a].step(np.asarray(actions[a], dtype=np.float32))
            obs[a], rew[a], term[a], info[a] = o, float(r), bool(te), inf
            trunc[a] = bool(tr) or self._t >= self.max_steps
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rew, term, trunc, info

    def deploy_layout(self, agent: str) -> dict[str, Any]:
        """What a deploy bundle of ``agent`` records about its env (as `tinker_core.algos.export_meta` reads a
        single env's): terms, joints, action chain, control period, env id."""
        arm = self.arms[agent]
        return {"obs_terms": [dict(t) for t in arm.obs_terms], "action_terms": [dict(t) for t in arm.action_terms],
                "joint_names": list(arm.joint_names), "action_chain_config": arm.action_chain_config,
                "control_period": arm.control_period, "env_id": "tinker/ArmFleet-v0"}

    def close(self) -> None:
        for arm in self.arms.values():
            arm.close()


__all__ = ["ArmFleet"]
