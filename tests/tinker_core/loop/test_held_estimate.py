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


class _Always:
    """A `TargetSight` stand-in that says every frame shows the target: this test is about the arithmetic of
    the camera offset, not about sight (tested above on rendered frames)."""

    def __call__(self, image: np.ndarray) -> bool:
        return True


def _features(hold: EstimateHold, ee: np.ndarray, target_seen: np.ndarray) -> np.ndarray:
    """Features in the state's layout: ``ee`` measured, ``target_seen`` where the located target is."""
    f = np.zeros(hold.size, np.float32)
    for name, raw in (("ee_pos", ee), ("target_pos", target_seen), ("target_minus_ee", target_seen - ee)):
        s = hold.slots[name]
        f[s] = (raw - hold.offset[s]) * hold.scale[s]
    return f


def test_a_hand_estimate_measures_a_moved_camera_and_corrects_the_held_target():
    """A camera moved by ``d`` sees the target and the hand both displaced by ``d``; the hand's measured position
    (forward kinematics) minus the hand seen gives ``d`` back, and the held target is corrected by its mean over
    the episode's frames, before and after the first frame that shows the target; a new episode starts over."""
    from tinker_deploy.bundle import load_bundle

    m = load_bundle(VISION).manifest
    hold = EstimateHold(m.obs_terms, m.image_terms, sight=_Always())
    rng = np.random.default_rng(3)
    target, d = np.array([0.55, -0.1, 0.3]), np.array([0.06, -0.05, 0.02])
    errors = []
    for k in range(12):
        ee = np.array([0.45, 0.0, 0.4]) + rng.uniform(-0.1, 0.1, 3)
        noise = rng.normal(0, 0.01, 3)  # the locator's own error on this frame
        out = hold(_features(hold, ee, target + d + noise), "0", np.zeros((1, 1, 3), np.uint8),
                   hand=ee + d + rng.normal(0, 0.01, 3))
        errors.append(np.linalg.norm(hold.raw(out, "target_pos") - target))
        s = hold.slots["target_minus_ee"]
        np.testing.assert_allclose(out[s], (hold.raw(out, "target_pos") - ee) * hold.scale[s], atol=1e-4)
    assert hold.hands == 12
    np.testing.assert_allclose(hold.camera_offset, -d, atol=0.015)
    assert errors[-1] < 0.015, f"corrected target still {errors[-1]:.3f} m off (uncorrected: {np.linalg.norm(d):.3f})"
    # without the hand, the same frames leave the camera's error in the estimate
    plain = EstimateHold(m.obs_terms, m.image_terms, sight=_Always())
    out = plain(_features(plain, np.array([0.45, 0.0, 0.4]), target + d), "0", np.zeros((1, 1, 3), np.uint8))
    assert np.linalg.norm(plain.raw(out, "target_pos") - target) > 0.07
    hold(_features(hold, np.array([0.45, 0.0, 0.4]), target), "1", np.zeros((1, 1, 3), np.uint8))
    assert hold.camera_offset is None and hold.hands == 0  # a new episode measures the camera again


def test_an_offset_within_the_deadband_is_measured_but_not_corrected():
    """With the camera in place the measured offset is the hand estimate's own error: under
    `CALIBRATION_DEADBAND_M` the held target stays the locator's own."""
    from tinker_core.loop.held_estimate import CALIBRATION_DEADBAND_M
    from tinker_deploy.bundle import load_bundle

    m = load_bundle(VISION).manifest
    hold = EstimateHold(m.obs_terms, m.image_terms, sight=_Always())
    ee, seen = np.array([0.45, 0.0, 0.4]), np.array([0.55, -0.1, 0.3])
    small = np.array([0.5, 0.5, 0.0]) * CALIBRATION_DEADBAND_M  # 0.71 of the deadband
    out = hold(_features(hold, ee, seen), "0", np.zeros((1, 1, 3), np.uint8), hand=ee - small)
    np.testing.assert_allclose(hold.camera_offset, small, atol=1e-6)
    assert hold.correction is None
    np.testing.assert_allclose(hold.raw(out, "target_pos"), seen, atol=1e-4)
    with pytest.raises(ConfigError, match="deadband_m"):
        EstimateHold(m.obs_terms, m.image_terms, deadband_m=-0.01)


def test_a_hand_estimate_that_is_not_a_position_is_refused_by_name():
    from tinker_core.errors import ValidationError
    from tinker_deploy.bundle import load_bundle

    m = load_bundle(VISION).manifest
    hold = EstimateHold(m.obs_terms, m.image_terms, sight=_Always())
    f = _features(hold, np.array([0.45, 0.0, 0.4]), np.array([0.5, 0.0, 0.3]))
    with pytest.raises(ValidationError, match="held_estimate.hand"):
        hold(f, "0", np.zeros((1, 1, 3), np.uint8), hand=np.array([np.nan, 0.0, 0.0]))
    no_ee = [t for t in m.obs_terms if t.name not in ("ee_pos", "image")]
    with pytest.raises(ConfigError, match="no ee_pos term"):
        EstimateHold(no_ee, m.image_terms, calibrate=True)  # refused when loaded, not in the loop
