"""The policy node's core (`tinker.bundle_io.PolicyBundle`), without ROS: what it reports after a hot reload."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def test_a_reloaded_bundle_is_reported_by_its_version_even_with_the_same_actor(tmp_path):
    """A bundle whose actor is byte-identical to the running one's but whose version differs (the learner once
    published the same weights again as the next version) is running once it swaps in: the node reports its version,
    so that whoever waits for that version (the demo, a person reading /diagnostics) sees it."""
    from tinker.bundle_io import PolicyBundle

    src = REPO / "pretrained" / "arm_sort_vision"
    again = tmp_path / "v7"
    shutil.copytree(src, again)
    manifest = json.loads((again / "manifest.json").read_text())
    manifest["policy_version"] = 7
    (again / "manifest.json").write_text(json.dumps(manifest))
    swaps: list[str] = []
    core = PolicyBundle(str(src), None, 0.05, on_swap=swaps.append)
    before = core.version
    assert before != 7 and core.reload(str(again)).result(60)
    core.cycle.on_state(1, np.zeros(len(core.runner.joint_names)))
    core.cycle.on_features(1, np.zeros(core.runner.feature_size, np.float32), 1, "0", core.runner.perception_sha256)
    assert core.version == 7 and core.reloads == 1 and swaps == [f"now running bundle v7 ({core.actor_sha256[:12]})"]


def test_a_reacher_holds_at_its_goal_with_its_tasks_success_distance_and_nothing_else_does():
    from tinker.bundle_io import REACH_SUCCESS_DISTANCE, goal_hold_for, top_manifest
    from tinker_core.errors import ConfigError
    from tinker_sim.tasks.reach import SUCCESS_DISTANCE

    assert REACH_SUCCESS_DISTANCE == SUCCESS_DISTANCE  # one fact, said twice: the policy node runs without tinker_sim
    for reacher in ("pretrained/arm_reach/bundle", "pretrained/arm_reach_vision"):
        hold = goal_hold_for(top_manifest(REPO / reacher), "hold")
        assert hold is not None and hold.success_distance == SUCCESS_DISTANCE and hold.size == 30, reacher
        assert goal_hold_for(top_manifest(REPO / reacher), "act") is None
    assert goal_hold_for(top_manifest(REPO / "pretrained/arm_sort/bundle"), "hold") is None  # a sorter has no goal
    with pytest.raises(ConfigError, match=r"policy.at_goal: expected one of \['hold', 'act'\], got 'stay'"):
        goal_hold_for(top_manifest(REPO / "pretrained/arm_reach/bundle"), "stay")


def test_a_reloaded_reacher_gets_a_hold_of_its_own(tmp_path):
    """The hold reads the running bundle's terms: a swapped-in bundle gets a fresh one, built from its manifest."""
    from tinker.bundle_io import PolicyBundle

    src = REPO / "pretrained" / "arm_reach" / "bundle"
    again = tmp_path / "v9"
    shutil.copytree(src, again)
    manifest = json.loads((again / "manifest.json").read_text())
    manifest["policy_version"] = 9
    (again / "manifest.json").write_text(json.dumps(manifest))
    core = PolicyBundle(str(src), None, 0.05)
    first = core.cycle.goal_hold
    assert first is not None and core.reload(str(again)).result(60)
    core.cycle.on_state(1, np.zeros(len(core.runner.joint_names)))
    core.cycle.on_features(1, np.zeros(core.runner.feature_size, np.float32), 1, "0", core.runner.perception_sha256)
    assert core.version == 9 and core.cycle.goal_hold is not None and core.cycle.goal_hold is not first
