"""The main job at a CI-sized budget: ``tinker demo`` end to end, with every stage real.

Real processes throughout: the learner (fine-tuning the shipped pretrained checkpoint), the five ROS 2
nodes over Fast DDS, the ZeroMQ transport between them, onnxruntime in the nodes. The assertions
check that each stage ran: transitions reached the learner, the learner trained and published a
gated bundle, the policy node hot-reloaded it, and the report's numbers are the run's own.
"""

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
def test_demo_runs_every_stage_for_real(tmp_path):
    out = tmp_path / "demo"
    env = dict(os.environ, ROS_DOMAIN_ID=str(random.randint(1, 200)), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
    cmd = [sys.executable, "-m", "tinker_cli", "demo", "--out", str(out),
           "--episodes-before", "2", "--finetune-episodes", "8", "--episodes-after", "2",
           "--learner-set", "warmup=64", "batch_size=64", "publish_every=20", "gate_episodes=2",
           "gate_min_success=0.0"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=580)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())

    # experience reached the learner, and the learner trained on it
    assert int(report["bridge"]["sent"]) > 0
    assert report["learner"]["ingested_total"] >= int(report["bridge"]["sent"]) * 0.9
    assert report["learner"]["updates"] > 0
    # a gated bundle was published and the policy node hot-reloaded it
    assert report["learner"]["version"] >= 1
    assert report["policy_reloads"] >= 1
    assert max(report["after"]["policy_versions"]) >= 1, report["after"]
    assert (out / "bundles" / f"v{report['learner']['version']:06d}" / "manifest.json").is_file()
    # the report is the run's own: episode rows add up, latency comes from the nodes' traces
    eps = report["episodes"]
    for phase in ("before", "finetune", "after"):
        rows = [e for e in eps if e["phase"] == phase]
        assert report[phase]["episodes"] == len(rows)
        assert report[phase]["successes"] == sum(e["success"] for e in rows)
    assert report["before"]["episodes"] >= 2 and report["after"]["episodes"] >= 2
    # how each version did on the robot: every episode counted once, under the version that ran its end
    assert sum(v["episodes"] for v in report["by_version"]) == len(eps)
    assert {v["version"] for v in report["by_version"]} == {e["policy_version"] for e in eps}
    assert report["latency"]["cycles"] > 0 and report["latency"]["e2e_p50_ms"] > 0
    # the robot's own count of unsafe states (from the physics, not from the safety node) is reported, and zero
    assert set(report["unsafe_states"]) == {"joint_position", "joint_velocity", "contact"}
    assert sum(report["unsafe_states"].values()) == 0, report["unsafe_states"]
    assert (out / "demo.png").stat().st_size > 10_000
    assert "before fine-tuning" in (out / "report.md").read_text()
    assert "on the robot, by policy version" in (out / "report.md").read_text()
