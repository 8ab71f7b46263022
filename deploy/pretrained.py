"""The policies tinker ships (``pretrained/<name>/bundle`` and ``checkpoint``), found by env id.

The CLI's defaults and the ROS nodes' empty ``bundle`` parameter both resolve here, so there is one answer to
"which policy runs when none is given"."""

from __future__ import annotations

from pathlib import Path

from tinker_core.errors import ConfigError

PRETRAINED = Path(__file__).resolve().parents[1] / "pretrained"
"""shipped pretrained policies: ``pretrained/<name>/bundle`` (ONNX) and ``pretrained/<name>/checkpoint``"""
PRETRAINED_FOR_ENV = {"tinker/ArmReach-v0": "arm_reach", "tinker/ArmSort-v0": "arm_sort"}
TRAIN_CONFIG = {"arm_reach": "sac_arm_reach.yaml", "arm_sort": "bc_arm_sort.yaml"}
"""the committed config that regenerates each shipped policy"""


def pretrained_dir(env_id: str) -> Path:
    """``pretrained/<name>`` of ``env_id``'s shipped policy; a clear error when there is none or it is missing."""
    name = PRETRAINED_FOR_ENV.get(env_id)
    if name is None:
        raise ConfigError(f"no shipped pretrained policy for {env_id!r}; shipped: {sorted(PRETRAINED_FOR_ENV)}; "
                          f"pass a bundle path")
    d = PRETRAINED / name
    if not (d / "bundle").is_dir():
        raise ConfigError(f"{d / 'bundle'}: the pretrained bundle is missing; regenerate it with "
                          f"'tinker train --config configs/{TRAIN_CONFIG[name]}' and 'tinker export'")
    return d


def default_bundle(env_id: str) -> Path:
    """The shipped bundle of ``env_id``."""
    return pretrained_dir(env_id) / "bundle"


def finetune_start(env_id: str) -> tuple[Path, Path | None]:
    """What online RL fine-tuning of ``env_id``'s shipped policy starts from: ``(checkpoint, demonstrations)``.
    A policy learned by imitation ships an RL prior (``pretrained/<name>/rl_prior``, made by ``tinker prior``: SAC
    with the imitation policy as its actor, and the expert's demonstrations); an RL policy its own checkpoint."""
    d = pretrained_dir(env_id)
    prior = d / "rl_prior"
    if (prior / "checkpoint").is_dir():
        return prior / "checkpoint", prior / "demonstrations"
    return d / "checkpoint", None
