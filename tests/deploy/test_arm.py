"""The ARM check: bundles under aarch64 python + onnxruntime in qemu, compared with x86.

Needs qemu-aarch64-static (.ci/setup-arm.sh installs it) and, the first time, network access to build
the cached aarch64 sysroot and wheels; without either the tests skip and say why. The MLP, CNN and
"outputs differ" bundles go through one emulated python (emulated start-up costs seconds).
"""

from __future__ import annotations

import shutil

import pytest

from tinker_cli import main

from tinker_deploy.arm import ArmCheckUnavailable, check_arm, check_arm_many
from tinker_deploy.bundle import load_bundle, pack_recorded, write_bundle


def _skip_without_qemu() -> None:
    if shutil.which("qemu-aarch64-static") is None:
        pytest.skip("qemu-aarch64-static is absent: install qemu-user-static (.ci/setup-arm.sh) to run the ARM check")


@pytest.fixture(scope="module")
def arm_reports(mlp_bundle, cnn_bundle, tmp_path_factory):
    """{name: ArmReport} for a copy of the MLP bundle, the CNN bundle, a bundle whose outputs differ
    from its own recorded reference, and a tampered copy of the MLP bundle."""
    _skip_without_qemu()
    d = tmp_path_factory.mktemp("arm")
    mlp = d / "mlp"
    shutil.copytree(mlp_bundle, mlp)
    good = load_bundle(mlp_bundle)
    obs, ref = good.recorded()
    files = {m.file: (good.path / m.file).read_bytes() for m in good.manifest.models.values()}
    files["recorded_obs.npz"] = pack_recorded(obs, {"action": ref["action"] + 1e-3})  # every hash right, outputs not
    differs = write_bundle(d / "differs", good.manifest, files)
    tampered = d / "tampered"
    shutil.copytree(mlp_bundle, tampered)
    data = bytearray((tampered / "policy.onnx").read_bytes())
    data[-40] ^= 0x11
    (tampered / "policy.onnx").write_bytes(bytes(data))
    try:
        reports = check_arm_many([mlp, cnn_bundle, differs, tampered], write_manifest=True)
    except ArmCheckUnavailable as e:
        pytest.skip(f"the ARM check cannot run here: {e}")
    for r in reports:
        print(r.format())
    return dict(zip(["mlp", "cnn", "differs", "tampered"], reports))


def test_mlp_bundle_passes_on_aarch64_and_records_the_version(arm_reports):
    r = arm_reports["mlp"]
    assert r.ok, r.format()
    assert r.emulated["machine"] == "aarch64" and r.emulated["byte_order"] == "little"
    assert r.emulated["onnxruntime"] == "1.26.0" and r.max_abs_diff_vs_x86 <= 1e-5
    assert "1.26.0" in load_bundle(r.bundle).manifest.ort_versions_verified["aarch64"]
    assert "NOT performance figures" in r.format()


def test_cnn_bundle_passes_on_aarch64(arm_reports):
    r = arm_reports["cnn"]
    assert r.ok, r.format()
    assert r.emulated["n_obs"] == 48 and r.max_abs_diff_vs_x86 <= 1e-5


def test_bundle_whose_outputs_differ_fails_with_the_difference(arm_reports):
    r = arm_reports["differs"]
    assert not r.ok
    assert "aarch64 output differs from the bundle's recorded reference actions by 0.001" in r.reason
    assert "ort_versions_verified" not in r.reason and "aarch64" not in load_bundle(r.bundle).manifest.ort_versions_verified


def test_tampered_bundle_fails_with_the_reason(arm_reports):
    r = arm_reports["tampered"]
    assert not r.ok and "sha256 mismatch" in r.reason


def test_missing_emulator_says_what_to_install(mlp_bundle, monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ArmCheckUnavailable, match="apt-get install qemu-user-static"):
        check_arm(mlp_bundle, log=lambda _m: None)
    assert main(["deploy", "check-arm", str(mlp_bundle)]) == 2
    assert "qemu-aarch64-static is not on PATH" in capsys.readouterr().err
