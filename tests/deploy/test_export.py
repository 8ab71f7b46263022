"""Export + parity for the MLP and the CNN+MLP policies, and the export-time refusals."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from tinker_core.errors import BundleError
from tinker_core.spec import Spec

from tinker_deploy.bundle import load_bundle
from tinker_deploy.export import DataDependentControlFlowError, export_bundle, parity
from tinker_deploy.manifest import OPSET, deploy_settings_sha256
from tinker_deploy.reference_policies import cnn_policy, mlp_policy
from tinker_deploy.runtime import OnnxPolicy


def test_mlp_bundle_has_documented_io_and_matches_torch(mlp_bundle):
    b = load_bundle(mlp_bundle)
    m = b.manifest
    assert mlp_bundle.name == "mlp"  # -o mlp.onnx -> directory mlp/
    assert set(m.models) == {"policy", "policy_int8"}
    assert m.opset == OPSET == 17
    model = onnx.load(str(b.model_path("policy")))
    assert [i.name for i in model.graph.input] == ["obs"]
    assert [o.name for o in model.graph.output] == ["action"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert m.parity["max_abs_diff"] <= 1e-5 and m.parity["n_obs"] == 128
    assert m.versions["torch"] == torch.__version__ and m.byte_order in ("little", "big")
    assert m.deploy_settings_sha256 == deploy_settings_sha256(0.02, m.action_chain, m.obs_terms)
    assert m.joint_names == ["joint_1", "joint_2", "joint_3", "joint_4"]
    # recompute torch on fresh observations, batch of 5 (dynamic batch axis) and batch 1
    module, _ = mlp_policy()
    x = np.random.default_rng(3).normal(size=(5, 10)).astype(np.float32)
    policy = OnnxPolicy.from_bundle(mlp_bundle)
    with torch.no_grad():
        ref = module(torch.from_numpy(x)).numpy()
    assert np.max(np.abs(policy(x) - ref)) < 1e-5
    assert np.max(np.abs(policy(x[0]) - ref[0])) < 1e-5


def test_manifest_is_plain_json_with_every_term(mlp_bundle):
    d = json.loads((mlp_bundle / "manifest.json").read_text())
    assert d["format"] == "tinker.bundle"
    assert [t["name"] for t in d["action_terms"]] == ["joint_1", "joint_2", "joint_3", "joint_4"]
    assert d["obs_terms"][0]["history"] == 1 and d["control_period"] == 0.02
    assert d["action_chain"]["max_step"] == 0.15
    assert set(d["versions"]) == {"torch", "onnx", "numpy", "onnxruntime", "python"}


def test_cnn_bundle_parts_and_parity(cnn_bundle):
    b = load_bundle(cnn_bundle)
    assert {"policy", "perception", "actor"} <= set(b.manifest.models)
    full = onnx.load(str(b.model_path("policy")))
    assert [i.name for i in full.graph.input] == ["image", "state"]
    assert [o.name for o in onnx.load(str(b.model_path("perception"))).graph.output] == ["features"]
    assert [i.name for i in onnx.load(str(b.model_path("actor"))).graph.input] == ["features"]
    obs, ref = b.recorded()
    parts, _ = cnn_policy(image=64)
    with torch.no_grad():
        torch_actions = parts["actor"](parts["perception"]({k: torch.from_numpy(v) for k, v in obs.items()})).numpy()
    policy = OnnxPolicy(b)
    assert np.max(np.abs(policy(obs) - torch_actions)) < 1e-5
    perception, actor = OnnxPolicy(b, "perception"), OnnxPolicy(b, "actor")
    two_step = actor(perception({k: v[0] for k, v in obs.items()}))
    assert np.max(np.abs(two_step - ref["action"][0])) < 1e-5


class _Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(10, 4)

    def forward(self, x):
        if x.sum() > 0:
            return self.l(x)
        return -self.l(x)


def test_data_dependent_control_flow_is_refused_in_plain_words(tmp_path):
    _, meta = mlp_policy()
    with pytest.raises(DataDependentControlFlowError) as e:
        export_bundle(_Branchy(), meta, tmp_path / "b.onnx", log=lambda _m: None)
    msg = str(e.value)
    assert "data-dependent control flow" in msg and "if x.sum() > 0:" in msg and "torch.where" in msg
    assert not (tmp_path / "b").exists()  # nothing written


def test_parity_failure_raises_with_the_difference():
    a = np.zeros((3, 4), np.float32)
    with pytest.raises(BundleError, match=r"differs from torch by 0.01 .*tolerance 1e-05"):
        parity("policy", a, a + 0.01, 1e-5, log=lambda _m: None)


def test_export_refuses_wrong_parts_and_missing_specs(tmp_path):
    module, meta = mlp_policy()
    with pytest.raises(BundleError, match="deployable parts must be"):
        export_bundle({"encoder": module}, meta, tmp_path / "x", log=lambda _m: None)
    with pytest.raises(BundleError, match="obs_spec"):
        export_bundle(module, {"action_spec": Spec((4,))}, tmp_path / "x", log=lambda _m: None)


def test_unfolded_normalization_is_folded_into_the_graph(tmp_path):
    module, meta = mlp_policy()
    mean, std = np.linspace(-1, 1, 10), np.linspace(0.5, 2, 10)
    meta = {**meta, "normalization": {"mean": mean.tolist(), "std": std.tolist(), "clip": 5.0, "folded": False}}
    path = export_bundle(module, meta, tmp_path / "n.onnx", log=lambda _m: None)
    x = np.full((1, 10), 3.0, np.float32)
    with torch.no_grad():
        ref = module(torch.from_numpy(np.clip((x - mean) / std, -5, 5).astype(np.float32))).numpy()
    assert np.max(np.abs(OnnxPolicy.from_bundle(path)(x) - ref)) < 1e-5
    assert load_bundle(path).manifest.normalization["folded"] is True


def test_observations_are_recorded_from_the_policy_in_its_env():
    gym = pytest.importorskip("gymnasium")
    from tinker_deploy.export import record_observations
    from tinker_deploy.reference_policies import MLPPolicy

    env = gym.make("Pendulum-v1")  # truncates after 200 steps, so 300 steps include a reset
    try:
        obs = record_observations(env, MLPPolicy(3, 1, 32).eval(), n=300, seed=1)
    finally:
        env.close()
    assert obs.shape == (300, 3) and obs.dtype == np.float32
    assert len(np.unique(obs[:, 0])) > 200  # real trajectory states, not one repeated observation
