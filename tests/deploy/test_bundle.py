"""The bundle refuses what it must, and says why: tampered, truncated, half-written, other specs, other joints."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tinker_core.errors import BundleError
from tinker_core.spec import Spec

from tinker_deploy.bundle import ExpectedIO, load_bundle, resolve_bundle_dir
from tinker_deploy.manifest import Manifest, deploy_settings_sha256
from tinker_deploy.runtime import OnnxPolicy

REPO = Path(__file__).resolve().parents[2]


def test_path_rule_accepts_directory_onnx_inside_and_onnx_name(mlp_bundle):
    d = mlp_bundle
    assert resolve_bundle_dir(d) == d
    assert resolve_bundle_dir(d / "policy.onnx") == d
    assert resolve_bundle_dir(d.parent / "mlp.onnx") == d
    with pytest.raises(BundleError, match="no bundle here"):
        resolve_bundle_dir(d.parent / "nothing.onnx")


def test_tampered_model_is_refused_with_the_hash(mlp_bundle, copy_bundle):
    b = copy_bundle(mlp_bundle)
    data = bytearray((b / "policy.onnx").read_bytes())
    data[-20] ^= 0xFF  # one flipped byte inside the weights
    (b / "policy.onnx").write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"policy.onnx sha256 mismatch: manifest says [0-9a-f]{16}\.\.\., file is"):
        OnnxPolicy.from_bundle(b)


def test_truncated_model_is_refused(mlp_bundle, copy_bundle):
    b = copy_bundle(mlp_bundle)
    data = (b / "policy.onnx").read_bytes()
    (b / "policy.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(BundleError, match="modified or truncated"):
        load_bundle(b)


def test_half_written_bundle_is_refused(mlp_bundle, copy_bundle):
    b = copy_bundle(mlp_bundle)
    (b / "manifest.json").unlink()
    with pytest.raises(BundleError, match="no manifest.json"):
        load_bundle(b)
    b2 = copy_bundle(mlp_bundle, "b2")
    (b2 / "recorded_obs.npz").unlink()
    with pytest.raises(BundleError, match="recorded_obs file 'recorded_obs.npz' is missing"):
        load_bundle(b2)
    b3 = copy_bundle(mlp_bundle, "b3")
    text = (b3 / "manifest.json").read_text()
    (b3 / "manifest.json").write_text(text[: len(text) // 2])
    with pytest.raises(BundleError, match="not valid JSON"):
        load_bundle(b3)


def test_spec_mismatch_names_both_specs(mlp_bundle):
    with pytest.raises(BundleError, match=r"observation spec differs: bundle float32\[10\], expected float32\[12\]"):
        load_bundle(mlp_bundle, ExpectedIO(obs_spec=Spec((12,))))
    with pytest.raises(BundleError, match=r"action spec differs: bundle float32\[4\], expected float64\[4\]"):
        OnnxPolicy.from_bundle(mlp_bundle, expect=ExpectedIO(action_spec=Spec((4,), "float64", -1, 1)))
    ok = load_bundle(mlp_bundle, ExpectedIO(obs_spec=Spec((10,)), action_spec=Spec((4,), "float32", -1, 1)))
    assert ok.manifest.policy_version == 1


def test_joint_name_mismatch_names_missing_and_extra(cnn_bundle):
    robot = [f"lbr_iiwa_joint_{i}" for i in range(1, 7)] + ["joint7"]
    with pytest.raises(BundleError) as e:
        load_bundle(cnn_bundle, ExpectedIO(joint_names=robot))
    assert "joint names differ: missing ['joint7'], extra ['lbr_iiwa_joint_7']" in str(e.value)
    shuffled = [f"lbr_iiwa_joint_{i}" for i in (3, 1, 2, 7, 6, 5, 4)]
    assert load_bundle(cnn_bundle, ExpectedIO(joint_names=shuffled))  # order may differ: nodes map by name


def test_deploy_settings_drift_is_refused(mlp_bundle):
    m = load_bundle(mlp_bundle).manifest
    same = deploy_settings_sha256(0.02, m.action_chain, m.obs_terms)
    assert load_bundle(mlp_bundle, ExpectedIO(deploy_settings_sha256=same))
    drifted = deploy_settings_sha256(0.02, {**m.action_chain, "max_step": 0.3}, m.obs_terms)
    with pytest.raises(BundleError, match="deploy settings differ from training"):
        load_bundle(mlp_bundle, ExpectedIO(deploy_settings_sha256=drifted))


def test_hand_edited_settings_are_refused(mlp_bundle, copy_bundle):
    b = copy_bundle(mlp_bundle)
    d = json.loads((b / "manifest.json").read_text())
    d["control_period"] = 0.01
    (b / "manifest.json").write_text(json.dumps(d))
    with pytest.raises(BundleError, match="edited by hand"):
        load_bundle(b)


def test_newer_manifest_format_is_refused(mlp_bundle):
    d = json.loads((mlp_bundle / "manifest.json").read_text())
    d["format_version"] = 99
    with pytest.raises(BundleError, match="newer than this tinker"):
        Manifest.from_dict(d)


def test_manifest_runtime_and_bundle_import_without_torch_onnx_pybullet(mlp_bundle):
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'onnx', 'pybullet'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from deploy.manifest import Manifest\n"
        "from deploy.hot_reload import HotSwapPolicy\n"
        "from deploy.runtime import OnnxPolicy\n"
        "import numpy as np\n"
        f"p = OnnxPolicy.from_bundle({str(mlp_bundle)!r})\n"
        "print(p(np.zeros(10, np.float32)).shape, sorted(m for m in sys.modules if m.split('.')[0] in ('torch','onnx','pybullet')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(4,) []"


def test_recorded_observations_and_reference(cnn_bundle):
    obs, ref = load_bundle(cnn_bundle).recorded()
    assert obs["image"].dtype == np.uint8 and obs["image"].shape == (48, 64, 64, 3)
    assert ref["action"].shape == (48, 7) and ref["features"].shape == (48, 256)
