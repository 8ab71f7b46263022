"""A hierarchical policy exported level by level (tinker_deploy.hierarchy) and run on onnxruntime: same options and
actions as the torch policy over whole episodes, the high level running at a lower rate, tampering refused."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import tinker_sim  # noqa: F401  (registers tinker/PlanarSort-v0 and the planar_sort skills)
from tinker_core.algos import HPPO, HPPOConfig
from tinker_core.errors import BundleError
from tinker_deploy.hierarchy import export_hierarchy
from tinker_deploy.hierarchy_runtime import HierarchicalOnnxPolicy

ENV = "tinker/PlanarSort-v0"


def _export(algo, path):
    return export_hierarchy(algo.deployable_levels(), algo.hierarchy_metadata(), algo.export_metadata(), path,
                            log=lambda s: None)


@pytest.mark.parametrize("cfg", [dict(skills=["planar_sort"]), dict(num_options=3, termination="learned")],
                         ids=["scripted-max_duration", "learned-learned_termination"])
def test_onnx_levels_act_like_the_torch_policy(tmp_path, cfg):
    algo = HPPO(ENV, HPPOConfig(n_steps=64, n_envs=2, n_epochs=1, net_arch=[32, 32], seed=1, max_duration=4, **cfg),
                env_kwargs={"num_objects": 2})
    algo.learn(128, progress=False)
    root = _export(algo, tmp_path / "sorter.onnx")
    assert sorted(p.name for p in root.iterdir()) == sorted(
        ["high", "low", "hierarchy.json"] + (["termination"] if "termination" in cfg else []))
    onnx_policy = HierarchicalOnnxPolicy(root)
    algo.policy.deterministic = True
    env = gym.make(ENV, num_objects=2)
    for seed in (0, 1):
        obs, _ = env.reset(seed=seed)
        algo.policy.reset()
        onnx_policy.reset()
        for _ in range(60):
            a_torch = algo.policy(obs)
            a_onnx = onnx_policy(obs)
            assert np.allclose(a_torch, a_onnx, atol=1e-5), (a_torch, a_onnx)
            assert onnx_policy.option == int(algo._eval_tracker.option[0])
            obs, _, te, tr, _ = env.step(a_torch)
            if te or tr:
                break
    assert onnx_policy.high_calls >= 2
    if "termination" not in cfg:  # max duration 4: the high level runs at most every 4th cycle (plus episode starts)
        assert onnx_policy.high_calls <= -(-onnx_policy.calls // 4) + 2


def test_tampered_level_is_refused(tmp_path):
    algo = HPPO(ENV, HPPOConfig(skills=["planar_sort"], n_steps=32, net_arch=[16], batch_size=32))
    root = _export(algo, tmp_path / "h")
    doc = json.loads((root / "hierarchy.json").read_text())
    assert doc["num_options"] == 9 and doc["options"][0] == "planar_sort/reach_0" and doc["max_duration"] == 8
    manifest = root / "low" / "manifest.json"
    manifest.write_text(manifest.read_text() + "\n")  # any change to a level after export
    with pytest.raises(BundleError, match="level 'low' does not match hierarchy.json"):
        HierarchicalOnnxPolicy(root)


def test_single_graph_export_is_refused_with_a_pointer():
    algo = HPPO(ENV, HPPOConfig(skills=["planar_sort"], n_steps=32, net_arch=[16], batch_size=32))
    with pytest.raises(Exception, match="deployable_levels"):
        algo.deployable_parts()


def test_tinker_export_writes_every_level_of_an_hppo_checkpoint(tmp_path, capsys):
    from tinker_cli import main

    algo = HPPO(ENV, HPPOConfig(num_options=2, termination="learned", n_steps=32, net_arch=[16], batch_size=32))
    algo.save(tmp_path / "ck")
    assert main(["export", str(tmp_path / "ck"), "-o", str(tmp_path / "out.onnx"), "--record-steps", "64"]) == 0
    assert "recorded 64 observations" in capsys.readouterr().out
    policy = HierarchicalOnnxPolicy(tmp_path / "out")
    assert policy.termination is not None and policy.k == 2
    assert policy(np.zeros(policy.input_spec.shape, np.float32)).shape == (3,)
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "out"), "--episodes", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["env"] == ENV and result["episodes"] == 2 and result["safety"] is False


def test_the_runtime_imports_without_torch():
    """The edge install has no torch: the hierarchy's runtime must not pull it in (the exporter may)."""
    import subprocess
    import sys

    code = ("import sys, tinker_deploy.hierarchy_runtime; "
            "print([m for m in sys.modules if m.split('.')[0] in ('torch', 'onnx')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
