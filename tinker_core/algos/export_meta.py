"""What a deployed bundle takes from an `Algorithm`: its ONNX-exportable parts and the metadata beside them."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from torch import nn

from tinker_core.algos.checkpointing import versions
from tinker_core.module import config_to_dict

if TYPE_CHECKING:
    from tinker_core.algos.base import Algorithm


def deployable_parts(algo: "Algorithm") -> dict[str, nn.Module]:
    """``perception``: obs -> features with the observation normalization folded in as constants;
    ``actor``: features -> deterministic action in the env's range. CPU copies in eval mode,
    without data-dependent control flow (ONNX-exportable)."""
    import copy

    perception, actor = algo._deploy_modules()
    perception = copy.deepcopy(perception).cpu().eval()
    actor = copy.deepcopy(actor).cpu().eval()
    if algo.obs_norm is not None:
        perception = nn.Sequential(algo.obs_norm.folded(), perception)
    for p in list(perception.parameters()) + list(actor.parameters()):
        p.requires_grad_(False)
    return {"perception": perception, "actor": actor}


def export_metadata(algo: "Algorithm") -> dict:
    """What a deployed bundle needs besides the graphs: specs, normalization, provenance, and what
    the env exposes about its observation/action layout (read from ``env.unwrapped``)."""
    meta = {
        "algo": algo.algo_name,
        "obs_spec": algo.obs_spec.to_dict(),
        "action_spec": algo.action_spec.to_dict(),
        "feature_spec": algo._feature_spec().to_dict(),
        "normalization": algo._normalization(),
        "training_step": algo.num_timesteps,
        "env_id": algo.env_id,
        "env": None if algo.env_config is None else algo.env_config.to_dict(),
        "config": config_to_dict(algo.config),
        "versions": versions(),
    }
    if algo.vec_env is not None:
        u = algo.vec_env.unwrapped
        for key in ("obs_terms", "action_terms", "joint_names", "action_chain_config", "control_period"):
            v = getattr(u, key, None)
            if v is None:
                continue
            if dataclasses.is_dataclass(v) and not isinstance(v, type):
                v = dataclasses.asdict(v)
            elif hasattr(v, "to_dict"):
                v = v.to_dict()
            meta[key] = v
    return meta
