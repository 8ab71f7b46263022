"""Checkpoints: resume continues bit-for-bit; files are verified; the format has no pickle."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tinker_core.algos import DQN, PPO, SAC, load_algorithm
from tinker_core.errors import CheckpointError


def _weights(algo) -> dict[str, np.ndarray]:
    return {k: v.detach().cpu().numpy().copy() for k, v in algo.state_dict().items()}


@pytest.mark.parametrize("cls,env,fixture,half,total", [
    (SAC, "Pendulum-v1", "tiny_sac", 150, 300),
    (PPO, "CartPole-v1", "tiny_ppo", 256, 512),
    (PPO, "Pendulum-v1", "tiny_ppo_sde", 256, 512),
    (DQN, "CartPole-v1", "tiny_dqn", 150, 300),
])
def test_resume_is_bit_for_bit(cls, env, fixture, half, total, tmp_path, request):
    config = request.getfixturevalue(fixture)
    straight = cls(env, config)
    straight.learn(total, progress=False, out_dir=tmp_path / "a", checkpoint_every=half, tensorboard=False)

    first = cls(env, request.getfixturevalue(fixture))
    first.learn(total, progress=False, out_dir=tmp_path / "b", checkpoint_every=half, tensorboard=False,
                callback=lambda algo, info: algo.num_timesteps < half)
    ckpt = tmp_path / "b" / "checkpoints" / f"step_{half}"
    assert ckpt.is_dir()
    resumed = load_algorithm(ckpt)
    assert resumed.num_timesteps == half
    resumed.learn(total, progress=False, resume=True)

    assert resumed.num_timesteps == straight.num_timesteps == total
    assert resumed.num_updates == straight.num_updates > 0
    a, b = _weights(straight), _weights(resumed)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert straight.episode_history == resumed.episode_history


def test_checkpoint_layout_and_tamper_detection(tmp_path, tiny_sac):
    algo = SAC("Pendulum-v1", tiny_sac)
    algo.learn(120, progress=False)
    path = algo.save(tmp_path / "ck")
    assert sorted(p.name for p in path.iterdir()) == ["meta.json", "model.safetensors", "replay.safetensors"]
    meta = json.loads((path / "meta.json").read_text())
    assert meta["format"] == "tinker.algorithm" and meta["format_version"] == 1
    assert meta["algo"] == "sac" and meta["env_id"] == "Pendulum-v1"
    assert meta["counters"]["num_timesteps"] == 120
    assert {"tinker", "torch", "numpy", "gymnasium"} <= set(meta["versions"])
    assert not list(tmp_path.glob(".ck.tmp*")), "temporary directory left behind"
    # saving again over it replaces the whole directory
    algo.save(tmp_path / "ck")
    assert load_algorithm(tmp_path / "ck").num_timesteps == 120

    raw = bytearray((path / "model.safetensors").read_bytes())
    raw[-5] ^= 0xFF
    (path / "model.safetensors").write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="modified"):
        load_algorithm(path)


def test_checkpoint_for_another_env_is_refused(tmp_path, tiny_sac):
    SAC("Pendulum-v1", tiny_sac).save(tmp_path / "ck")
    import gymnasium as gym

    with pytest.raises(CheckpointError, match="saved for obs"):
        load_algorithm(tmp_path / "ck", env=gym.make("MountainCarContinuous-v0"))


def test_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="not a tinker checkpoint"):
        load_algorithm(tmp_path)


def test_specs_only_algorithm_roundtrip(tmp_path, tiny_dqn):
    from tinker_core.spec import Spec

    algo = DQN((Spec((4,), "float32"), Spec((), "int64", 0, 1)), tiny_dqn)
    algo.save(tmp_path / "ck")
    back = load_algorithm(tmp_path / "ck")
    assert back.vec_env is None
    obs = np.zeros(4, np.float32)
    assert back.predict(obs) == algo.predict(obs)
    assert torch.equal(back.q_net[0].weight, algo.q_net[0].weight)
