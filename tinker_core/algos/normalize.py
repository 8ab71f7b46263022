"""Running observation and reward normalization (the VecNormalize statistics, as torch buffers)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


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

    def normalize_np(self, obs: np.ndarray) -> np.ndarray:
        mean = self.rms.mean.numpy()
        std = np.sqrt(self.rms.var.numpy() + self.eps)
        return np.clip((obs - mean) / std, -self.clip, self.clip).astype(np.float32)

    def constants(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, 1/std) as float32 constants, for folding into an exported graph."""
        mean = self.rms.mean.float()
        inv_std = (1.0 / torch.sqrt(self.rms.var + self.eps)).float()
        return mean, inv_std


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
