"""Int8 models: static (calibrated, convolutions included) for a CNN, dynamic for an MLP, with accuracy reports."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tinker_core.errors import BundleError

from tinker_deploy.bundle import load_bundle
from tinker_deploy.export import export_bundle, generate_obs
from tinker_deploy.quantize import quantize_model
from tinker_deploy.reference_policies import mlp_policy
from tinker_deploy.runtime import OnnxPolicy


def test_cnn_int8_is_static_with_convolutions_quantized_and_reads_camera_bytes(cnn_int8_bundle):
    b = load_bundle(cnn_int8_bundle)
    acc = b.manifest.models["policy_int8"].accuracy
    assert acc["mode"] == "static" and acc["calibration_obs"] == 48 and acc["images_fed_as_uint8"] == 1
    g = onnx.load(str(b.model_path("policy_int8"))).graph
    by_output = {o: n for n in g.node for o in n.output}
    convs = [n for n in g.node if n.op_type == "Conv"]
    assert len(convs) == 3 and all(by_output[c.input[0]].op_type == "DequantizeLinear" for c in convs)
    assert all(by_output[c.input[1]].op_type == "DequantizeLinear" for c in convs)  # int8 weights
    first_dq = by_output[convs[0].input[0]]
    layout = by_output[first_dq.input[0]]  # the uint8 image itself: no Cast, no QuantizeLinear
    assert layout.op_type == "Transpose" and layout.input[0] == "image"  # cancels against ort's NHWC one
    flatten = next(n for n in g.node if n.op_type == "Flatten")
    src = by_output[flatten.input[0]]
    while src.op_type in ("QuantizeLinear", "DequantizeLinear"):
        src = by_output[src.input[0]]
    assert src.op_type == "Transpose"  # the Flatten reads NHWC: no transpose back to NCHW in ort's graph
    assert any("Flatten" in r and "permuted" in r for r in acc["graph_rewrites"])
    assert "Cast" not in [n.op_type for n in g.node]


def test_cnn_int8_accuracy_report_matches_what_the_runtime_gives(cnn_int8_bundle):
    b = load_bundle(cnn_int8_bundle)
    acc = b.manifest.models["policy_int8"].accuracy
    obs, ref = b.recorded()
    q = OnnxPolicy.from_bundle(cnn_int8_bundle, quantized=True)
    batched = q(obs)
    assert np.max(np.abs(batched - ref["action"])) == pytest.approx(acc["max_abs_diff_vs_fp32"], abs=1e-6)
    assert 0 < acc["max_abs_diff_vs_fp32"] < 0.05  # tanh actions in [-1, 1]: a few hundredths at most
    assert acc["mean_abs_diff_vs_fp32"] <= acc["p99_abs_diff_vs_fp32"] <= acc["max_abs_diff_vs_fp32"]
    one = q({k: v[5] for k, v in obs.items()})  # batch-1 path (IOBinding) gives the batched answer
    assert np.max(np.abs(one - batched[5])) < 1e-6


def test_mlp_int8_defaults_to_dynamic_and_static_can_be_asked_for(mlp_bundle, tmp_path):
    dyn = load_bundle(mlp_bundle).manifest.models["policy_int8"].accuracy
    assert dyn["mode"] == "dynamic"
    assert dyn["max_abs_diff_vs_fp32"] < 0.05  # 7-bit weights: no u8s8 saturation (8-bit gave 0.28 here)
    module, meta = mlp_policy()
    path = export_bundle(module, meta, tmp_path / "s.onnx", recorded_obs=generate_obs(meta["obs_spec"], 64),
                         quantize=True, int8_mode="static", log=lambda _m: None)
    acc = load_bundle(path).manifest.models["policy_int8"].accuracy
    assert acc["mode"] == "static" and acc["calibration_obs"] == 64 and acc["images_fed_as_uint8"] == 0
    obs, ref = load_bundle(path).recorded()
    assert np.max(np.abs(OnnxPolicy.from_bundle(path, quantized=True)(obs) - ref["action"])) < 0.05


def test_unknown_mode_and_empty_calibration_are_refused(tmp_path):
    module, meta = mlp_policy()
    with pytest.raises(BundleError, match=r"int8_mode: expected one of \('auto', 'static', 'dynamic'\), got 'fp16'"):
        export_bundle(module, meta, tmp_path / "x.onnx", quantize=True, int8_mode="fp16", log=lambda _m: None)
    assert not (tmp_path / "x").exists()
    with pytest.raises(BundleError, match="needs recorded observations"):
        quantize_model(b"", np.zeros((0, 10), np.float32), meta["obs_spec"], mode="static")
