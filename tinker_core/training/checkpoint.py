"""Algorithm checkpoints: a directory of versioned JSON metadata plus safetensors tensors.

Layout::

    PATH/meta.json            format, version, algo, config, specs, env id, counters, RNG states, versions
    PATH/model.safetensors    weights, optimizer moments, normalizer statistics, RNG tensors
    PATH/replay.safetensors   (off-policy only) the filled part of the replay buffer

Nothing is pickled. The directory is written under a temporary name and moved into place with
``os.replace``, so PATH is always a whole checkpoint; the tensors' sha256 is checked on load.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from tinker_core.errors import CheckpointError
from tinker_core.module import _json_default, atomic_write_bytes, tensors_digest

FORMAT = "tinker.algorithm"
FORMAT_VERSION = 1


def write_checkpoint(path: str | os.PathLike, meta: Mapping[str, Any],
                     files: Mapping[str, Mapping[str, np.ndarray]]) -> Path:
    """Write ``meta.json`` and one safetensors file per entry of ``files``, atomically as a directory."""
    from safetensors.numpy import save as st_save

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    meta = dict(meta)
    meta["format"], meta["format_version"] = FORMAT, FORMAT_VERSION
    meta["sha256"] = {}
    for name, tensors in files.items():
        t = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
        meta["sha256"][name] = tensors_digest(t)
        atomic_write_bytes(tmp / f"{name}.safetensors", st_save(t))
    atomic_write_bytes(tmp / "meta.json", json.dumps(meta, indent=1, default=_json_default).encode())
    old = path.with_name(f".{path.name}.old{os.getpid()}")
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)
    return path


def read_checkpoint(path: str | os.PathLike) -> tuple[dict, dict[str, dict[str, np.ndarray]]]:
    """Read and verify a checkpoint directory: (meta, {file: tensors}). Raises `CheckpointError`."""
    from safetensors.numpy import load_file

    path = Path(path)
    if not (path / "meta.json").is_file():
        raise CheckpointError(f"{path}: not a tinker checkpoint (expected a directory with meta.json)")
    try:
        meta = json.loads((path / "meta.json").read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}/meta.json: not valid JSON ({e})") from e
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    if int(meta.get("format_version", -1)) > FORMAT_VERSION:
        raise CheckpointError(f"{path}: format version {meta['format_version']} is newer than this tinker ({FORMAT_VERSION})")
    files = {}
    for name, digest in meta.get("sha256", {}).items():
        f = path / f"{name}.safetensors"
        try:
            files[name] = load_file(str(f))
        except Exception as e:  # safetensors raises several types for damaged files
            raise CheckpointError(f"{f}: unreadable ({e})") from e
        if tensors_digest(files[name]) != digest:
            raise CheckpointError(f"{f}: tensor digest does not match meta.json: the file was modified")
    return meta, files


# -- optimizers ---------------------------------------------------------------------------------
def optimizer_state(name: str, opt: torch.optim.Optimizer) -> tuple[dict[str, np.ndarray], dict]:
    sd = opt.state_dict()
    tensors = {}
    for idx, st in sd["state"].items():
        for k, v in st.items():
            tensors[f"optim.{name}.{idx}.{k}"] = torch.as_tensor(v).detach().cpu().numpy().copy()
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    return tensors, {"param_groups": groups}


def load_optimizer_state(name: str, opt: torch.optim.Optimizer, tensors: Mapping[str, np.ndarray], meta: dict) -> None:
    prefix = f"optim.{name}."
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, v in tensors.items():
        if key.startswith(prefix):
            idx, k = key[len(prefix):].split(".", 1)
            t = torch.from_numpy(np.array(v))
            state.setdefault(int(idx), {})[k] = t.reshape(()) if k == "step" and t.numel() == 1 else t
    groups = []
    for g in meta["param_groups"]:
        g = dict(g)
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
        groups.append(g)
    try:
        opt.load_state_dict({"state": state, "param_groups": groups})
    except (ValueError, KeyError) as e:
        raise CheckpointError(f"optimizer {name!r}: saved state does not fit ({e})") from e


# -- environments -------------------------------------------------------------------------------
_PLAIN = (int, float, bool, type(None), np.integer, np.floating, np.bool_)


def env_snapshot(env: Any) -> dict | None:
    """What is needed to continue an episode exactly: for envs with ``get_state()`` that; for
    gymnasium's classic-control envs their plain attributes; the wrappers' step counters; the
    env's RNG. ``None`` when the env cannot be captured (the run then resumes with fresh episodes)."""
    u = env.unwrapped
    snap: dict[str, Any] = {"wrappers": {}}
    if hasattr(u, "get_state") and hasattr(u, "set_state"):
        snap["custom"] = u.get_state()
    elif type(u).__module__.startswith("gymnasium.envs.classic_control"):
        attrs = {}
        for k, v in vars(u).items():
            if k.startswith("_") and k != "_np_random":
                continue
            if isinstance(v, np.ndarray):
                attrs[k] = {"ndarray": v.tolist(), "dtype": v.dtype.name}
            elif isinstance(v, tuple) and all(isinstance(x, _PLAIN) for x in v):
                attrs[k] = {"tuple": [x.item() if hasattr(x, "item") else x for x in v]}
            elif isinstance(v, _PLAIN):
                attrs[k] = {"plain": v.item() if hasattr(v, "item") else v}
        snap["attrs"] = attrs
    else:
        return None
    rng = getattr(u, "_np_random", None)
    snap["np_random"] = None if rng is None else rng.bit_generator.state
    e, depth = env, 0
    while hasattr(e, "env") and depth < 20:
        for k in ("_elapsed_steps", "_has_reset"):
            if hasattr(e, k):
                snap["wrappers"][f"{depth}.{k}"] = getattr(e, k)
        e, depth = e.env, depth + 1
    return snap


def restore_env(env: Any, snap: dict) -> None:
    u = env.unwrapped
    if "custom" in snap:
        u.set_state(snap["custom"])
    for k, v in snap.get("attrs", {}).items():
        if "ndarray" in v:
            setattr(u, k, np.asarray(v["ndarray"], dtype=v["dtype"]))
        elif "tuple" in v:
            setattr(u, k, tuple(v["tuple"]))
        else:
            setattr(u, k, v["plain"])
    if snap.get("np_random") is not None:
        rng = np.random.Generator(getattr(np.random, snap["np_random"]["bit_generator"])())
        rng.bit_generator.state = snap["np_random"]
        u._np_random = rng
    e, depth = env, 0
    while hasattr(e, "env") and depth < 20:
        for k in ("_elapsed_steps", "_has_reset"):
            key = f"{depth}.{k}"
            if key in snap["wrappers"]:
                setattr(e, k, snap["wrappers"][key])
        if hasattr(e, "checked_step"):  # PassiveEnvChecker: its one-time checks ran in the original run
            e.checked_reset = e.checked_step = e.checked_data_reuse = True
            e._previous_data = None
        e, depth = e.env, depth + 1
