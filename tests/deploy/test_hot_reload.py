"""Hot reload under a running loop: good bundles swap in between calls, broken ones never take effect."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tinker_core.errors import BundleError

from tinker_deploy.bundle import ExpectedIO
from tinker_deploy.hot_reload import HotSwapPolicy
from tinker_deploy.runtime import OnnxPolicy


def _broken_variants(good, tmp_path, cnn_bundle):
    """Bundles that must be refused: each with the words its rejection must contain."""
    tampered = tmp_path / "tampered"
    shutil.copytree(good, tampered)
    data = bytearray((tampered / "policy.onnx").read_bytes())
    data[-30] ^= 0x55
    (tampered / "policy.onnx").write_bytes(bytes(data))
    truncated = tmp_path / "truncated"
    shutil.copytree(good, truncated)
    (truncated / "policy.onnx").write_bytes((good / "policy.onnx").read_bytes()[:1000])
    half = tmp_path / "half"  # a bundle still being copied: model there, manifest not yet
    half.mkdir()
    shutil.copy(good / "policy.onnx", half / "policy.onnx")
    return [(tampered, "sha256 mismatch"), (truncated, "sha256 mismatch"), (half, "no manifest.json"),
            (tmp_path / "does_not_exist", "no bundle here"), (cnn_bundle, "joint names differ")]


def test_reloads_under_a_running_loop_never_miss_a_call(mlp_bundle, mlp_bundle_v2, cnn_bundle, tmp_path):
    hp = HotSwapPolicy(mlp_bundle, expect=ExpectedIO(joint_names=["joint_1", "joint_2", "joint_3", "joint_4"]))
    assert hp.version == 1
    v1 = OnnxPolicy.from_bundle(mlp_bundle)
    v2 = OnnxPolicy.from_bundle(mlp_bundle_v2)
    obs = np.linspace(-1, 1, 10, dtype=np.float32)
    known = {1: v1(obs), 2: v2(obs)}
    broken = _broken_variants(mlp_bundle, tmp_path, cnn_bundle)

    stop = threading.Event()
    calls, errors, seen_versions, wrong = 0, [], set(), 0

    def reloader():
        futures = []
        for path, _ in broken[:2]:
            futures.append(hp.request_reload(path))
        futures.append(hp.request_reload(mlp_bundle_v2))
        for path, _ in broken[2:]:
            futures.append(hp.request_reload(path))
        results = [f.result(timeout=120) for f in futures]
        time.sleep(0.05)
        results.append(hp.request_reload(mlp_bundle).result(timeout=120))
        time.sleep(0.05)
        stop.set()
        reloader.results = results

    t = threading.Thread(target=reloader)
    t.start()
    deadline = time.monotonic() + 180
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            active = hp.active
            a = active(obs)
            calls += 1
            seen_versions.add(active.version)
            wrong += int(not np.array_equal(a, known[active.version]))
        except Exception as e:  # the test fails below if anything escapes
            errors.append(e)
    t.join(timeout=10)
    assert not errors, errors[:3]
    assert calls > 100 and wrong == 0
    assert seen_versions == {1, 2}
    assert reloader.results == [False, False, True, False, False, False, True]
    assert hp.reloads == 2 and hp.version == 1
    reasons = [r.reason for r in hp.rejected]
    assert len(reasons) == len(broken)
    for (path, words), r in zip(broken, sorted(hp.rejected, key=lambda r: [str(p) for p, _ in broken].index(r.path))):
        assert words in r.reason, (path, r.reason)


def test_bundle_whose_model_differs_from_its_reference_is_rejected(mlp_bundle, mlp_bundle_v2, tmp_path):
    # v2's model inside v1's bundle with the manifest re-hashed: every hash is right, the outputs are not
    bad = tmp_path / "bad"
    shutil.copytree(mlp_bundle, bad)
    shutil.copy(mlp_bundle_v2 / "policy.onnx", bad / "policy.onnx")
    d = json.loads((bad / "manifest.json").read_text())
    d["models"]["policy"]["sha256"] = json.loads((mlp_bundle_v2 / "manifest.json").read_text())["models"]["policy"]["sha256"]
    (bad / "manifest.json").write_text(json.dumps(d))
    hp = HotSwapPolicy(mlp_bundle)
    assert hp.reload(bad) is False
    assert "differs from its own reference actions" in hp.rejected[0].reason
    assert hp.version == 1 and hp.reloads == 0


def test_bundle_with_other_io_is_rejected_without_expectations(mlp_bundle, cnn_bundle):
    hp = HotSwapPolicy(mlp_bundle)
    assert hp.reload(cnn_bundle) is False
    assert "I/O differs from the running model" in hp.rejected[0].reason


def test_initial_bundle_must_be_valid(mlp_bundle, tmp_path):
    with pytest.raises(BundleError, match="no bundle here"):
        HotSwapPolicy(tmp_path / "missing")


def test_parity_is_checked_within_the_bundles_export_tolerance_never_beyond_the_cap(mlp_bundle, mlp_bundle_v2,
                                                                                     tmp_path):
    from tinker_deploy.hot_reload import MAX_EXPORT_TOLERANCE

    # the shipped vision bundle: a CNN, exported within 1e-4 (measured 1.3e-5), above the default 1e-5
    vision = Path(__file__).resolve().parents[2] / "pretrained" / "arm_reach_vision"
    assert json.loads((vision / "manifest.json").read_text())["parity"]["max_abs_diff"] > 1e-5
    assert HotSwapPolicy(vision).version == 25000
    # a bundle that claims a loose tolerance gets no more than the cap
    bad = tmp_path / "bad"
    shutil.copytree(mlp_bundle, bad)
    shutil.copy(mlp_bundle_v2 / "policy.onnx", bad / "policy.onnx")
    d = json.loads((bad / "manifest.json").read_text())
    d["models"]["policy"]["sha256"] = json.loads((mlp_bundle_v2 / "manifest.json").read_text())["models"]["policy"]["sha256"]
    d["parity"]["tolerance"] = 1.0
    (bad / "manifest.json").write_text(json.dumps(d))
    hp = HotSwapPolicy(mlp_bundle)
    assert hp.reload(bad) is False
    assert f"above {MAX_EXPORT_TOLERANCE:g}" in hp.rejected[0].reason


def test_the_parity_bound_is_the_wider_of_the_checker_and_the_export_never_beyond_the_cap():
    """One rule for every check of a bundle's parity (the hot swap here, the policy node's actor check)."""
    from types import SimpleNamespace

    from tinker_deploy.hot_reload import MAX_EXPORT_TOLERANCE, parity_bound

    def bundle(parity):
        return SimpleNamespace(manifest=SimpleNamespace(parity=parity))

    assert parity_bound(bundle({"tolerance": 1e-4}), 1e-5) == 1e-4  # a learner's bundle, exported within 1e-4
    assert parity_bound(bundle({"tolerance": 1e-6}), 1e-5) == 1e-5
    assert parity_bound(bundle(None), 1e-5) == 1e-5
    assert parity_bound(bundle({"tolerance": 1.0}), 1e-5) == MAX_EXPORT_TOLERANCE
