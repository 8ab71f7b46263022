"""``tinker prior``: an RL prior from the shipped BC sorter at a tiny budget (what it writes, and that the SAC acts as
the BC policy), and what it refuses before writing anything."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
BC = REPO / "pretrained" / "arm_sort" / "checkpoint"


def tinker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinker_cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_a_prior_acts_as_its_bc_policy_and_holds_the_demonstrations(tmp_path):
    out = tmp_path / "prior"
    p = tinker("prior", str(BC), "--out", str(out), "--demo-episodes", "2", "--critic-steps", "5")
    assert p.returncode == 0, p.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["demo_episodes"] == 2 and summary["max_action_difference_vs_bc"] <= 1e-4
    import tinker_sim  # noqa: F401
    from tinker_core.algos import load_algorithm
    from tinker_core.replay import load_replay

    sac, bc = load_algorithm(out / "checkpoint", device="cpu"), load_algorithm(BC, device="cpu")
    demos = load_replay(out / "demonstrations")
    assert len(demos) == summary["demo_transitions"] > 50
    obs = demos.storage.get(np.arange(len(demos)), with_info=False).obs
    np.testing.assert_allclose(sac.predict(obs), bc.predict(obs), atol=1e-5)
    assert sac.config.td3bc_alpha == 0.005


def test_what_cannot_make_a_prior_is_refused_before_anything_is_written(tmp_path):
    p = tinker("prior", str(REPO / "pretrained" / "arm_reach" / "checkpoint"), "--out", str(tmp_path / "a"))
    assert p.returncode == 2 and "a SAC checkpoint; tinker prior starts from a BC one" in p.stderr
    p = tinker("prior", str(BC), "--out", str(tmp_path / "b"), "--demo-episodes", "0")
    assert p.returncode == 2 and "--demo-episodes: expected >= 1, got 0" in p.stderr
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
