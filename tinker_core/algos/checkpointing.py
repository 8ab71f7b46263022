"""Checkpoints of an `Algorithm`: write, restore into one, and rebuild one from its metadata.

The directory format (atomic write, manifest, checksums) is `tinker_core.training.checkpoint`'s; this module
decides what an algorithm puts in it.
"""

from __future__ import annotations

import logging
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import torch

from tinker_core.envs import EnvConfig
from tinker_core.errors import CheckpointError
from tinker_core.module import config_to_dict
from tinker_core.spec import spec_from_dict
from tinker_core.training.checkpoint import (
    env_snapshot, load_optimizer_state, optimizer_state, read_checkpoint, restore_env, write_checkpoint,
)

if TYPE_CHECKING:
    from tinker_core.algos.base import Algorithm

log = logging.getLogger("tinker.train")


def versions() -> dict[str, str]:
    """The library versions a checkpoint or bundle was made with."""
    import gymnasium

    from tinker_core import __version__ as tinker_version

    return {"tinker": str(tinker_version), "torch": torch.__version__, "numpy": np.__version__,
            "gymnasium": gymnasium.__version__, "python": platform.python_version()}


def save_algorithm(algo: "Algorithm", path: str | Path, include_replay: bool = True) -> Path:
    """Write ``algo``'s checkpoint directory: weights, optimizer and RNG state, env snapshots, replay, metadata."""
    model = {f"model.{k}": v.detach().cpu().contiguous().numpy().copy() for k, v in algo.state_dict().items()}
    optim_meta = {}
    for name, opt in algo._optimizers().items():
        if opt is None:
            continue
        t, om = optimizer_state(name, opt)
        model.update(t)
        optim_meta[name] = om
    model["rng.torch"] = algo.gen.get_state().numpy().copy()
    envs = None
    if algo.vec_env is not None and algo._last_obs is not None:
        envs = {"snapshots": [env_snapshot(e) for e in algo.vec_env.envs],
                "ep_returns": algo.vec_env.ep_returns.tolist(), "ep_lengths": algo.vec_env.ep_lengths.tolist()}
        if isinstance(algo._last_obs, Mapping):
            model.update({f"env.last_obs.{k}": np.asarray(v) for k, v in algo._last_obs.items()})
        else:
            model["env.last_obs"] = np.asarray(algo._last_obs)
    extra_meta, extra_t = algo._extra_state()
    model.update({f"extra.{k}": v for k, v in extra_t.items()})
    files = {"model": model}
    if include_replay:
        replay = algo._replay_tensors()
        if replay:
            files["replay"] = replay
    meta = {
        "algo": algo.algo_name,
        "class": f"{type(algo).__module__}.{type(algo).__qualname__}",
        "config": config_to_dict(algo.config),
        "obs_spec": algo.obs_spec.to_dict(),
        "action_spec": algo.action_spec.to_dict(),
        "feature_spec": algo._feature_spec().to_dict(),
        "env_id": algo.env_id,
        "env_kwargs": algo.env_kwargs,
        "env": None if algo.env_config is None else algo.env_config.to_dict(),
        "counters": {"num_timesteps": algo.num_timesteps, "num_updates": algo.num_updates,
                     "num_episodes": algo.num_episodes, "learn_start": algo._learn_start,
                     "learn_target": algo._learn_target},
        "normalization": algo._normalization(),
        "rng": {"numpy": algo.np_rng.bit_generator.state},
        "optimizers": optim_meta,
        "envs": envs,
        "episode_history": algo.episode_history[-2000:],
        "success_history": algo.success_history[-2000:],
        "extra": extra_meta,
        "versions": versions(),
    }
    return write_checkpoint(path, meta, files)


