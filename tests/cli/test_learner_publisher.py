"""The learner's publisher with ``perception_bundle``: each bundle keeps the vision locator in front of the new actor."""

from __future__ import annotations

from pathlib import Path

import numpy as np

PRE = Path(__file__).resolve().parents[2] / "pretrained"


def test_published_bundles_keep_the_vision_perception(tmp_path):
    import tinker_sim  # noqa: F401  (registers the tinker/ ids the export records obs from)
    from tinker_cli.learner import bundle_publisher
    from tinker_core.algos import load_algorithm
    from tinker_deploy.bundle import load_bundle

    algo = load_algorithm(PRE / "arm_reach" / "checkpoint", device="cpu")
    vision = load_bundle(PRE / "arm_reach_vision").manifest
    with_locator = load_bundle(bundle_publisher(str(tmp_path), algo, 3, perception_bundle=str(PRE / "arm_reach_vision")))
    own = load_bundle(bundle_publisher(str(tmp_path / "own"), algo, 3))
    m = with_locator.manifest
    assert m.models["perception"].sha256 == vision.models["perception"].sha256  # the locator, unchanged
    assert m.models["actor"].sha256 == own.manifest.models["actor"].sha256  # the learner's actor
    assert m.policy_version == 3 and m.image_terms == ["target_pos", "target_minus_ee"] and m.obs_spec == vision.obs_spec
    assert own.manifest.image_terms == [] and own.manifest.models["perception"].sha256 != m.models["perception"].sha256
    obs, ref = with_locator.recorded()
    assert set(obs) == {"image", "state"} and np.all(np.isfinite(ref["action"]))
