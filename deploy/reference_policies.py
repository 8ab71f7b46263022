"""Small reference policies for the deploy tests, benchmarks and examples (torch).

Shaped like what ``algo.deployable_parts()`` returns: an MLP obs -> action, and a CNN+MLP policy on
image+state observations as ``{"perception": obs -> features, "actor": features -> action}``, with the
``export_metadata()`` dict that goes with each. The CNN is Nature-DQN-sized (32-64-64 filters).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tinker_core.spec import DictSpec, Spec

IIWA_JOINTS = [f"lbr_iiwa_joint_{i}" for i in range(1, 8)]


class MLPPolicy(nn.Module):
    """obs float32[obs_dim] -> tanh action float32[act_dim]."""

    def __init__(self, obs_dim: int = 10, act_dim: int = 4, hidden: int = 256):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, act_dim), nn.Tanh())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class CNNPerception(nn.Module):
    """{"image": uint8[H,W,3], "state": float32[n]} -> features float32[feature_dim] (Nature-DQN trunk)."""

    def __init__(self, image: int = 84, state_dim: int = 7, feature_dim: int = 256):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(3, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            n = self.conv(torch.zeros(1, 3, image, image)).shape[1]
        self.fc = nn.Sequential(nn.Linear(n + state_dim, feature_dim), nn.ReLU())

    def forward(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        x = obs["image"].permute(0, 3, 1, 2).float() / 255.0
        return self.fc(torch.cat([self.conv(x), obs["state"]], dim=1))


class Actor(nn.Module):
    """features -> tanh action."""

    def __init__(self, feature_dim: int = 256, act_dim: int = 7, hidden: int = 256):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(feature_dim, hidden), nn.ReLU(), nn.Linear(hidden, act_dim), nn.Tanh())

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)


def _chain() -> dict:
    return {"mode": "delta", "clip": 1.0, "scale": 1.0, "max_delta": 0.1, "max_step": 0.15, "alpha": 1.0}


def mlp_policy(obs_dim: int = 10, act_dim: int = 4, hidden: int = 256, seed: int = 0) -> tuple[nn.Module, dict[str, Any]]:
    """(policy module, export metadata) for an MLP on a flat observation."""
    torch.manual_seed(seed)
    joints = [f"joint_{i}" for i in range(1, act_dim + 1)] if act_dim != 7 else list(IIWA_JOINTS)
    meta = {
        "obs_spec": Spec((obs_dim,), "float32"),
        "action_spec": Spec((act_dim,), "float32", -1.0, 1.0),
        "normalization": {"mean": [0.0] * obs_dim, "std": [1.0] * obs_dim, "clip": 10.0, "folded": True},
        "training_step": 1000, "env_id": "reference/mlp",
        "obs_terms": [{"name": "state", "size": obs_dim, "unit": "", "history": 1}],
        "action_terms": [{"name": j, "size": 1, "unit": "rad"} for j in joints],
        "joint_names": joints, "action_chain_config": _chain(), "control_period": 0.02,
    }
    return MLPPolicy(obs_dim, act_dim, hidden).eval(), meta


def cnn_policy(image: int = 84, state_dim: int = 7, act_dim: int = 7, feature_dim: int = 256,
               seed: int = 0) -> tuple[dict[str, nn.Module], dict[str, Any]]:
    """({"perception", "actor"}, export metadata) for a CNN+MLP policy on image+state observations."""
    torch.manual_seed(seed)
    joints = list(IIWA_JOINTS) if act_dim == 7 else [f"joint_{i}" for i in range(1, act_dim + 1)]
    meta = {
        "obs_spec": DictSpec({"image": Spec((image, image, 3), "uint8", 0, 255),
                              "state": Spec((state_dim,), "float32")}),
        "action_spec": Spec((act_dim,), "float32", -1.0, 1.0),
        "feature_spec": Spec((feature_dim,), "float32"),
        "training_step": 5000, "env_id": "reference/cnn",
        "obs_terms": [{"name": "image", "size": image * image * 3, "unit": "px", "frame": "camera"},
                      {"name": "joint_pos", "size": state_dim, "unit": "rad"}],
        "action_terms": [{"name": j, "size": 1, "unit": "rad"} for j in joints],
        "joint_names": joints, "action_chain_config": _chain(), "control_period": 0.02,
    }
    parts = {"perception": CNNPerception(image, state_dim, feature_dim).eval(), "actor": Actor(feature_dim, act_dim).eval()}
    return parts, meta
