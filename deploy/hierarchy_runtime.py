"""Running an exported hierarchical policy on onnxruntime, without torch (the edge install has none).

`HierarchicalOnnxPolicy(path)` loads the levels `tinker_deploy.hierarchy.export_hierarchy` wrote (each a verified
bundle, their manifests pinned by digest in ``hierarchy.json``) and runs them: the high level only when the running
option has ended (after ``max_duration`` calls, or when beta > 0.5), so it runs at a lower rate than the control
cycle; the low level every call. Its output is the action the SafetyWrapper then filters, as for any policy (the
wrapper stays last).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np

from tinker_core.errors import BundleError, ConfigError
from tinker_core.module import ModuleBase
from tinker_core.spec import spec_from_dict
from tinker_deploy.bundle import MANIFEST, bundle_dir_for_output
from tinker_deploy.runtime import OnnxPolicy

HIERARCHY_FILE = "hierarchy.json"
FORMAT = "tinker.hierarchy/1"
LEVELS = ("high", "low", "termination")


def is_hierarchy(path: str | os.PathLike) -> bool:
    return (bundle_dir_for_output(path) / HIERARCHY_FILE).is_file()


def read_hierarchy(path: str | os.PathLike) -> dict:
    """``hierarchy.json`` of an exported hierarchy, checked: format, levels, and each level's manifest digest."""
    root = bundle_dir_for_output(path)
    f = root / HIERARCHY_FILE
    if not f.is_file():
        raise BundleError(f"{root}: no {HIERARCHY_FILE} here (not an exported hierarchical policy)")
    try:
        doc = json.loads(f.read_text())
    except ValueError as e:
        raise BundleError(f"{f}: not valid JSON ({e})") from e
    if doc.get("format") != FORMAT:
        raise BundleError(f"{f}: format {doc.get('format')!r}, expected {FORMAT!r}")
    for name, e in doc.get("levels", {}).items():
        got = hashlib.sha256((root / e["bundle"] / MANIFEST).read_bytes()).hexdigest() \
            if (root / e["bundle"] / MANIFEST).is_file() else None
        if got != e.get("manifest_sha256"):
            raise BundleError(f"{root}/{e['bundle']}: manifest of level {name!r} does not match {HIERARCHY_FILE} "
                              "(replaced or tampered with after export)")
    return doc


class HierarchicalOnnxPolicy(ModuleBase):
    """obs -> env action with the exported levels on onnxruntime; keeps the running option between calls.

    ``reset()`` at an episode start makes the next call a fresh high-level decision. ``high_calls`` and
    ``calls`` count how often each level ran (the high level's rate is ``high_calls / calls`` of the cycle)."""

    input_name, output_name = "obs", "action"

    def __init__(self, path: str | os.PathLike, threads: int = 1):
        super().__init__(None)
        self.root = bundle_dir_for_output(path)
        self.doc = read_hierarchy(self.root)
        levels = self.doc["levels"]
        self.k = int(self.doc["num_options"])
        self.max_duration = int(self.doc["max_duration"])
        if self.max_duration < 1:
            raise ConfigError(f"{self.root}/{HIERARCHY_FILE}: max_duration must be >= 1, got {self.max_duration}")
        self.beta_threshold = float(self.doc.get("beta_threshold", 0.5))
        self.high = OnnxPolicy.from_bundle(self.root / levels["high"]["bundle"], threads=threads)
        self.low = OnnxPolicy.from_bundle(self.root / levels["low"]["bundle"], threads=threads)
        self.termination = (OnnxPolicy.from_bundle(self.root / levels["termination"]["bundle"], threads=threads)
                            if "termination" in levels else None)
        self.input_spec = spec_from_dict(self.doc["obs_spec"])
        self.output_spec = spec_from_dict(self.doc["action_spec"])
        self.options = list(self.doc.get("options", []))
        self.name = "onnx_hierarchy"
        self.calls = self.high_calls = 0
        self.reset()

    def reset(self) -> None:
        self.option: int | None = None
        self.age = 0

    def _aug(self, obs: np.ndarray) -> np.ndarray:
        onehot = np.zeros(self.k, np.float32)
        onehot[self.option] = 1.0
        return np.concatenate([np.asarray(obs, np.float32).reshape(-1), onehot])

    def forward(self, obs: Any) -> np.ndarray:
        """The action for one observation (no batch: the running option is per robot)."""
        obs = np.asarray(obs, np.float32)
        if obs.shape != tuple(self.input_spec.shape):
            raise BundleError(f"{self.name}.obs: expected one observation of shape {tuple(self.input_spec.shape)}, "
                              f"got {obs.shape} (one robot per runtime: the running option is its state)")
        if self.option is not None:
            ends = self.age >= self.max_duration
            if not ends and self.termination is not None:
                ends = float(np.asarray(self.termination(self._aug(obs))).reshape(-1)[0]) > self.beta_threshold
            if ends:
                self.option = None
        if self.option is None:
            self.option = int(np.asarray(self.high(obs)).reshape(-1)[0])
            self.age = 0
            self.high_calls += 1
        action = self.low(self._aug(obs))
        self.age += 1
        self.calls += 1
        return action
