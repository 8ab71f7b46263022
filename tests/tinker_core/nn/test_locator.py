"""`TargetLocator` / `LocatedState`: soft-argmax finds a heatmap peak, triangulation inverts the cameras, ONNX
(onnxruntime) equals torch."""

from __future__ import annotations

import io

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tinker_core.errors import ConfigError
from tinker_core.nn.locator import (LocatedState, LocatorConfig, SpatialSoftArgmax, TargetLocator, triangulate,
                                    triangulate_at_height)


def _look_at(eye, target, fov_deg: float = 55.0, near: float = 0.05, far: float = 5.0) -> np.ndarray:
    """A 3x4 projection (rows x, y, w of OpenGL clip coordinates) of a camera at ``eye`` looking at ``target``,
    built here from the textbook formulas (not from sim: tinker_core stands alone)."""
    eye, target = np.asarray(eye, float), np.asarray(target, float)
    f = (target - eye) / np.linalg.norm(target - eye)
    r = np.cross(f, [0.0, 0.0, 1.0])
    r /= np.linalg.norm(r)
    u = np.cross(r, f)
    view = np.eye(4)
    view[:3, :3] = np.stack([r, u, -f])
    view[:3, 3] = -view[:3, :3] @ eye
    t = 1.0 / np.tan(np.radians(fov_deg) / 2)
    proj = np.array([[t, 0, 0, 0], [0, t, 0, 0], [0, 0, -(far + near) / (far - near), -2 * far * near / (far - near)],
                     [0, 0, -1, 0]])
    return (proj @ view)[[0, 1, 3]]


CAMERAS = np.stack([_look_at([1.3, 0.5, 0.9], [0.45, 0.0, 0.25]), _look_at([1.3, -0.5, 0.9], [0.45, 0.0, 0.25])])


def _seen(points: np.ndarray, cameras: np.ndarray) -> torch.Tensor:
    """(B, 3) points -> (B, V, 2) where each camera sees them."""
    q = np.einsum("vij,bj->bvi", cameras, np.c_[points, np.ones(len(points))])
    return torch.tensor(q[..., :2] / q[..., 2:], dtype=torch.float32)


def test_soft_argmax_returns_the_peak_position():
    h = torch.full((1, 1, 9, 17), -50.0)
    h[0, 0, 2, 12] = 50.0  # row 2 of 9 -> y = -0.5; column 12 of 17 -> x = 0.5
    xy = SpatialSoftArgmax(9, 17)(h)[0, 0]
    assert torch.allclose(xy, torch.tensor([0.5, -0.5]), atol=1e-4)


def test_locator_onnx_output_equals_torch():
    torch.manual_seed(0)
    model = TargetLocator(LocatorConfig(image_size=32, views=2, keypoints=4, hidden=16)).eval()
    x = torch.randint(0, 256, (3, 32, 64, 3), dtype=torch.uint8)
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, input_names=["image"], output_names=["target"], opset_version=17,
                      dynamic_axes={"image": {0: "b"}, "target": {0: "b"}}, dynamo=False)
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {"image": x.numpy()})[0]
    with torch.no_grad():
        want = model(x).numpy()
    assert got.shape == (3, 3)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_triangulation_finds_the_point_two_cameras_see():
    points = np.array([[0.5, 0.1, 0.3], [0.35, -0.28, 0.52], [0.7, 0.3, 0.2]])
    got = triangulate(_seen(points, CAMERAS), torch.tensor(CAMERAS, dtype=torch.float32))
    np.testing.assert_allclose(got.numpy(), points, atol=1e-5)


