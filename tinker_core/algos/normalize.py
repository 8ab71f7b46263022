"""Running observation and reward normalization (the VecNormalize statistics, as torch buffers);
dict observations get statistics per float field (`DictObsNormalizer`)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from tinker_core.errors import ConfigError
from tinker_core.spec import AnySpec, DictSpec, Spec


class RunningMeanStd(nn.Module):
    """Parallel-variance running mean/std (Chan et al.), float64 so long runs stay exact."""

    def __init__(self, shape: tuple[int, ...] = (), epsilon: float = 1e-4):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(epsilon, dtype=torch.float64))

    def update(self, x: np.ndarray) -> None:
        x = torch.as_tensor(np.asarray(x, dtype=np.float64))
        b_mean, b_var, b_count = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta = b_mean - self.mean
        tot = self.count + b_count
        new_mean = self.mean + delta * b_count / tot
        m2 = self.var * self.count + b_var * b_count + delta.square() * self.count * b_count / tot
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / tot)
        self.count.copy_(tot)


class ObsNormalizer(nn.Module):
    """``clip((obs - mean) / sqrt(var + eps), -clip, clip)``; statistics update only while training."""

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.rms = RunningMeanStd(shape)
        self.clip, self.eps = clip, eps

    def update(self, obs: np.ndarray) -> None:
        """Add a batch of raw observations to the statistics."""
        self.rms.update(np.asarray(obs))

    def normalize_np(self, obs: np.ndarray) -> np.ndarray:
        mean = self.rms.mean.numpy()
        std = np.sqrt(self.rms.var.numpy() + self.eps)
        return np.clip((obs - mean) / std, -self.clip, self.clip).astype(np.float32)

    def constants(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, 1/std) as float32 constants, for folding into an exported graph."""
        mean = self.rms.mean.float()
        inv_std = (1.0 / torch.sqrt(self.rms.var + self.eps)).float()
        return mean, inv_std

    def stats(self) -> dict:
        """The statistics as checkpoint / bundle metadata (what `tinker_deploy.export` reads)."""
        return {"obs_mean": self.rms.mean.tolist(), "obs_var": self.rms.var.tolist(),
                "obs_count": float(self.rms.count), "clip": self.clip, "eps": self.eps}

    def folded(self) -> nn.Module:
        """The normalization as graph constants, to put in front of the exported perception."""
        return FoldedNormalize(*self.constants(), self.clip)


def normalized_keys(spec: DictSpec) -> list[str]:
    """The fields of a dict observation that are normalized: float vectors (images and integer fields stay raw)."""
    return [k for k, s in spec.items()
            if isinstance(s, Spec) and len(s.shape) <= 1 and np.dtype(s.dtype).kind == "f"]


class DictObsNormalizer(nn.Module):
    """`ObsNormalizer` per float vector field of a dict observation (each key its own statistics, as
    SB3's VecNormalize with ``norm_obs_keys``); the other fields pass through unchanged."""

    def __init__(self, spec: DictSpec, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        keys = normalized_keys(spec)
        if not keys:
            raise ConfigError(f"normalize_obs: the dict observation {spec.describe()} has no float vector field "
                              "to normalize; set normalize_obs: false")
        self.norms = nn.ModuleDict({k: ObsNormalizer(tuple(spec[k].shape), clip, eps) for k in keys})  # type: ignore[union-attr]
        self.clip, self.eps = clip, eps

    def update(self, obs: Mapping[str, np.ndarray]) -> None:
        for k, n in self.norms.items():
            n.update(obs[k])

    def normalize_np(self, obs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = dict(obs)
        for k, n in self.norms.items():
            out[k] = n.normalize_np(np.asarray(obs[k]))
        return out

    def stats(self) -> dict:
        per = {k: n.stats() for k, n in self.norms.items()}
        out: dict = {f: {k: v[f] for k, v in per.items()} for f in ("obs_mean", "obs_var", "obs_count")}
        return {**out, "clip": self.clip, "eps": self.eps}

    def folded(self) -> nn.Module:
        return FoldedDictNormalize({k: n.constants() for k, n in self.norms.items()}, self.clip)


def obs_normalizer(spec: AnySpec) -> ObsNormalizer | DictObsNormalizer:
    """The normalizer for ``spec``: one set of statistics for a vector, one per float field for a dict."""
    if isinstance(spec, DictSpec):
        return DictObsNormalizer(spec)
    return ObsNormalizer(spec.shape)


class RewardNormalizer(nn.Module):
    """Scales rewards by the running std of the discounted return (as SB3's VecNormalize does)."""

    def __init__(self, n_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.rms = RunningMeanStd(())
        self.register_buffer("returns", torch.zeros(n_envs, dtype=torch.float64))
        self.gamma, self.clip, self.eps = gamma, clip, eps

    def __call__(self, reward: np.ndarray, done: np.ndarray) -> np.ndarray:  # type: ignore[override]
        ret = self.returns.numpy()
        ret[:] = ret * self.gamma + reward
        self.rms.update(ret.copy())
        ret[done] = 0.0
        std = float(np.sqrt(self.rms.var.item() + self.eps))
        return np.clip(reward / std, -self.clip, self.clip).astype(np.float32)


class FoldedNormalize(nn.Module):
    """Observation normalization as graph constants: what the exported perception starts with."""

    def __init__(self, mean: torch.Tensor, inv_std: torch.Tensor, clip: float):
        super().__init__()
        self.register_buffer("mean", mean.detach().clone().float())
        self.register_buffer("inv_std", inv_std.detach().clone().float())
        self.clip = float(clip)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp((x.float() - self.mean) * self.inv_std, -self.clip, self.clip)


class FoldedDictNormalize(nn.Module):
    """`FoldedNormalize` per normalized field of a dict observation; the other fields pass through."""

    def __init__(self, constants: Mapping[str, tuple[torch.Tensor, torch.Tensor]], clip: float):
        super().__init__()
        self.norms = nn.ModuleDict({k: FoldedNormalize(m, s, clip) for k, (m, s) in constants.items()})

    def forward(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(obs)
        for k, n in self.norms.items():
            out[k] = n(obs[k])
        return out
