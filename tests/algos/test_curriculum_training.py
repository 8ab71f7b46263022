"""The curriculum in training: `tinker train` with a 'curriculum' section, and IMPALA's actors taking
the levels with their weights. The knob is ArmReach's real ``success_distance`` (PyBullet): at 1 m
every episode succeeds on its first step, at 2 cm a random policy almost never does, so the levels
advance on measured success and then stop."""

from __future__ import annotations

import json

import numpy as np

import tinker_sim  # noqa: F401  (registers tinker/ArmReach-v0)
from tinker_core.algos import IMPALA, IMPALAConfig
from tinker_cli import main
from tinker_core.curriculum import Curriculum, CurriculumConfig

LEVELS = [1.0, 0.5, 0.02]


def test_tinker_train_runs_the_curriculum_section(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("algo: ppo\nenv: tinker/ArmReach-v0\ntotal_timesteps: 256\n"
                   "ppo:\n  n_steps: 64\n  batch_size: 32\n  n_epochs: 1\n  net_arch: [16, 16]\n  log_interval: 64\n"
                   "  compiled_update: false\n"
                   f"curriculum:\n  param: success_distance\n  levels: {LEVELS}\n  promote_at: 0.5\n  window: 3\n")
    out = tmp_path / "run"
    assert main(["train", "--config", str(cfg), "--out", str(out), "--no-progress"]) == 0
    cur = json.loads((out / "curriculum.json").read_text())
    assert [h["to"] for h in cur["history"]][:2] == [0.5, 0.02]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["curriculum"]["value"] == 0.02


def test_impala_actors_take_the_curriculum_levels():
    algo = IMPALA("tinker/ArmReach-v0", IMPALAConfig(num_actors=2, unroll_length=16, batch_trajectories=2,
                                                     net_arch=[16, 16], seed=0))
    cur = Curriculum(CurriculumConfig(param="success_distance", levels=LEVELS, promote_at=0.5, window=3))
    cur.bind(algo)
    lengths: list[int] = []

    def track(al, info):
        cur(al, info)
        lengths.extend(e.length for e in info["episodes"])

    algo.learn(1500, callback=track, progress=False)
    assert [h["to"] for h in cur.history][:2] == [0.5, 0.02]
    assert cur.value == 0.02
    assert all(s["env_params"] == {"success_distance": 0.02} for s in algo.actor_stats)
    # the actors' envs really changed: 1-step episodes at 1 m, longer ones at 2 cm
    assert lengths[0] == 1 and np.mean(lengths[-3:]) > 5
