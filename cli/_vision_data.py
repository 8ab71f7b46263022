"""Labelled camera images of ArmReach for the target locator (`tinker vision data`): the composition of sim
(images; true target and end-effector positions as labels) and the shipped state policy (to put the arm in the
poses it takes while reaching)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np


def generate(episodes: int, seed: int = 0, image_size: int = 64, views: int = 2, per_episode: int = 2,
             ranges: str | Path | None = None, on_episode: Callable[[int], None] | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``episodes * per_episode`` images uint8 (N, S, views*S, 3), true targets and true end-effector positions
    float32 (N, 3) each, base frame, m (the hand the camera sees: what the locator's calibration learns to find).

    Each episode: randomized dynamics and camera, a jittered marker colour, one frame at reset, then frames after
    a random number (1..8) of steps of the shipped state policy (so the arm is seen where it goes)."""
    import pybullet as p

    from tinker_deploy.pretrained import default_bundle
    from tinker_deploy.runtime import OnnxPolicy
    from tinker_sim.arm_env import ArmEnv
    from tinker_sim.dynamics import RandomizationRanges

    from tinker_sim.dynamics import CONFIG_DIR

    rng_path = ranges or CONFIG_DIR / "vision_randomization.yaml"
    env = ArmEnv("reach", camera=True, image_size=image_size, camera_views=views,
                 randomize=RandomizationRanges.load(rng_path))
    policy = OnnxPolicy.from_bundle(default_bundle("tinker/ArmReach-v0"))
    rng = np.random.default_rng(seed)
    images, targets, hands = [], [], []
    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed * 1_000_003 + ep)
            rgb = np.clip(np.array([0.1, 0.8, 0.1]) + rng.uniform(-0.1, 0.15, 3), 0, 1)
            p.changeVisualShape(env.task.marker, -1, rgbaColor=[*rgb, 1.0], physicsClientId=env.world.client)
            obs["image"] = env.camera.capture()
            stops = sorted(rng.choice(np.arange(1, 9), per_episode - 1, replace=False)) if per_episode > 1 else []
            images.append(obs["image"])
            targets.append(env.task.target.copy())
            hands.append(env.ee_position)
            t = 0
            for stop in stops:
                while t < stop:
                    obs, _, term, _, _ = env.step(policy(obs["state"]))  # state: only to drive the arm
                    t += 1
                images.append(obs["image"])
                targets.append(env.task.target.copy())
                hands.append(env.ee_position)
            if on_episode:
                on_episode(ep)
    finally:
        env.close()
    return np.stack(images), np.asarray(targets, dtype=np.float32), np.asarray(hands, dtype=np.float32)
