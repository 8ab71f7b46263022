"""`EstimateHold`: the located target averaged over an episode's frames that show it (no ROS; the shipped vision
bundle)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinker_core.errors import ConfigError
from tinker_core.loop.held_estimate import EstimateHold, holds_estimate
from tinker_core.loop.target_sight import TargetSight

VISION = Path(__file__).resolve().parents[3] / "pretrained" / "arm_reach_vision"


def _raw(hold: EstimateHold, features: np.ndarray) -> np.ndarray:
    return hold.raw(features, "target_pos")


def test_the_held_target_is_the_mean_of_the_estimates_from_frames_that_show_it():
    """Over a real episode (the arm moving at random, so some frames hide the target): the held target is the mean
    of the model's per-frame estimates over the frames `TargetSight` accepts, the first frame's own before any;
    target_minus_ee follows this cycle's measured end effector; a new episode starts over."""
    from tinker_deploy.runtime import OnnxPolicy
    from tinker_sim.arm_env import ArmEnv

    perception = OnnxPolicy.from_bundle(VISION, part="perception")
    m = perception.manifest
    hold, sight = EstimateHold(m.obs_terms, m.image_terms), TargetSight()
    env = ArmEnv(task="reach", camera=True, camera_views=2)
    rng = np.random.default_rng(0)
    try:
        seen, hidden, frames = [], 0, 0
        obs, _ = env.reset(seed=4)
        while frames < 40 and (not seen or not hidden):
            own = perception.forward(obs)
            held = hold(own, "0", obs["image"])
            frames += 1
            if sight(obs["image"]):
                seen.append(_raw(hold, own))
            else:
                hidden += 1
            if not seen:
                np.testing.assert_array_equal(held, own)  # nothing seen yet: this frame's own estimate
            else:
                np.testing.assert_allclose(_raw(hold, held), np.mean(seen, axis=0), atol=1e-5)
                ee, s = hold.raw(own, "ee_pos"), hold.slots["target_minus_ee"]
                np.testing.assert_allclose(held[s], np.clip((np.mean(seen, axis=0) - ee) * hold.scale[s], -10, 10),
                                           atol=1e-4)
                np.testing.assert_array_equal(held[:17], own[:17])  # the measured terms stay this cycle's
            obs, *_ = env.step(rng.uniform(-1, 1, 7))
        assert seen and hidden, f"the episode should show the target in some frames and hide it in others: " \
                                f"{len(seen)} seen, {hidden} hidden"
        second, _ = env.reset(seed=5)
        own = perception.forward(second)
        out = hold(own, "1", second["image"])
        assert hold.seen == int(sight(second["image"]))  # a new episode forgets the last one's frames
        np.testing.assert_allclose(out, own, atol=1e-5)  # one frame: its own estimate either way
    finally:
        env.close()


def test_a_bundle_without_image_terms_has_nothing_to_hold():
    terms = [{"name": "joint_pos", "size": 2, "offset": 0.0, "scale": 1.0}]
    with pytest.raises(ConfigError, match=r"held estimate: held needs a bundle whose model computes terms from the "
                                          r"image \(image_terms\); this one names none"):
        EstimateHold(terms, [])  # the message holds_estimate gives for estimate: held
    with pytest.raises(ConfigError, match=r"\['target_pos'\] are not observation terms"):
        EstimateHold(terms, ["target_pos"])


def test_auto_holds_where_there_is_an_estimate_and_episodes_and_held_is_refused_elsewhere():
    assert holds_estimate("auto", ["target_pos"]) is True
    assert holds_estimate("auto", []) is False  # a state bundle: nothing computed from the image
    assert holds_estimate("auto", ["target_pos"], synced=False) is False  # no episodes to hold it over
    assert holds_estimate("per_frame", ["target_pos"]) is False and holds_estimate("held", ["target_pos"]) is True
    with pytest.raises(ConfigError, match="--estimate: held needs a bundle whose model computes terms"):
        holds_estimate("held", [], where="--estimate")
    with pytest.raises(ConfigError, match="held needs the episodes"):
        holds_estimate("held", ["target_pos"], synced=False)
    with pytest.raises(ConfigError, match="expected one of"):
        holds_estimate("yes", ["target_pos"])
