"""Exact graph rewrites at export: the image's /255 folded into the first convolution, which reads the
channels-last camera bytes without a Transpose; parity with torch holds."""

from __future__ import annotations

import numpy as np
import onnx
import torch
from torch import nn

from tinker_core.nn.encoders import NatureCNN

from tinker_deploy.bundle import load_bundle
from tinker_deploy.export import export_bundle, generate_obs
from tinker_deploy.reference_policies import Actor, cnn_policy
from tinker_deploy.runtime import OnnxPolicy


def _ops(bundle, model: str = "policy") -> list[str]:
    return [n.op_type for n in onnx.load(str(load_bundle(bundle).model_path(model))).graph.node]


def _torch_actions(parts, obs) -> np.ndarray:
    with torch.no_grad():
        return parts["actor"](parts["perception"]({k: torch.from_numpy(v) for k, v in obs.items()})).numpy()


def test_reference_cnn_has_its_division_folded_into_the_first_conv(cnn_bundle):
    m = load_bundle(cnn_bundle).manifest
    for model in ("policy", "perception"):
        ops = _ops(cnn_bundle, model)
        assert "Div" not in ops and "Mul" not in ops
        assert ops[:3] == ["Reshape", "Cast", "Conv"] and "Transpose" not in ops  # camera bytes as [N, 1, H, W*C]
        rewrites = m.models[model].accuracy["graph_rewrites"]
        assert any("folded into the weights" in r for r in rewrites)
        assert any("read image as [N, 1, 64, 192]" in r for r in rewrites)
        assert m.models[model].accuracy["max_abs_diff_vs_torch"] <= 1e-5
    assert "graph_rewrites" not in m.models["actor"].accuracy  # nothing to rewrite in an MLP


class _Encoder(nn.Module):
    """tinker's NatureCNN (scales with a Mul by 1/255) next to a state vector."""

    def __init__(self, spec):
        super().__init__()
        self.enc = NatureCNN(spec["image"])
        self.fc = nn.Linear(256 + 7, 256)

    def forward(self, obs):
        return torch.relu(self.fc(torch.cat([self.enc(obs["image"]), obs["state"]], 1)))


class _CastFirst(nn.Module):
    """Casts before it permutes, and scales twice (x * 2 / 255), padded conv."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 18 * 18 + 7, 256)

    def forward(self, obs):
        x = obs["image"].float().permute(0, 3, 1, 2) * 2.0 / 255.0
        return self.fc(torch.cat([torch.relu(self.conv(x)).flatten(1), obs["state"]], 1))


class _ScaledTwice(nn.Module):
    """Uses the scaled image in the conv AND directly: the scale must stay in the graph."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 8, stride=4)
        self.fc = nn.Linear(4 * 8 * 8 + 36 * 36 * 3 + 7, 256)

    def forward(self, obs):
        x = obs["image"].permute(0, 3, 1, 2).float() / 255.0
        return self.fc(torch.cat([self.conv(x).flatten(1), x.flatten(1), obs["state"]], 1))


def test_other_scaling_patterns_fold_or_stay_with_parity(tmp_path):
    _, meta = cnn_policy(image=36)
    obs = generate_obs(meta["obs_spec"], 24)
    expect = {"enc": (True, "Mul"), "cast_first": (True, "Mul"), "twice": (False, "Div")}
    for name, perception in (("enc", _Encoder(meta["obs_spec"])), ("cast_first", _CastFirst()),
                             ("twice", _ScaledTwice())):
        parts = {"perception": perception.eval(), "actor": Actor().eval()}
        path = export_bundle(parts, meta, tmp_path / f"{name}.onnx", recorded_obs=obs, log=lambda _m: None)
        ops = _ops(path)
        folded, op = expect[name]
        assert (op not in ops and "Div" not in ops) == folded, (name, ops)
        if folded:  # the first conv reads the image directly
            assert "Transpose" not in ops and ops[:3] == ["Reshape", "Cast", "Conv"], (name, ops)
        else:  # the transpose stays, on the uint8 bytes
            assert ops.index("Transpose") < ops.index("Cast"), (name, ops)
        got = OnnxPolicy.from_bundle(path)(obs)
        assert np.max(np.abs(got - _torch_actions(parts, obs))) <= 1e-5, name


def test_int8_layout_rewrite_keeps_the_fp32_answer(cnn_bundle):
    """The graph quantized for int8 (Flatten reading channels-last, fc weights permuted) computes the same."""
    import onnxruntime as ort

    from tinker_deploy.graph_rewrite import rewrite

    b = load_bundle(cnn_bundle)
    fp32 = b.model_path("policy").read_bytes()
    int8_layout, done = rewrite(fp32, for_int8=True)
    assert any("Flatten" in r and "permuted" in r for r in done)
    obs, ref = b.recorded()
    got = ort.InferenceSession(int8_layout, providers=["CPUExecutionProvider"]).run(None, obs)[0]
    assert np.max(np.abs(got - ref["action"])) <= 1e-5
