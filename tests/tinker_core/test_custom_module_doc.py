"""The template in docs/custom_module.md runs as written: config checks, forward, save/load, and a
pipeline on Pendulum-v1 with a hot swap to a second instance."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from tinker_core.errors import CheckpointError, ConfigError
from tinker_core.pipeline import Pipeline
from tinker_core.spec import Spec

DOC = Path(__file__).resolve().parents[2] / "docs" / "custom_module.md"


@pytest.fixture(scope="module")
def template() -> dict:
    block = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)[0]
    mod = types.ModuleType("custom_module_doc")
    sys.modules[mod.__name__] = mod  # dataclasses look their module up there
    try:
        exec(compile(block, str(DOC), "exec"), mod.__dict__)
        yield mod.__dict__
    finally:
        del sys.modules[mod.__name__]


def test_template_config_checks(template):
    cfg = template["RunningNormConfig"]
    with pytest.raises(ConfigError, match=r"RunningNormConfig.momentum: expected in \(0, 1\], got 0"):
        cfg(momentum=0)


def test_template_in_a_pipeline_with_save_load_and_swap(template, tmp_path, pendulum, parts):
    RunningNorm = template["RunningNorm"]
    norm = RunningNorm(obs_spec=parts.OBS)
    learner = parts.KeepLearner()
    p = Pipeline().connect(pendulum, norm, parts.MLPPolicy(), learner)
    p.run(100)
    assert not np.allclose(norm.mean, 0)
    path = norm.save(tmp_path / "norm.safetensors")
    again = RunningNorm(obs_spec=parts.OBS).load(path)
    np.testing.assert_array_equal(again.mean, norm.mean)
    p.swap("perception", again)
    p.run(50)
    assert len(learner.seen) == 150 and p.modules["perception"] is again
    with pytest.raises(CheckpointError, match="input_spec mismatch"):
        RunningNorm(obs_spec=Spec((3,), "float32")).load(path)
