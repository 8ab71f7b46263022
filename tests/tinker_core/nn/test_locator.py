"""`TargetLocator` / `LocatedState`: soft-argmax finds a heatmap peak, ONNX (onnxruntime) equals torch."""

from __future__ import annotations

import io

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tinker_core.errors import ConfigError
from tinker_core.nn.locator import LocatedState, LocatorConfig, SpatialSoftArgmax, TargetLocator


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
