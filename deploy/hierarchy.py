"""Hierarchical policies deployed: every level its own verified bundle, and a runtime that runs them together.

``export_hierarchy(algo.deployable_levels(), algo.hierarchy_metadata(), algo.export_metadata(), "out/sorter")``
writes the directory ``out/sorter/`` holding one bundle per level (each with its manifest, hashes and
torch-vs-onnxruntime parity, written by `tinker_deploy.export.export_bundle`) and ``hierarchy.json``:

| level | input | output |
|---|---|---|
| ``high/`` | obs | [option index] (int64) |
| ``low/`` | obs ⊕ one_hot(option) | env action |
| ``termination/`` (learned termination only) | obs ⊕ one_hot(option) | [beta] |

`tinker_deploy.hierarchy_runtime.HierarchicalOnnxPolicy` runs them (torch-free, for the edge install).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
from torch import nn

from tinker_core.errors import BundleError
from tinker_core.spec import Spec
from tinker_deploy.bundle import MANIFEST, bundle_dir_for_output
from tinker_deploy.export import export_bundle, generate_obs
from tinker_deploy.hierarchy_runtime import (  # noqa: F401  (the runtime's names, re-exported for one import)
    FORMAT, HIERARCHY_FILE, LEVELS, HierarchicalOnnxPolicy, is_hierarchy, read_hierarchy,
)

PER_LEVEL_KEYS = ("obs_terms",)
"""export metadata that describes the env observation alone: kept for the high level only (the other levels read
obs ⊕ option)"""


def _with_options(obs: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Recorded observations with a one-hot option each (options drawn uniformly), for the option-conditioned levels."""
    rng = np.random.default_rng(seed)
    onehot = np.eye(k, dtype=np.float32)[rng.integers(0, k, len(obs))]
    return np.concatenate([np.asarray(obs, np.float32), onehot], axis=1)


def export_hierarchy(levels: Mapping[str, tuple[nn.Module, Spec, Spec]], hierarchy: Mapping[str, Any],
                     metadata: Mapping[str, Any], out: str | os.PathLike, *, recorded_obs: np.ndarray | None = None,
                     tolerance: float = 1e-5, policy_version: int = 0, log: Callable[[str], None] = print) -> Path:
    """Export each level as a bundle under ``out`` and write ``hierarchy.json``; returns the directory."""
    unknown = sorted(set(levels) - set(LEVELS))
    if unknown or not {"high", "low"} <= set(levels):
        raise BundleError(f"hierarchy levels: expected 'high', 'low' and optionally 'termination', got {sorted(levels)}")
    k = int(hierarchy.get("num_options", 0))
    if k < 1:
        raise BundleError(f"hierarchy metadata: num_options must be >= 1, got {hierarchy.get('num_options')!r}")
    root = bundle_dir_for_output(out)
    high_in = levels["high"][1]
    if recorded_obs is None:
        recorded_obs = generate_obs(high_in)
        log(f"no recorded observations given: using {len(recorded_obs)} generated within the observation spec")
    recorded_obs = np.asarray(recorded_obs, np.float32)
    entries: dict[str, dict] = {}
    for name in LEVELS:
        if name not in levels:
            continue
        module, in_spec, out_spec = levels[name]
        meta = {k2: v for k2, v in metadata.items() if name == "high" or k2 not in PER_LEVEL_KEYS}
        meta.update(obs_spec=in_spec, action_spec=out_spec, feature_spec=None, normalization=None)
        rec = recorded_obs if name == "high" else _with_options(recorded_obs, k)
        path = export_bundle(module, meta, root / name, recorded_obs=rec, tolerance=tolerance,
                             policy_version=policy_version, log=lambda s, n=name: log(f"[{n}] {s}"))
        entries[name] = {"bundle": name, "input": in_spec.to_dict(), "output": out_spec.to_dict(),
                         "manifest_sha256": hashlib.sha256((path / MANIFEST).read_bytes()).hexdigest()}
    doc = {"format": FORMAT, **{k2: v for k2, v in hierarchy.items()}, "levels": entries,
           "obs_spec": high_in.to_dict(), "action_spec": levels["low"][2].to_dict()}
    tmp = root / f".{HIERARCHY_FILE}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, root / HIERARCHY_FILE)
    log(f"hierarchy written: {root} (levels {', '.join(entries)}; {k} options, termination {hierarchy.get('termination')})")
    return root
