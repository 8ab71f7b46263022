"""A vision bundle's perception in front of a learner's actor (what the learner publishes with perception_bundle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinker_core.errors import BundleError
from tinker_deploy.bundle import load_bundle
from tinker_deploy.hot_reload import HotSwapPolicy
from tinker_deploy.runtime import OnnxPolicy
from tinker_deploy.splice import splice_perception

PRE = Path(__file__).resolve().parents[2] / "pretrained"
VISION, STATE, SORT = PRE / "arm_reach_vision", PRE / "arm_reach" / "bundle", PRE / "arm_sort" / "bundle"


def test_the_vision_perception_goes_in_front_of_another_actor(tmp_path):
    out = splice_perception(VISION, STATE, tmp_path / "v7", policy_version=7)
    b, v = load_bundle(out), load_bundle(VISION)
    # the vision bundle's actor is the state bundle's (the same SAC): the splice rebuilds it
    assert b.manifest.models["actor"].sha256 == load_bundle(STATE).manifest.models["actor"].sha256
    assert b.manifest.models["perception"].sha256 == v.manifest.models["perception"].sha256
    assert b.manifest.policy_version == 7 and b.manifest.image_terms == v.manifest.image_terms
    # the hand comes along: a fine-tuned actor keeps the camera calibration (it was lost before 2026-12-06 19:55)
    assert b.manifest.models["hand"].sha256 == v.manifest.models["hand"].sha256
    hand = OnnxPolicy.from_bundle(out, part="perception").hand()
    assert hand is not None
    obs0, _ = v.recorded()
    np.testing.assert_array_equal(hand.forward({"image": obs0["image"][0]}),
                                  OnnxPolicy.from_bundle(VISION, part="hand").forward({"image": obs0["image"][0]}))
    obs, ref = b.recorded()
    _, vref = v.recorded()
    np.testing.assert_allclose(ref["action"], vref["action"], atol=1e-4)  # torch's reference at the vision export
    # the policy node's hot reload takes it in place of the running vision bundle (same I/O, parity checked)
    policy = HotSwapPolicy(VISION)
    assert policy.request_reload(out).result(timeout=60), policy.rejected
    assert policy.version == 7
    np.testing.assert_allclose(policy.forward({k: x[0] for k, x in obs.items()}), ref["action"][0], atol=1e-5)


def test_refuses_an_actor_of_another_feature_layout(tmp_path):
    with pytest.raises(BundleError, match="cannot feed that actor"):
        splice_perception(VISION, SORT, tmp_path / "x")


def test_the_camera_sorters_perception_goes_in_front_of_a_sorter_that_normalizes_its_observation(tmp_path):
    """The camera sorter's features are the located state, which the sorter's own perception normalizes before its
    actor: the splice puts the sorter bundle's whole policy (normalization, then actor) behind it, and the result
    acts as the camera sorter does (its actor is the same imitation policy)."""
    sort_vision = PRE / "arm_sort_vision"
    out = splice_perception(sort_vision, SORT, tmp_path / "s3", policy_version=3)
    b, v = load_bundle(out), load_bundle(sort_vision)
    assert b.manifest.models["perception"].sha256 == v.manifest.models["perception"].sha256
    assert b.manifest.models["policy"].accuracy["spliced"].split(" + ")[1].startswith("policy ")
    obs, ref = b.recorded()
    _, vref = v.recorded()
    np.testing.assert_allclose(ref["action"], vref["action"], atol=1e-4)
    actor = OnnxPolicy.from_bundle(out, part="actor")  # the runtime reads it as an actor: features in
    np.testing.assert_allclose(actor.forward(ref["features"][0]), ref["action"][0], atol=1e-5)
