"""Parallel sampling: gymnasium vector envs in subprocesses and the same env inside a real Ray actor."""

from __future__ import annotations

import pickle
import shutil
import tempfile

import numpy as np
import pytest

from tinker_sim.vector import EnvFactory, EnvRunner, make_vec
from tinker_core.errors import ConfigError


def test_async_vector_env_steps_two_workers_reproducibly():
    vec = make_vec("tinker/ArmReach-v0", 2, asynchronous=True, randomize=True)
    try:
        obs, info = vec.reset(seed=5)
        assert obs.shape == (2,) + vec.single_observation_space.shape
        assert not np.array_equal(obs[0], obs[1])  # copies are seeded 5 and 6
        actions = np.tile(np.linspace(-1, 1, 7, dtype=np.float32), (2, 1))
        for _ in range(3):
            obs, rew, term, trunc, info = vec.step(actions)
        assert rew.shape == (2,) and "is_success" in info and "dynamics" in info
        obs2, info2 = vec.reset(seed=5)
        obs3, _ = vec.reset(seed=5)
        np.testing.assert_array_equal(obs2, obs3)
    finally:
        vec.close()


def test_sync_vector_env_with_camera_has_batched_images():
    vec = make_vec("tinker/ArmReach-v0", 2, asynchronous=False, camera=True, image_size=32)
    try:
        obs, _ = vec.reset(seed=0)
        assert obs["image"].shape == (2, 32, 32, 3) and obs["image"].dtype == np.uint8
    finally:
        vec.close()


def test_factory_is_picklable_and_bad_count_is_an_error():
    f = pickle.loads(pickle.dumps(EnvFactory("tinker/ArmSort-v0", {"randomize": True})))
    env = f()
    try:
        assert env.action_space.shape == (8,)
    finally:
        env.close()
    with pytest.raises(ConfigError, match="make_vec.num_envs: expected >= 1, got 0"):
        make_vec("tinker/ArmReach-v0", 0)


def test_env_runs_inside_a_ray_actor(monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    temp_dir = tempfile.mkdtemp(prefix="tkray", dir="/tmp")  # short: Ray's socket paths must stay < 108 bytes
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=temp_dir, log_to_driver=False, configure_logging=False)
    try:
        def start():
            return ray.remote(EnvRunner).remote(EnvFactory("tinker/ArmReach-v0", {"randomize": True}), seed=1)

        runner = start()
        try:
            batch = ray.get(runner.rollout.remote(60), timeout=120)
        except ray.exceptions.ActorDiedError as e:
            # Ray's own start-up, not the env: once in a full run on a loaded machine the worker process was never
            # started ("cancelled before it started running"). Only that case gets one fresh actor.
            if "before it started" not in str(e):
                raise
            runner = start()
            batch = ray.get(runner.rollout.remote(60), timeout=120)
        assert batch["obs"].shape == (60, 30) and batch["action"].shape == (60, 7)
        assert batch["episodes"] >= 1  # the 50-step time limit ended at least one episode inside the actor
        ray.get(runner.close.remote(), timeout=30)
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
