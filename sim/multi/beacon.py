"""`BeaconRelay`: a camera tower and a wheeled base that must cooperate (a PettingZoo Parallel env).

Four pads lie at the corners of a 1.6 m square; each episode one of them is lit red. Only the
**spotter** (a fixed tower with an overhead camera: a 36x36 RGB image, uint8) can see which. It
cannot move; its action is one of 4 signals, which the **rover** (a disc base, the same physics as
`tinker_sim.multi.discs`, with domain randomization) receives in its next observation, besides its own
position, velocity and the time left. The rover commands a planar velocity.

The episode ends when the rover reaches a pad (within 0.2 m of its centre): the lit one is a
success (+2 for both), any other a failure (no bonus), or after ``max_steps``. Both also get 2 x the
distance the rover closed to the lit pad each step. (A first version also charged -1 for a wrong
pad; trained with DQN + SAC for 9.3k steps, the rover learned to stay away from every pad and never
reached one, so the spotter's signal never mattered.) Neither can succeed alone: without the
spotter's signal the rover can only guess (at best 1 in 4), and the spotter cannot move.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pybullet as p
from gymnasium import spaces
from pettingzoo import ParallelEnv

from tinker_sim.multi.discs import DiscFleet, DiscRandomization
from tinker_sim.pybullet_world import PyBulletWorld
from tinker_core.errors import ConfigError

PADS = np.array([[0.8, 0.8], [-0.8, 0.8], [-0.8, -0.8], [0.8, -0.8]])
PAD_RADIUS_M = 0.2
IMAGE_SIZE = 36
LIT = (1.0, 0.1, 0.1, 1.0)
DARK = (0.55, 0.55, 0.55, 1.0)


class BeaconRelay(ParallelEnv):
    """spotter (image, Discrete(4)) + rover (vector, Box(2)); shared reward."""

    metadata = {"name": "tinker_beacon_relay_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, max_steps: int = 40, randomization: DiscRandomization | dict | None = None):
        if max_steps < 1:
            raise ConfigError(f"BeaconRelay.max_steps: expected >= 1, got {max_steps}")
        if isinstance(randomization, dict):
            randomization = DiscRandomization(**randomization)
        self.randomization = randomization or DiscRandomization()
        self.max_steps = int(max_steps)
        self.possible_agents = ["spotter", "rover"]
        self.agents: list[str] = []
        self.world = PyBulletWorld(control_period=0.1, timestep=0.1 / 6)
        self.fleet = DiscFleet(self.world, 1, rgba=(0.1, 0.3, 0.9, 1.0))
        self.pads = [self.world.add_box([0.15, 0.15, 0.004], [x, y, 0.004], DARK, collision=False) for x, y in PADS]
        self.view = p.computeViewMatrix([0, 0, 3.0], [0, 0, 0], [0, 1, 0])
        self.projection = p.computeProjectionMatrixFOV(45.0, 1.0, 0.5, 4.0)
        self._spaces = {
            "spotter": (spaces.Box(0, 255, (IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8), spaces.Discrete(4)),
            "rover": (spaces.Box(-np.inf, np.inf, (9,), np.float32), spaces.Box(-1.0, 1.0, (2,), np.float32)),
        }
        self._rng = np.random.default_rng()

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent: str) -> spaces.Space:
        return self._spaces[agent][0]

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent: str) -> spaces.Space:
        return self._spaces[agent][1]

    def state(self) -> np.ndarray:
        lit = np.eye(4)[self.lit]
        return np.concatenate([self._pos[0], self._vel[0], lit, self._signal, [self._left()]]).astype(np.float32)

    def _left(self) -> float:
        return 1.0 - self._t / self.max_steps

    def _image(self) -> np.ndarray:
        _, _, rgba, _, _ = p.getCameraImage(IMAGE_SIZE, IMAGE_SIZE, self.view, self.projection, shadow=0,
                                            renderer=p.ER_TINY_RENDERER, flags=p.ER_NO_SEGMENTATION_MASK,
                                            physicsClientId=self.world.client)
        return np.asarray(rgba, dtype=np.uint8).reshape(IMAGE_SIZE, IMAGE_SIZE, 4)[:, :, :3].copy()

    def _observations(self) -> dict[str, np.ndarray]:
        rover = np.concatenate([self._pos[0], self._vel[0], self._signal, [self._left()]]).astype(np.float32)
        return {"spotter": self._image(), "rover": rover}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        rng = self._rng
        self.fleet.apply_params(self.randomization.draw(rng, 1))
        self.lit = int(rng.integers(4))
        for i, b in enumerate(self.pads):
            p.changeVisualShape(b, -1, rgbaColor=LIT if i == self.lit else DARK, physicsClientId=self.world.client)
        self.fleet.place(rng.uniform(-0.2, 0.2, size=(1, 2)))
        self._pos, self._vel = self.fleet.states()
        self._signal = np.zeros(4)
        self._dist = float(np.linalg.norm(PADS[self.lit] - self._pos[0]))
        self._t = 0
        self.agents = list(self.possible_agents)
        return self._observations(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise ConfigError("BeaconRelay.step: the episode is over; call reset()")
        self.fleet.step(np.asarray(actions.get("rover", np.zeros(2)), dtype=np.float64).reshape(1, 2))
        self._signal = np.eye(4)[int(actions["spotter"])] if "spotter" in actions else np.zeros(4)
        self._t += 1
        self._pos, self._vel = self.fleet.states()
        d_pads = np.linalg.norm(PADS - self._pos[0], axis=1)
        reached = np.flatnonzero(d_pads <= PAD_RADIUS_M)
        rew = 2.0 * (self._dist - d_pads[self.lit])
        self._dist = float(d_pads[self.lit])
        success = self.lit in reached
        done = len(reached) > 0
        rew += 2.0 if success else 0.0
        trunc = not done and self._t >= self.max_steps
        info: dict[str, Any] = {"lit": self.lit}
        if done or trunc:
            info["is_success"] = bool(success)
        agents = self.agents
        obs = self._observations()
        out = ({a: obs[a] for a in agents}, {a: float(rew) for a in agents}, {a: bool(done) for a in agents},
               {a: bool(trunc) for a in agents}, {a: dict(info) for a in agents})
        if done or trunc:
            self.agents = []
        return out

    def close(self) -> None:
        if getattr(self, "world", None) is not None and p.isConnected(self.world.client):
            p.disconnect(self.world.client)
