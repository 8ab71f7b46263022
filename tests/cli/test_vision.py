"""The shipped camera-based ArmReach bundle (pretrained/arm_reach_vision) and ``tinker vision``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "pretrained" / "arm_reach_vision"


def tinker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tinker_cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def perception():
    from tinker_deploy.runtime import OnnxPolicy

    return OnnxPolicy.from_bundle(BUNDLE, part="perception")


def _estimate(perception, env, obs) -> np.ndarray:
    """The locator's target estimate (base frame, m), read back from the features' target slots."""
    u = env.unwrapped
    i = 0
    for t in u.obs_terms:
        if t["name"] == "target_pos":
            break
        i += t["size"]
    f = perception(obs)[i:i + 3]
    return f / np.asarray(t["scale"]) + np.asarray(t["offset"])


def _env(**kw):
    import tinker_sim

    return tinker_sim.make("tinker/ArmReach-v0", camera=True, image_size=64, camera_views=2, **kw)


def _errors_in_sight(perception, shift: float, seeds=range(2000, 2020)) -> tuple[np.ndarray, np.ndarray]:
    """Over the reset frames of ``seeds`` that show the target in every view (the frames the held estimate uses):
    the target estimate's error (true minus estimate) and the hand's (the end effector minus the hand seen), m,
    with the camera moved by ``shift``."""
    from tinker_core.loop.target_sight import TargetSight
    from tinker_sim.dynamics import DynamicsParams

    sight, hand = TargetSight(), perception.hand()
    env = _env(dynamics=DynamicsParams(camera_shift_m=shift))
    target_errors, hand_errors = [], []
    try:
        for seed in seeds:
            obs, _ = env.reset(seed=seed)
            if sight(obs["image"]):
                u = env.unwrapped
                target_errors.append(u.task.target - _estimate(perception, env, obs))
                hand_errors.append(u.ee_position - np.asarray(hand(obs)).reshape(-1))
    finally:
        env.close()
    assert len(target_errors) >= 10, "too few frames show the target to measure anything"
    return np.array(target_errors), np.array(hand_errors)


def test_shipped_locator_finds_the_target_and_the_hand_within_a_few_cm_on_nominal_images(perception):
    from tinker_core.loop.held_estimate import CALIBRATION_DEADBAND_M

    target_errors, hand_errors = (np.linalg.norm(e, axis=1) for e in _errors_in_sight(perception, 0.0))
    # measured 2026-12-06, the triangulating locator: 18 frames in sight, target mean 1.17 cm, max 2.2 cm (the
    # learned-map locator before it: 1.74, 3.0). A frame that hides the target is the held estimate's business
    assert target_errors.mean() < 0.02 and target_errors.max() < 0.04, target_errors
    # the hand: median 1.0 cm. With the camera in place its error is all a calibration measures: mostly under the
    # deadband, which the episode's mean then keeps from correcting a camera that did not move
    assert np.median(hand_errors) < CALIBRATION_DEADBAND_M, hand_errors


def test_a_moved_camera_misplaces_the_target_and_the_hand_by_the_same_vector(perception):
    """What lets the loop calibrate a moved camera on the hand it sees (`EstimateHold`): through the camera's
    geometry, the hand's error measures the target's."""
    target_errors, hand_errors = _errors_in_sight(perception, 0.08)
    apart = np.linalg.norm(target_errors - hand_errors, axis=1)
    # measured 2026-12-06: the target misplaced by 7.9 cm on average, the two errors 1.59 cm apart (the learned-map
    # locator before it: 5.4 cm and 3.91 cm apart, so a correction by the hand missed by about as much as it fixed)
    assert np.linalg.norm(target_errors, axis=1).mean() > 0.06
    assert apart.mean() < 0.025, apart


def test_a_shifted_camera_moves_the_image_and_the_estimate(perception):
    from tinker_sim.dynamics import DynamicsParams

    a, b = _env(), _env(dynamics=DynamicsParams(camera_shift_m=0.08))
    try:
        oa, _ = a.reset(seed=7)
        ob, _ = b.reset(seed=7)
        assert np.array_equal(a.unwrapped.task.target, b.unwrapped.task.target)
        assert np.abs(oa["image"].astype(int) - ob["image"].astype(int)).mean() > 1.0
        shift = np.linalg.norm(_estimate(perception, a, oa) - _estimate(perception, b, ob))
    finally:
        a.close()
        b.close()
    assert shift > 0.01, f"estimate moved only {shift:.4f} m"


def test_the_estimate_does_not_read_the_target_from_the_state(perception):
    env = _env()
    try:
        obs, _ = env.reset(seed=11)
    finally:
        env.close()
    other = dict(obs, state=obs["state"].copy())
    other["state"][17:23] = 3.0  # the state policy's target terms
    assert np.array_equal(perception(obs), perception(other))


def test_vision_bundle_runs_in_tinker_eval_with_its_estimate_held_by_default():
    p = tinker("eval", str(BUNDLE), "--episodes", "2", "--seed", "1000", "--json", "--plot", "")
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout.strip().splitlines()[-1])
    assert d["hold_estimate"] is True and d["episodes"] == 2 and d["successes"] >= 1
    assert d["camera_calibrated"] is True


def test_tinker_eval_estimates_per_frame_when_asked_and_refuses_a_hold_with_nothing_to_hold():
    p = tinker("eval", str(BUNDLE), "--episodes", "2", "--seed", "1000", "--estimate", "per_frame", "--json",
               "--plot", "")
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout.strip().splitlines()[-1])
    assert d["hold_estimate"] is False and d["episodes"] == 2 and d["successes"] >= 1
    assert d["camera_calibrated"] is False and d["calibration_deadband_m"] is None  # per frame: nothing calibrates
    state = BUNDLE.parent / "arm_reach" / "bundle"
    p = tinker("eval", str(state), "--episodes", "1", "--hold-estimate", "--plot", "")
    assert p.returncode != 0 and "--estimate: held needs a bundle whose model computes terms from the image" in p.stderr


def test_vision_help_teaches_the_steps():
    p = tinker("vision", "--help")
    assert p.returncode == 0
    for word in ("data", "train", "export", "bench", "soft-argmax", "tinker eval pretrained/arm_reach_vision"):
        assert word in p.stdout


def test_vision_train_learns_the_hand_where_the_data_has_it_and_says_how_to_go_without(tmp_path):
    """A few synthetic labelled images (not rendered: this checks the training's plumbing, not its accuracy): the
    default trains a triangulating hand locator (6 outputs, the hands' range in its config), --head mlp the learned
    map; data without hands is refused with the way out, which --no-hand takes."""
    import torch

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (8, 64, 128, 3), dtype=np.uint8)
    targets = rng.uniform([0.35, -0.3, 0.2], [0.7, 0.3, 0.55], (8, 3)).astype(np.float32)
    hands = rng.uniform([0.3, -0.3, 0.2], [0.6, 0.3, 0.6], (8, 3)).astype(np.float32)
    np.savez(tmp_path / "with.npz", images=images, targets=targets, hands=hands)
    np.savez(tmp_path / "without.npz", images=images, targets=targets)
    common = ("--epochs", "1", "--batch", "4", "--threads", "1")
    p = tinker("vision", "train", "--data", str(tmp_path / "with.npz"), "--out", str(tmp_path / "hand.pt"), *common)
    assert p.returncode == 0, p.stderr
    cfg = torch.load(tmp_path / "hand.pt", weights_only=False)["config"]
    # triangulating by default: one heatmap per view for the target and one for the hand, the simulated camera's
    # nominal model (2 views, 3x4 each)
    assert cfg["hand"] is True and cfg["keypoints"] == 2 and len(cfg["center"]) == 6
    assert np.array(cfg["projections"]).shape == (2, 3, 4) and cfg["convs"] == 3
    assert np.all(np.array(cfg["half"][3:]) >= (hands.max(0) - hands.min(0)) / 2)  # the hands' range is covered
    assert "hand mean" in p.stdout + p.stderr
    p = tinker("vision", "train", "--data", str(tmp_path / "with.npz"), "--out", str(tmp_path / "mlp.pt"),
               "--head", "mlp", *common)
    assert p.returncode == 0, p.stderr
    cfg = torch.load(tmp_path / "mlp.pt", weights_only=False)["config"]
    assert cfg["keypoints"] == 8 and cfg["projections"] is None and cfg["convs"] == 1
    p = tinker("vision", "train", "--data", str(tmp_path / "with.npz"), "--out", str(tmp_path / "k.pt"),
               "--keypoints", "4", *common)
    assert p.returncode != 0 and "--keypoints goes with --head mlp" in p.stderr
    p = tinker("vision", "train", "--data", str(tmp_path / "with.npz"), "--out", str(tmp_path / "k.pt"),
               "--head", "mlp", "--keypoints", "0", *common)
    assert p.returncode != 0 and "keypoints" in p.stderr and ">= 1" in p.stderr  # refused, not the default
    p = tinker("vision", "train", "--data", str(tmp_path / "with.npz"), "--out", str(tmp_path / "k.pt"),
               "--convs", "0", *common)
    assert p.returncode != 0 and "LocatorConfig.convs: expected >= 1, got 0" in p.stderr
    p = tinker("vision", "train", "--data", str(tmp_path / "without.npz"), "--out", str(tmp_path / "x.pt"), *common)
    assert p.returncode != 0 and "no end-effector labels" in p.stderr and "--no-hand" in p.stderr
    p = tinker("vision", "train", "--data", str(tmp_path / "without.npz"), "--out", str(tmp_path / "t.pt"),
               "--no-hand", *common)
    assert p.returncode == 0, p.stderr
    cfg = torch.load(tmp_path / "t.pt", weights_only=False)["config"]
    assert cfg["hand"] is False and cfg["keypoints"] == 1 and len(cfg["center"]) == 3


def test_tinker_eval_takes_the_calibration_deadband_and_refuses_one_out_of_range():
    """``--calibration-deadband`` is the perception node's ``calibration_deadband``: beyond the 8 cm camera move the
    hand measures, it turns the correction off, and the moved camera then costs episodes."""
    moved = ("--dynamics", str(REPO / "sim" / "config" / "dynamics" / "shifted_camera.yaml"))
    common = ("eval", str(BUNDLE), "--episodes", "10", "--seed", "1000", *moved, "--json", "--plot", "")
    runs = {}
    for deadband in ("0.02", "0.3"):
        p = tinker(*common, "--calibration-deadband", deadband)
        assert p.returncode == 0, p.stderr[-2000:]
        runs[deadband] = json.loads(p.stdout.strip().splitlines()[-1])
    assert runs["0.02"]["calibration_deadband_m"] == 0.02 and runs["0.3"]["calibration_deadband_m"] == 0.3
    # measured 2026-12-06: 10/10 corrected, 1/10 not (the triangulating locator alone is off by the whole move)
    assert runs["0.02"]["successes"] >= 9 and runs["0.3"]["successes"] <= 5, runs
    p = tinker("eval", str(BUNDLE), "--episodes", "1", "--calibration-deadband", "-0.01")
    assert p.returncode != 0 and "--calibration-deadband: expected 0.0..0.5 m" in p.stderr
