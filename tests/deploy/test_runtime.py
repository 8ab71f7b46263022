"""The onnxruntime policy: ModuleBase interface, batch-1 and batched calls, clear errors, int8, providers."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.errors import BundleError, ConfigError, ValidationError
from tinker_core.module import ModuleBase
from tinker_core.spec import Spec

from tinker_deploy.bundle import load_bundle
from tinker_deploy.runtime import OnnxPolicy, OnnxPolicyConfig


def test_policy_is_a_module_with_specs_version_and_hash(mlp_bundle):
    p = OnnxPolicy.from_bundle(mlp_bundle, threads=1, optimization="all")
    assert isinstance(p, ModuleBase)
    assert p.input_spec == Spec((10,)) and p.output_spec == Spec((4,), "float32", -1, 1)
    assert p.version == 1 and p.sha256 == load_bundle(mlp_bundle).manifest.models["policy"].sha256
    assert p.session.get_providers() == ["CPUExecutionProvider"]


def test_batch_one_matches_batched_and_reference(mlp_bundle):
    p = OnnxPolicy.from_bundle(mlp_bundle)
    obs, ref = p.bundle.recorded()
    batched = p(obs)
    singles = np.stack([p(o) for o in obs[:20]])
    assert np.array_equal(singles, batched[:20])
    assert np.max(np.abs(batched - ref["action"])) < 1e-5
    a = p(obs[0])
    b = p(obs[1])
    assert not np.shares_memory(a, b) and not np.array_equal(a, b)  # each call returns its own array
    assert np.allclose(p(obs[0].astype(np.float64)), a)  # ROS gives float64: cast, same action


def test_dict_observation_batch_one(cnn_bundle):
    p = OnnxPolicy.from_bundle(cnn_bundle)
    obs, ref = p.bundle.recorded()
    one = p({"image": obs["image"][3], "state": obs["state"][3]})
    assert one.shape == (7,) and np.max(np.abs(one - ref["action"][3])) < 1e-5


def test_wrong_input_raises_validation_error_naming_the_field(mlp_bundle, cnn_bundle):
    p = OnnxPolicy.from_bundle(mlp_bundle)
    with pytest.raises(ValidationError, match=r"onnx_policy.obs: expected float32\[10\], got float32\[7\]"):
        p(np.zeros(7, np.float32))
    c = OnnxPolicy.from_bundle(cnn_bundle)
    with pytest.raises(ValidationError, match=r"missing \['state'\]"):
        c({"image": np.zeros((64, 64, 3), np.uint8)})


def test_warmup_reports_latency_percentiles(mlp_bundle):
    r = OnnxPolicy.from_bundle(mlp_bundle).warmup(50)
    assert set(r) == {"p50_us", "p99_us", "max_us"}
    assert 0 < r["p50_us"] <= r["p99_us"] <= r["max_us"]


def test_int8_model_and_its_accuracy_report(mlp_bundle):
    b = load_bundle(mlp_bundle)
    acc = b.manifest.models["policy_int8"].accuracy
    assert acc["n_obs"] == 128 and 0 < acc["max_abs_diff_vs_fp32"] < 1.0
    assert acc["mean_abs_diff_vs_fp32"] <= acc["max_abs_diff_vs_fp32"]
    q = OnnxPolicy.from_bundle(mlp_bundle, quantized=True)
    obs, ref = b.recorded()
    diff = np.max(np.abs(q(obs) - ref["action"]))
    assert diff == pytest.approx(acc["max_abs_diff_vs_fp32"], abs=1e-6)
    assert q.sha256 != OnnxPolicy.from_bundle(mlp_bundle).sha256


def test_int8_missing_is_a_clear_error(cnn_bundle):
    with pytest.raises(BundleError, match="no 'policy_int8' model .*--int8"):
        OnnxPolicy.from_bundle(cnn_bundle, quantized=True)


def test_unavailable_or_fallen_back_provider_is_refused(mlp_bundle):
    with pytest.raises(BundleError, match=r"execution provider\(s\) \['CUDAExecutionProvider'\] are not available"):
        OnnxPolicy.from_bundle(mlp_bundle, providers=("CUDAExecutionProvider", "CPUExecutionProvider"))


def test_bad_session_settings_are_config_errors():
    with pytest.raises(ConfigError, match="threads: expected >= 1, got 0"):
        OnnxPolicyConfig(threads=0)
    with pytest.raises(ConfigError, match="optimization"):
        OnnxPolicyConfig(optimization="max")


def test_onnx_policy_runs_in_the_pipeline_like_a_torch_policy(tmp_path):
    gym = pytest.importorskip("gymnasium")
    from tinker_core.pipeline import Pipeline
    from tinker_core.spec import spec_from_space

    from tinker_deploy.export import export_bundle
    from tinker_deploy.reference_policies import MLPPolicy

    env = gym.make("Pendulum-v1")
    obs_spec = spec_from_space(env.observation_space)
    meta = {"obs_spec": obs_spec, "action_spec": Spec((1,), "float32", -1.0, 1.0)}  # tanh output
    path = export_bundle(MLPPolicy(3, 1, 32).eval(), meta, tmp_path / "pendulum.onnx", log=lambda _m: None)
    policy = OnnxPolicy.from_bundle(path)
    stats = Pipeline(validate=True).connect(env, None, policy).run(50)
    assert stats.steps == 50
    env.close()
