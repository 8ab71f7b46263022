"""The two-view camera: shape, its projections, and that a camera shift moves the picture without re-aiming it."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_sim.dynamics import DynamicsParams
from tinker_core.errors import ConfigError


def test_two_views_side_by_side(make_env):
    env = make_env(camera=True, image_size=32, camera_views=2)
    obs, _ = env.reset(seed=0)
    assert obs["image"].shape == (32, 64, 3) == env.observation_space["image"].shape
    left, right = obs["image"][:, :32], obs["image"][:, 32:]
    assert not np.array_equal(left, right)  # two different viewpoints


def test_projections_put_the_target_where_the_camera_draws_it(make_env):
    """`Camera.projections` (the model a triangulating locator is given) agrees with the rendered image: the
    green marker's centre (its greenest pixels' mean) is within a pixel of where the true target projects."""
    env = make_env(camera=True, image_size=64, camera_views=2)
    u = env.unwrapped
    projections = np.asarray(u.camera.projections(u.robot.base_position))
    assert projections.shape == (2, 3, 4)
    checked = 0
    for seed in (0, 1, 3):
        obs, _ = env.reset(seed=seed)
        img = obs["image"].astype(float)
        for v in range(2):
            q = projections[v] @ np.r_[u.task.target, 1.0]
            x, y = q[0] / q[2], q[1] / q[2]
            col, row = (x + 1) / 2 * 64 - 0.5, (1 - y) / 2 * 64 - 0.5  # -1..1 are the image's edges; y up
            view = img[:, v * 64:(v + 1) * 64]
            green = view[..., 1] - 0.5 * (view[..., 0] + view[..., 2])
            rows, cols = np.nonzero(green > 0.5 * green.max())
            r, c = rows.mean(), cols.mean()
            assert abs(r - row) <= 1.0 and abs(c - col) <= 1.0, (seed, v, (r, c), (row, col))
            checked += 1
    assert checked == 6


def test_camera_shift_translates_the_camera_without_re_aiming_it(make_env):
    env = make_env(camera=True, image_size=32, camera_views=2, dynamics=DynamicsParams(camera_shift_m=0.08))
    env.reset(seed=3)
    cam = env.unwrapped.camera
    moved = [e - e0 for e, e0 in zip(cam.eyes, cam.eyes0)]
    assert np.allclose(np.linalg.norm(moved[0]), 0.08) and np.allclose(moved[0], moved[1])
    view = np.asarray(cam.views_mats[0]).reshape(4, 4, order="F")  # OpenGL column-major
    nominal_forward = cam.targets0[0] - cam.eyes0[0]
    forward = -view[2, :3]  # the camera looks along -z of its frame
    assert np.allclose(forward, nominal_forward / np.linalg.norm(nominal_forward), atol=1e-5)


def test_camera_shift_tilt_fov_and_noise_change_the_picture(make_env):
    base = make_env(camera=True, image_size=32, camera_views=2)
    ref = base.reset(seed=5)[0]["image"]
    for key, value in (("camera_shift_m", 0.08), ("camera_tilt_deg", 3.0), ("camera_fov_delta_deg", 3.0),
                       ("image_noise_std", 5.0)):
        env = make_env(camera=True, image_size=32, camera_views=2, dynamics=DynamicsParams(**{key: value}))
        img = env.reset(seed=5)[0]["image"]
        assert np.abs(img.astype(int) - ref.astype(int)).mean() > 0.5, key


def test_negative_noise_is_refused_but_a_sign_without_meaning_is_not():
    with pytest.raises(ConfigError, match="image_noise_std"):
        DynamicsParams(image_noise_std=-1.0)
    # shift and tilt act in a direction drawn per episode: a negative value is the same draw, not an error
    assert DynamicsParams(camera_shift_m=-0.05, camera_tilt_deg=-2.0).camera_shift_m == -0.05
