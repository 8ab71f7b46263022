"""`EstimateHold`: the located target of an episode's first cycle, held (no ROS; the shipped vision bundle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinker_core.errors import ConfigError
from tinker_core.loop.held_estimate import EstimateHold

VISION = Path(__file__).resolve().parents[3] / "pretrained" / "arm_reach_vision"


def test_the_held_features_are_the_models_on_the_first_frame_with_this_cycles_state():
    """Holding = the locator's estimate from the episode's first image, the rest from this cycle's state: exactly
    what the model gives for (first image, this state)."""
    from tinker_deploy.runtime import OnnxPolicy
    from tinker_sim.arm_env import ArmEnv

    perception = OnnxPolicy.from_bundle(VISION, part="perception")
    m = perception.manifest
    hold = EstimateHold(m.obs_terms, m.image_terms)
    env = ArmEnv(task="reach", camera=True, camera_views=2)
    try:
        first, _ = env.reset(seed=4)
        assert np.array_equal(hold(perception.forward(first), "0"), perception.forward(first))
        rng = np.random.default_rng(0)
        for _ in range(3):
            obs, *_ = env.step(rng.uniform(-1, 1, 7))
            held = hold(perception.forward(obs), "0")
            want = perception.forward({"image": first["image"], "state": obs["state"]})
            np.testing.assert_allclose(held, want, atol=2e-5)
            assert not np.allclose(perception.forward(obs), want, atol=2e-5)  # the arm moved: per frame differs
        second, _ = env.reset(seed=5)
        np.testing.assert_array_equal(hold(perception.forward(second), "1"), perception.forward(second))  # new episode
    finally:
        env.close()


def test_a_bundle_without_image_terms_has_nothing_to_hold():
    terms = [{"name": "joint_pos", "size": 2, "offset": 0.0, "scale": 1.0}]
    with pytest.raises(ConfigError, match="no image_terms"):
        EstimateHold(terms, [])
    with pytest.raises(ConfigError, match=r"\['target_pos'\] are not observation terms"):
        EstimateHold(terms, ["target_pos"])
