"""The policy node's core (`tinker.bundle_io.PolicyBundle`), without ROS: what it reports after a hot reload."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

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
