"""The Fabric back-end: two real CPU processes (ddp, gloo) against one process on the whole batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinker_core.errors import ConfigError
from tinker_core.learner.config import LearnerConfig
from tinker_core.learner.fabric_backend import run

ROOT = Path(__file__).resolve().parents[2]


def _has_lightning() -> bool:
    try:
        import lightning.fabric  # noqa: F401
    except ImportError:
        return False
    return True


def _run(out: Path, devices: int, steps: int = 3) -> None:
    """The module's run in ``devices`` processes, started as a user would (Fabric starts rank 1 again)."""
    cmd = [sys.executable, "-m", "tinker_core.learner.fabric_backend", "--devices", str(devices), "--steps", str(steps),
           "--batch", "64", "--hidden", "64", "--deterministic", "--out", str(out)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]


@pytest.mark.skipif(not _has_lightning(), reason="lightning is not installed (make setup installs it)")
def test_two_processes_match_one_process_on_the_whole_batch(tmp_path: Path) -> None:
    _run(tmp_path / "dp", devices=2)
    run(devices=1, steps=3, batch=64, hidden=64, seed=0, deterministic=True, path="autograd", out=tmp_path / "one")
    r0, r1 = np.load(tmp_path / "dp" / "rank0.npy"), np.load(tmp_path / "dp" / "rank1.npy")
    one = np.load(tmp_path / "one" / "rank0.npy")
    start = np.load(tmp_path / "dp" / "rank1_start.npy")  # rank 1 after rank 0's state was broadcast
    np.testing.assert_array_equal(start, np.load(tmp_path / "one" / "rank0_start.npy"))
    assert np.abs(one - start).max() > 1e-3  # the steps moved the state far beyond the tolerance below
    assert r0.shape == r1.shape == one.shape == start.shape
    np.testing.assert_array_equal(r0, r1)  # the all-reduced steps keep the ranks identical, bit for bit
    np.testing.assert_allclose(r0, one, rtol=0, atol=1e-5)  # data-parallel step == step on the concatenated batch
    res = json.loads((tmp_path / "dp" / "result.json").read_text())
    assert res["path"] == "autograd" and res["shard"] == 32 and res["all_reduces_per_update"] == 2.0


def test_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"LearnerConfig\.backend: expected 'local' or 'fabric', got 'ray'"):
        LearnerConfig(backend="ray")
    with pytest.raises(ConfigError, match=r"LearnerConfig\.devices: 2 processes need backend: fabric"):
        LearnerConfig(devices=2)
    with pytest.raises(ConfigError, match=r"LearnerConfig\.devices: expected an integer >= 1, got 0"):
        LearnerConfig(backend="fabric", devices=0)
    if _has_lightning():
        with pytest.raises(ConfigError, match=r"LearnerConfig\.batch_size: expected a multiple of devices=3"):
            LearnerConfig(backend="fabric", devices=3, batch_size=64)
        cfg = LearnerConfig(backend="fabric", devices=2)
        from tinker_core.learner.server import Learner

        with pytest.raises(ConfigError, match=r"LearnerConfig\.backend: the learner server runs backend: local only"):
            Learner(cfg, algo_factory=lambda: None)  # measured slower here: the server does not shard its replay
    else:
        with pytest.raises(ConfigError, match=r"LearnerConfig\.backend: 'fabric' needs Lightning"):
            LearnerConfig(backend="fabric", devices=2)
