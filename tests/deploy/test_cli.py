"""The commands a user types: tinker export (from a real SAC checkpoint), tinker deploy verify, tinker doctor."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tinker_cli import main
from tinker_core.spec import Spec

from tinker_deploy.bundle import load_bundle
from tinker_deploy.doctor import Report, flags
from tinker_deploy.runtime import OnnxPolicy


def test_export_from_a_sac_checkpoint_writes_a_bundle_next_to_the_onnx_name(tmp_path, capsys):
    algos = pytest.importorskip("tinker_core.algos", reason="the decision-core algorithms are not installed")
    specs = (Spec((6,), "float32"), Spec((3,), "float32", -1.0, 1.0))
    algo = algos.SAC(specs, algos.SACConfig(device="cpu", buffer_size=1000))
    ckpt = algo.save(tmp_path / "ckpt")
    rc = main(["export", str(ckpt), "-o", str(tmp_path / "policy.onnx"), "--int8", "--policy-version", "4"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "parity policy: max abs diff torch vs onnxruntime" in out
    b = load_bundle(tmp_path / "policy.onnx")
    assert b.path == tmp_path / "policy"
    assert {"policy", "perception", "actor", "policy_int8"} <= set(b.manifest.models)
    assert b.manifest.policy_version == 4 and b.manifest.obs_spec == specs[0]
    with __import__("torch").no_grad():
        parts = algo.deployable_parts()
        x = np.random.default_rng(0).normal(size=(4, 6)).astype(np.float32)
        t = __import__("torch").from_numpy(x)
        ref = parts["actor"](parts["perception"](t)).numpy()
    assert np.max(np.abs(OnnxPolicy(b)(x) - ref)) < 1e-5


def test_deploy_verify_reports_and_refuses_wrong_joints(mlp_bundle, capsys):
    assert main(["deploy", "verify", str(mlp_bundle)]) == 0
    out = capsys.readouterr().out
    assert "hashes ok" in out and "max abs diff" in out and "p99" in out
    assert main(["deploy", "verify", str(mlp_bundle), "--joints", "joint_1,joint_2,joint_3,joint_9"]) == 2
    err = capsys.readouterr().err
    assert "joint names differ: missing ['joint_9'], extra ['joint_4']" in err


def test_doctor_prints_platform_versions_and_providers(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    for words in ("byte order", "machine", "numpy", "onnxruntime", "torch", "execution providers", "CPUExecutionProvider"):
        assert words in out
    assert main(["doctor", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["info"]["byte order"] in ("little", "big") and "CPUExecutionProvider" in d["providers"]
    assert d["info"]["real-time scheduling"] in (True, False, None)
    import os
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the check put this process's scheduling back


def test_doctor_flags_known_incompatibilities():
    r = Report(info={"machine": "aarch64", "emulated (qemu)": True, "byte order": "little"},
               versions={"numpy": "1.26.4", "onnxruntime": "1.28.0", "torch": None, "rclpy": None, "onnx": None})
    text = " | ".join(flags(r))
    assert "1.28 and newer crash at import under qemu" in text
    assert "numpy 1.26.4 with onnxruntime 1.28.0" in text
    assert "rclpy is not importable" in text
    rt = flags(Report(info={"machine": "x86_64", "byte order": "little", "real-time scheduling": False},
                      versions={"numpy": "2.4.6", "onnxruntime": "1.31.1"}))
    assert len(rt) == 1 and "SCHED_FIFO is refused" in rt[0] and "rtprio" in rt[0]
    assert flags(Report(info={"machine": "x86_64", "byte order": "little"},
                        versions={"numpy": "2.4.6", "onnxruntime": "1.31.1"})) == []