def test_through_the_nominal_cameras_a_moved_camera_misplaces_every_point_by_minus_its_move():
    """Why the locator triangulates: cameras moved by ``s`` (not re-aimed) see ``X`` where the nominal ones see
    ``X - s``, so target and hand are misplaced by the same vector, and the hand measures it (`EstimateHold`)."""
    s = np.array([0.0, 0.06, -0.05])
    back = np.eye(4)
    back[:3, 3] = -s
    moved = CAMERAS @ back  # the moved cameras' projections
    points = np.array([[0.5, 0.1, 0.3], [0.4, -0.2, 0.5]])
    got = triangulate(_seen(points, moved), torch.tensor(CAMERAS, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(got, points - s, atol=1e-5)


def _triangulating_config(**kw) -> LocatorConfig:
    return LocatorConfig(image_size=32, views=2, keypoints=2, hand=True, convs=3, projections=CAMERAS.tolist(),
                         center=[0.5, 0.0, 0.3, 0.4, 0.0, 0.4], half=[0.2, 0.3, 0.2, 0.3, 0.4, 0.3], **kw)


def test_a_triangulating_locator_puts_a_heatmap_peak_where_the_cameras_see_it_and_exports_to_onnx():
    torch.manual_seed(3)
    model = TargetLocator(_triangulating_config()).eval()
    x = torch.randint(0, 256, (3, 32, 64, 3), dtype=torch.uint8)
    with torch.no_grad():
        want = model(x).numpy()
        points = np.array([[0.5, 0.1, 0.3], [0.42, -0.2, 0.45]])
        seen = _seen(points, CAMERAS)  # (things, views, 2), camera coordinates
        found = model.positions(seen.permute(1, 0, 2).unsqueeze(1))  # (views, B=1, things, 2)
        # the image points the heatmaps give are what forward triangulates (soft-argmax's -1 and 1 are the centres
        # of the edge pixels, the camera's are the edges, and its y points down: image_points converts)
        again = model.positions(model.image_points(x).transpose(0, 1))
    np.testing.assert_allclose(found.numpy().reshape(2, 3), points, atol=1e-5)
    np.testing.assert_allclose(again.numpy(), want, atol=1e-5)
    at_height = triangulate_at_height(seen[:, :, :], torch.tensor(CAMERAS, dtype=torch.float32), 0.45)
    np.testing.assert_allclose(at_height[1].numpy(), points[1], atol=1e-5)  # the point at that height: found
    assert abs(float(at_height[0, 2]) - 0.45) < 1e-6  # the other is put at the height given
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, input_names=["image"], output_names=["positions"], opset_version=17,
                      dynamic_axes={"image": {0: "b"}, "positions": {0: "b"}}, dynamo=False)
    got = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"]).run(None, {"image": x.numpy()})[0]
    assert got.shape == (3, 6)
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_triangulating_settings_that_do_not_fit_are_refused():
    with pytest.raises(ConfigError, match="one 3x4 matrix per view"):
        LocatorConfig(views=1, keypoints=1, projections=CAMERAS.tolist())
    with pytest.raises(ConfigError, match="one 3x4 matrix per view"):
        LocatorConfig(projections=[[[1.0] * 4] * 3, [[1.0] * 3] * 3], keypoints=1)
    with pytest.raises(ConfigError, match="one heatmap per thing"):
        LocatorConfig(projections=CAMERAS.tolist(), keypoints=4)
    with pytest.raises(ConfigError, match="convs"):
        LocatorConfig(convs=0)


def test_located_state_replaces_the_target_terms_and_ignores_what_the_state_carried():
    model = TargetLocator(LocatorConfig(image_size=32, views=1, keypoints=2, hidden=8)).eval()
    wrap = LocatedState(model, target_slot=4, rel_slot=7, ee_slot=1, pos_offset=[0.5, 0.0, 0.3],
                        pos_scale=[2.0, 2.0, 2.0], rel_scale=[5.0, 5.0, 5.0]).eval()
    img = torch.randint(0, 256, (1, 32, 32, 3), dtype=torch.uint8)
    a, b = torch.zeros(1, 12), torch.zeros(1, 12)
    b[0, 4:10] = 7.0  # whatever the simulator wrote in the target slots
    with torch.no_grad():
        fa, fb = wrap({"image": img, "state": a}), wrap({"image": img, "state": b})
        t = model(img)[0]
    assert torch.equal(fa, fb)
    assert torch.allclose(fa[0, 4:7], (t - torch.tensor([0.5, 0.0, 0.3])) * 2.0)
    ee = torch.tensor([0.5, 0.0, 0.3])  # ee slots 0 -> the offset
    assert torch.allclose(fa[0, 7:10], (t - ee) * 5.0)


def test_located_state_refuses_a_layout_it_cannot_fill():
    with pytest.raises(ConfigError, match="relative-target slot"):
        LocatedState(TargetLocator(), 4, 9, 1, [0.0] * 3, [1.0] * 3, [1.0] * 3)


def _hand_config(**kw) -> LocatorConfig:
    return LocatorConfig(image_size=32, views=2, keypoints=2, hidden=8, hand=True,
                         center=[0.5, 0.0, 0.3, 0.4, 0.0, 0.4], half=[0.2, 0.3, 0.2, 0.3, 0.4, 0.3], **kw)


def test_a_hand_locator_gives_the_target_to_the_state_and_the_hand_to_its_own_model():
    from tinker_core.nn.locator import HandLocator

    torch.manual_seed(1)
    model = TargetLocator(_hand_config()).eval()
    wrap = LocatedState(model, target_slot=4, rel_slot=7, ee_slot=1, pos_offset=[0.5, 0.0, 0.3],
                        pos_scale=[2.0, 2.0, 2.0], rel_scale=[5.0, 5.0, 5.0]).eval()
    img = torch.randint(0, 256, (2, 32, 64, 3), dtype=torch.uint8)
    with torch.no_grad():
        out = model(img)
        feats = wrap({"image": img, "state": torch.zeros(2, 12)})
        hand = HandLocator(model)({"image": img})
    assert out.shape == (2, 6) and model.config.target_size == 3
    assert torch.allclose(feats[:, 4:7], (out[:, :3] - torch.tensor([0.5, 0.0, 0.3])) * 2.0)
    assert torch.equal(hand, out[:, 3:])


def test_hand_settings_that_do_not_fit_are_refused():
    from tinker_core.nn.locator import HandLocator

    with pytest.raises(ConfigError, match="then the hand.s, as many values each"):
        LocatorConfig(hand=True)  # the default center holds the target's range only
    with pytest.raises(ConfigError, match="without the hand"):
        HandLocator(TargetLocator(LocatorConfig(image_size=32, hidden=8)))
    with pytest.raises(ConfigError, match="finds 3 target values"):
        LocatedState(TargetLocator(_hand_config()), 2, 4, 0, [0.0] * 2, [1.0] * 2, [1.0] * 2)


def test_a_bundle_with_a_hand_model_exports_and_runs_it_in_onnxruntime(tmp_path):
    """`export_bundle` writes ``hand.onnx`` (image in, the hand out) beside perception and actor, parity-checked,
    and `OnnxPolicy(part="hand")` runs it from the bundle."""
    from tinker_core.nn.locator import HandLocator
    from tinker_core.spec import DictSpec, Spec
    from tinker_deploy.export import export_bundle
    from tinker_deploy.runtime import OnnxPolicy

    torch.manual_seed(2)
    model = TargetLocator(_hand_config()).eval()
    perception = LocatedState(model, target_slot=4, rel_slot=7, ee_slot=1, pos_offset=[0.5, 0.0, 0.3],
                              pos_scale=[2.0, 2.0, 2.0], rel_scale=[5.0, 5.0, 5.0])
    obs_spec = DictSpec({"image": Spec((32, 64, 3), "uint8", 0, 255), "state": Spec((12,), "float32", -10, 10)})
    rng = np.random.default_rng(0)
    recorded = {"image": rng.integers(0, 256, (8, 32, 64, 3), dtype=np.uint8),
                "state": rng.uniform(-1, 1, (8, 12)).astype(np.float32)}
    meta = {"obs_spec": obs_spec, "action_spec": Spec((2,), "float32", -1, 1), "feature_spec": Spec((12,)),
            "image_terms": []}
    out = export_bundle({"perception": perception, "actor": torch.nn.Sequential(torch.nn.Linear(12, 2),
                                                                                torch.nn.Tanh()),
                         "hand": HandLocator(model)}, meta, tmp_path / "b", recorded_obs=recorded,
                        tolerance=1e-4, log=lambda s: None)
    assert (out / "hand.onnx").is_file()
    hand = OnnxPolicy.from_bundle(out, part="hand")
    assert [i["name"] for i in hand.manifest.models["hand"].inputs] == ["image"]
    with torch.no_grad():
        want = model(torch.from_numpy(recorded["image"]))[:, 3:].numpy()
    np.testing.assert_allclose(hand.forward({"image": recorded["image"][0], "state": recorded["state"][0]}),
                               want[0], atol=1e-4)
    np.testing.assert_allclose(hand.forward({"image": recorded["image"]}), want, atol=1e-4)
    beside = OnnxPolicy.from_bundle(out, part="perception").hand()  # as the loop finds it from perception
    np.testing.assert_allclose(beside.forward({"image": recorded["image"][0]}), want[0], atol=1e-4)
    assert OnnxPolicy(beside.bundle, part="actor").hand().part == "hand"
    del meta["image_terms"]
    plain = export_bundle({"perception": perception, "actor": torch.nn.Linear(12, 2)}, meta, tmp_path / "p",
                          recorded_obs=recorded, tolerance=1e-4, log=lambda s: None)
    assert OnnxPolicy.from_bundle(plain, part="perception").hand() is None
