"""Shared bundles for the deploy tests: real torch modules exported once per session with the real exporter."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tinker_deploy.export import export_bundle, generate_obs
from tinker_deploy.reference_policies import cnn_policy, mlp_policy


def _quiet(_msg: str) -> None:
    pass


@pytest.fixture(scope="session")
def bundles_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bundles")


@pytest.fixture(scope="session")
def mlp_bundle(bundles_dir) -> Path:
    """MLP 10 -> 256 -> 256 -> 4 with an int8 model; 128 recorded observations."""
    module, meta = mlp_policy()
    return export_bundle(module, meta, bundles_dir / "mlp.onnx", recorded_obs=generate_obs(meta["obs_spec"], 128),
                         quantize=True, policy_version=1, log=_quiet)


@pytest.fixture(scope="session")
def mlp_bundle_v2(bundles_dir) -> Path:
    """Same I/O as `mlp_bundle`, other weights, version 2."""
    module, meta = mlp_policy(seed=1)
    return export_bundle(module, meta, bundles_dir / "mlp_v2", recorded_obs=generate_obs(meta["obs_spec"], 64, seed=1),
                         policy_version=2, log=_quiet)


@pytest.fixture(scope="session")
def cnn_bundle(bundles_dir) -> Path:
    """CNN+MLP on {"image": uint8[64,64,3], "state": float32[7]} with perception/actor parts; 48 recorded obs."""
    parts, meta = cnn_policy(image=64)
    return export_bundle(parts, meta, bundles_dir / "cnn.onnx", recorded_obs=generate_obs(meta["obs_spec"], 48),
                         policy_version=1, log=_quiet)


@pytest.fixture
def copy_bundle(tmp_path):
    """A private copy of a session bundle, for tests that damage it."""

    def _copy(src: Path, name: str = "copy") -> Path:
        dst = tmp_path / name
        shutil.copytree(src, dst)
        return dst

    return _copy


def first_obs(obs):
    return {k: v[0] for k, v in obs.items()} if isinstance(obs, dict) else obs[0]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def cnn_int8_bundle(bundles_dir) -> Path:
    """The CNN+MLP of `cnn_bundle` with its int8 model (static, calibrated on its 48 recorded obs)."""
    parts, meta = cnn_policy(image=64)
    return export_bundle(parts, meta, bundles_dir / "cnn_int8.onnx", recorded_obs=generate_obs(meta["obs_spec"], 48),
                         quantize=True, policy_version=1, log=_quiet)
