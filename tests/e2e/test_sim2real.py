"""``tinker benchmark sim2real`` at a tiny budget: every step of the protocol runs and the table is the run's own."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_sim2real_protocol_writes_table_json_and_plot(tmp_path):
    out = tmp_path / "s2r"
    env = dict(os.environ, ROS_DOMAIN_ID=str(random.randint(1, 200)), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    p = subprocess.run([sys.executable, "-m", "tinker_cli", "benchmark", "sim2real", "--variants", "laggy",
                        "--finetune-episodes", "3", "--eval-episodes", "3", "--out", str(out),
                        # a learner that trains from the first live transition on (the default waits for 256; with
                        # 16 of the ~20 a short episode pair gives, a loaded CI machine paused it before any update)
                        # and whose gate passes any candidate: a row whose gate refused every one has no "after"
                        "--learner-set", "warmup=1", "batch_size=16", "gate_episodes=2", "gate_max_estops=2"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=580)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    data = json.loads((out / "sim2real.json").read_text())
    (row,) = data["rows"]
    assert row["variant"] == "laggy"
    for key in ("zero_shot", "fine_tuned"):
        assert row[key]["episodes"] == 3
        assert 0.0 <= row[key]["ci_low"] <= row[key]["success_rate"] <= row[key]["ci_high"] <= 1.0
    assert row["ros_loop"]["finetune"]["episodes"] >= 3
    assert row["learner_updates"] > 0 and row["live_transitions"] > 0  # fine-tuned, not the pretrained policy
    assert "| laggy |" in (out / "sim2real.md").read_text()
    assert (out / "sim2real.png").stat().st_size > 5_000


@pytest.mark.timeout(600)
def test_the_sorter_fine_tunes_from_its_rl_prior_with_the_demonstrations(tmp_path):
    """The sorter's row through the whole protocol: its RL prior fine-tuned in the ROS loop on the variant where it
    falls apart, the expert's demonstrations in the learner's replay, objects counted before and after; the latency
    measured from the zero-shot episodes (``--latency-compensation auto``) and compensated in the loop and after."""
    out = tmp_path / "s2r"
    env = dict(os.environ, ROS_DOMAIN_ID=str(random.randint(1, 200)), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    p = subprocess.run([sys.executable, "-m", "tinker_cli", "benchmark", "sim2real", "--env", "tinker/ArmSort-v0",
                        "--variants", "far_latency_sort", "--finetune-episodes", "2", "--eval-episodes", "2",
                        "--out", str(out), "--latency-compensation", "auto",
                        "--learner-set", "warmup=1", "batch_size=16", "gate_episodes=1",
                        "gate_max_estops=1"],  # the gate passes any candidate: this row always has an "after"
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=580)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (row,) = json.loads((out / "sim2real.json").read_text())["rows"]
    assert row["variant"] == "far_latency_sort"
    for key in ("zero_shot", "fine_tuned"):
        assert row[key]["episodes"] == 2 and row[key]["objects_total"] == 4 and 0 <= row[key]["objects_sorted"] <= 4
    assert row["learner_updates"] > 0 and row["live_transitions"] > 0
    assert row["demonstrations"] > 5000  # the shipped prior's (9,052)
    assert row["ros_loop"]["finetune"]["episodes"] >= 2
    # the ROS loop's phases count the objects too, from the robot's task topic (two objects an episode)
    loop = row["ros_loop"]["finetune"]
    assert loop["objects_total"] == 2 * loop["episodes"] and 0 <= loop["objects_sorted"] <= loop["objects_total"], loop
    report = (out / "finetune_far_latency_sort" / "run0" / "report.md").read_text()
    assert "objects sorted" in report
    # measured from the first zero-shot episode, then compensated; the safety node measured it in the loop too
    assert row["zero_shot"]["command_latency"]["periods"] == 4 and row["zero_shot"]["latency_compensation"] == 0
    assert row["latency_compensation"] == row["fine_tuned"]["latency_compensation"] == 4
    assert "loop and after compensate 4 periods" in (out / "sim2real.md").read_text()
    assert "command latency measured by the safety node" in report and "compensated: 4" in report
