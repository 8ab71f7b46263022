"""The edge install (numpy + pyyaml + onnxruntime + tinker, no torch) loads and runs bundles.

Runs in a real, clean venv (no system site-packages) cached under ~/.cache/tinker/edge-venv; the
first run installs the pinned packages (about a minute), later runs only reinstall tinker.
"""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from tinker_core.errors import TinkerError

from tinker_deploy.edge_venv import edge_pins, ensure_edge_venv
from tinker_deploy.runtime import OnnxPolicy

PROBE = """
import importlib.util, json, sys
import numpy as np
assert importlib.util.find_spec("torch") is None, "torch is importable in the edge venv"
from tinker_deploy.bundle import ExpectedIO
from tinker_deploy.hot_reload import HotSwapPolicy
from tinker_deploy.runtime import OnnxPolicy
mlp, cnn, mlp2 = sys.argv[1:4]
p = OnnxPolicy.from_bundle(mlp, expect=ExpectedIO(joint_names=["joint_1", "joint_2", "joint_3", "joint_4"]))
obs, ref = p.bundle.recorded()
c = OnnxPolicy.from_bundle(cnn)
cobs, _ = c.bundle.recorded()
hp = HotSwapPolicy(mlp)
swapped = hp.reload(mlp2)
print(json.dumps({"mlp": p(obs).tolist(), "cnn": c(cobs).tolist(), "swapped": swapped, "version": hp.version,
                  "int8": OnnxPolicy.from_bundle(mlp, quantized=True)(obs[0]).tolist(),
                  "torch_loaded": [m for m in sys.modules if m.split(".")[0] in ("torch", "onnx", "pybullet")]}))
"""


@pytest.fixture(scope="module")
def edge_python():
    try:
        return ensure_edge_venv(log=print)
    except (TinkerError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"the edge venv could not be built here (no package index reachable?): {e}")


def test_edge_pins_are_numpy_pyyaml_onnxruntime_only():
    names = sorted(p.split("==")[0] for p in edge_pins())
    assert names == ["numpy", "onnxruntime", "pyyaml"]
    assert all("==" in p for p in edge_pins())


def test_runtime_runs_bundles_in_a_venv_without_torch(edge_python, mlp_bundle, cnn_bundle, mlp_bundle_v2):
    out = subprocess.run([str(edge_python), "-c", PROBE, str(mlp_bundle), str(cnn_bundle), str(mlp_bundle_v2)],
                         capture_output=True, text=True, timeout=300, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["torch_loaded"] == []
    assert r["swapped"] is True and r["version"] == 2
    here = OnnxPolicy.from_bundle(mlp_bundle)
    obs, _ = here.bundle.recorded()
    assert np.max(np.abs(np.asarray(r["mlp"]) - here(obs))) < 1e-6
    c = OnnxPolicy.from_bundle(cnn_bundle)
    assert np.max(np.abs(np.asarray(r["cnn"]) - c(c.bundle.recorded()[0]))) < 1e-6
    assert len(r["int8"]) == 4


def test_doctor_runs_in_the_edge_venv(edge_python):
    tinker = edge_python.parent / "tinker"
    out = subprocess.run([str(tinker), "doctor"], capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "torch                 not installed" in out.stdout
    assert "training and export are unavailable" in out.stdout
