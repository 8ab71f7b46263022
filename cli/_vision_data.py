"""Labelled camera images for the locator (`tinker vision data`): the composition of sim (images; true positions
as labels) and the task's shipped state policy (to put the arm, and the objects it carries, where they go).

ArmReach: one target (the marker); ArmSort: its two objects, one of each kind (the locator's things: the red
cube, then the blue cylinder). Each label set also has the end effector's true position (the hand the camera
sees: what the locator's calibration learns to find)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

TASKS = {"reach": "tinker/ArmReach-v0", "sort": "tinker/ArmSort-v0"}
"""task -> the env whose shipped state policy drives the arm"""


def generate(episodes: int, seed: int = 0, image_size: int = 64, views: int = 2, per_episode: int | None = None,
             ranges: str | Path | None = None, on_episode: Callable[[int], None] | None = None,
             task: str = "reach") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``episodes * per_episode`` images uint8 (N, S, views*S, 3), true positions float32 (N, 3) per thing found
    (reach: the target; sort: the kind-0 then the kind-1 object: (N, 6), NaN for an object off the table) and true
    end-effector positions (N, 3), base frame, m.

    Each episode: randomized dynamics and camera, jittered colours of the things to find, one frame at reset, then
    frames after random numbers of steps of the shipped state policy (reach: 1..8, 2 frames an episode by default;
    sort: 1..100, 6 frames: the objects are seen lying, carried and in their bins)."""
    import pybullet as p

    from tinker_core.errors import ConfigError
    from tinker_deploy.pretrained import default_bundle
    from tinker_deploy.runtime import OnnxPolicy
    from tinker_sim.arm_env import ArmEnv
    from tinker_sim.dynamics import CONFIG_DIR, RandomizationRanges
    from tinker_sim.tasks.sort import KIND_COLORS, NUM_KINDS, TABLE_CENTER, TABLE_HALF, TABLE_TOP

    def on_table(pos: np.ndarray) -> np.ndarray:
        """An object's label, NaN where it fell off the table (the arm knocked it: nowhere a locator is taught)."""
        inside = np.all(np.abs(pos[:2] - TABLE_CENTER[:2]) <= TABLE_HALF[:2]) and pos[2] > TABLE_TOP
        return pos if inside else np.full(3, np.nan)

    if task not in TASKS:
        raise ConfigError(f"vision data: task expected one of {sorted(TASKS)}, got {task!r}")
    sort = task == "sort"
    per_episode = per_episode or (6 if sort else 2)
    horizon = 100 if sort else 8
    rng_path = ranges or CONFIG_DIR / "vision_randomization.yaml"
    env = ArmEnv(task, camera=True, image_size=image_size, camera_views=views,
                 randomize=RandomizationRanges.load(rng_path))
    policy = OnnxPolicy.from_bundle(default_bundle(TASKS[task]))
    rng = np.random.default_rng(seed)
    images, labels, hands = [], [], []
    c = env.world.client

    def record(obs: dict) -> None:
        images.append(obs["image"])
        if sort:
            t = env.task
            labels.append(np.concatenate([on_table(t.positions[int(np.flatnonzero(t.kinds == k)[0])])
                                          for k in range(NUM_KINDS)]))
        else:
            labels.append(env.task.target.copy())
        hands.append(env.ee_position)

    try:
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed * 1_000_003 + ep)
            if sort:
                if sorted(env.task.kinds.tolist()) != list(range(NUM_KINDS)):
                    raise ConfigError(f"vision data: the sort locator finds one object of each kind; this episode "
                                      f"has kinds {env.task.kinds.tolist()} (ArmSort with num_objects=2)")
                for body, kind in zip(env.task.objects, env.task.kinds):
                    rgb = np.clip(np.array(KIND_COLORS[kind][:3]) + rng.uniform(-0.1, 0.1, 3), 0, 1)
                    p.changeVisualShape(body, -1, rgbaColor=[*rgb, 1.0], physicsClientId=c)
            else:
                rgb = np.clip(np.array([0.1, 0.8, 0.1]) + rng.uniform(-0.1, 0.15, 3), 0, 1)
                p.changeVisualShape(env.task.marker, -1, rgbaColor=[*rgb, 1.0], physicsClientId=c)
            obs["image"] = env.camera.capture()
            stops = (sorted(rng.choice(np.arange(1, horizon + 1), per_episode - 1, replace=False))
                     if per_episode > 1 else [])
            record(obs)
            t, done = 0, False
            for stop in stops:
                while t < stop and not done:
                    obs, _, term, trunc, _ = env.step(policy(obs["state"]))  # state: only to drive the arm
                    t += 1
                    done = sort and (term or trunc)  # reach: frames as they always were
                if done and t < stop:
                    break  # the episode ended (sorted): its last frame is already recorded
                record(obs)
            if on_episode:
                on_episode(ep)
    finally:
        env.close()
    return np.stack(images), np.asarray(labels, dtype=np.float32), np.asarray(hands, dtype=np.float32)