def restore_algorithm(algo: "Algorithm", meta: dict, files: dict[str, dict[str, np.ndarray]], path: Path) -> None:
    """Load a checkpoint read by `read_checkpoint` into ``algo`` (same algorithm, same networks)."""
    t = files["model"]
    sd = algo.state_dict()
    state = {k[len("model."):]: v for k, v in t.items() if k.startswith("model.")}
    missing, extra = sorted(set(sd) - set(state)), sorted(set(state) - set(sd))
    if missing or extra:
        raise CheckpointError(f"{path}: weights do not fit {type(algo).__name__} (missing {missing}, unexpected {extra})")
    for k, v in list(state.items()):
        if v.size == sd[k].numel() and v.ndim != sd[k].dim():  # 0-d tensors come back as [1]
            state[k] = v = np.array(v).reshape(tuple(sd[k].shape))
        if tuple(sd[k].shape) != tuple(v.shape):
            raise CheckpointError(f"{path}: {k} has shape {tuple(v.shape)}, this network needs {tuple(sd[k].shape)}")
    algo.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
    for name, opt in algo._optimizers().items():
        if opt is not None and name in meta["optimizers"]:
            load_optimizer_state(name, opt, t, meta["optimizers"][name])
    algo.gen.set_state(torch.from_numpy(np.array(t["rng.torch"])))
    algo.np_rng.bit_generator.state = meta["rng"]["numpy"]
    cnt = meta["counters"]
    algo.num_timesteps, algo.num_updates = int(cnt["num_timesteps"]), int(cnt["num_updates"])
    algo.num_episodes = int(cnt["num_episodes"])
    algo._learn_start, algo._learn_target = int(cnt["learn_start"]), int(cnt["learn_target"])
    algo.episode_history = [tuple(x) for x in meta.get("episode_history", [])]  # type: ignore[misc]
    algo.success_history = [bool(x) for x in meta.get("success_history", [])]
    envs = meta.get("envs")
    if algo.vec_env is not None and envs is not None and len(envs["snapshots"]) == algo.vec_env.n:
        if all(s is not None for s in envs["snapshots"]):
            for e, s in zip(algo.vec_env.envs, envs["snapshots"]):
                restore_env(e, s)
            if "env.last_obs" in t:
                algo._last_obs = np.array(t["env.last_obs"])
            else:
                algo._last_obs = {k[len("env.last_obs."):]: np.array(v) for k, v in t.items()
                                  if k.startswith("env.last_obs.")}
            algo.vec_env.obs = algo._last_obs
            algo.vec_env.ep_returns[:] = envs["ep_returns"]
            algo.vec_env.ep_lengths[:] = envs["ep_lengths"]
        else:
            log.info("%s: the env state could not be captured; the run resumes with fresh episodes", path)
    algo._load_extra_state(meta.get("extra", {}), {k[len("extra."):]: v for k, v in t.items()
                                                   if k.startswith("extra.")})
    if "replay" in files:
        algo._load_replay(files["replay"])


def algorithm_from_meta(meta: dict, env: Any = None, device: str | None = None,
                        registry: Mapping[str, type["Algorithm"]] | None = None) -> "Algorithm":
    from tinker_core.module import config_from_dict

    if registry is None:
        from tinker_core.algos import ALGOS as registry
    name = meta.get("algo")
    if name not in registry:
        raise CheckpointError(f"checkpoint algo {name!r} is unknown; known: {sorted(registry)}")
    cls = registry[name]
    config = config_from_dict(cls.config_class, meta["config"], f"checkpoint config ({name})")
    if device is not None:
        config.device = device
    obs_spec, action_spec = spec_from_dict(meta["obs_spec"]), spec_from_dict(meta["action_spec"])
    env_kwargs = meta.get("env_kwargs") or {}
    if env is None:
        if meta.get("env"):
            env, env_kwargs = EnvConfig.from_dict(meta["env"], "checkpoint env"), {}
        else:
            env = meta["env_id"] if meta.get("env_id") else (obs_spec, action_spec)
    algo = cls(env, config, env_kwargs=env_kwargs)
    if algo.obs_spec != obs_spec or algo.action_spec != action_spec:
        raise CheckpointError(f"checkpoint was saved for obs {obs_spec!r} / action {action_spec!r}, the env gives "
                              f"obs {algo.obs_spec!r} / action {algo.action_spec!r}")
    return algo


def load_checkpoint_into(algo: Algorithm, path: str | Path) -> "Algorithm":
    meta, files = read_checkpoint(path)
    algo._restore(meta, files, Path(path))
    return algo
