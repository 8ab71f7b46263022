"""Actor and critic networks shared by the algorithms (after a perception module's features)."""

from __future__ import annotations

import math

import torch
from torch import nn

from tinker_core.nn.encoders import activation, mlp

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class EnsembleLinear(nn.Module):
    """``E`` independent linear layers evaluated in one batched matmul (``baddbmm``)."""

    def __init__(self, n: int, d_in: int, d_out: int):
        super().__init__()
        bound = 1.0 / math.sqrt(d_in)  # nn.Linear's default init, per member
        self.weight = nn.Parameter(torch.empty(n, d_in, d_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, 1, d_out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        w, b = (self.weight.detach(), self.bias.detach()) if detach_params else (self.weight, self.bias)
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(w.shape[0], -1, -1)
        return torch.baddbmm(b, x, w)


class EnsembleQ(nn.Module):
    """``n`` Q-functions Q(features, action) in one network: returns ``[n, B]``.

    Twin critics evaluated together cost one kernel per layer instead of two.
    """

    def __init__(self, n: int, d_in: int, hidden: list[int], act: str = "relu"):
        super().__init__()
        dims = [d_in, *hidden, 1]
        self.layers = nn.ModuleList(EnsembleLinear(n, a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.act = activation(act)()

    def forward(self, feat: torch.Tensor, action: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        x = torch.cat([feat, action], dim=-1)
        for i, layer in enumerate(self.layers):
            x = layer(x, detach_params)
            if i < len(self.layers) - 1:
                x = self.act(x)
        return x.squeeze(-1)


class SquashedGaussianActor(nn.Module):
    """SAC's actor: a Gaussian over pre-tanh actions; tanh squashes to [-1, 1]."""

    def __init__(self, d_in: int, hidden: list[int], act_dim: int, act: str = "relu"):
        super().__init__()
        self.trunk = mlp(d_in, hidden, None, act)
        d = hidden[-1] if hidden else d_in
        self.mu = nn.Linear(d, act_dim)
        self.log_std = nn.Linear(d, act_dim)

    def dist_params(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(feat)
        return self.mu(h), self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, feat: torch.Tensor, gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized sample in [-1, 1] and its log-probability (with the tanh correction)."""
        mu, log_std = self.dist_params(feat)
        std = log_std.exp()
        eps = torch.randn(mu.shape, generator=gen, device=mu.device) if gen is not None else torch.randn_like(mu)
        u = mu + std * eps
        a = torch.tanh(u)
        logp = (-0.5 * eps.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - torch.log1p(-a.square() + 1e-6).sum(-1)
        return a, logp

    def deterministic(self, feat: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mu(self.trunk(feat)))


class GaussianActor(nn.Module):
    """PPO's continuous actor: state-dependent mean, state-independent log std (env units)."""

    def __init__(self, d_in: int, hidden: list[int], act_dim: int, act: str = "tanh", log_std_init: float = 0.0):
        super().__init__()
        self.mean = mlp(d_in, hidden, act_dim, act)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(log_std_init)))

    def log_prob_entropy(self, feat: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu = self.mean(feat)
        log_std = self.log_std.expand_as(mu)
        z = (action - mu) * torch.exp(-log_std)
        logp = (-0.5 * z.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        ent = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
        return logp, ent


class CategoricalActor(nn.Module):
    """PPO's discrete actor: logits."""

    def __init__(self, d_in: int, hidden: list[int], n: int, act: str = "tanh"):
        super().__init__()
        self.logits = mlp(d_in, hidden, n, act)

    def log_prob_entropy(self, feat: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logp_all = torch.log_softmax(self.logits(feat), dim=-1)
        logp = logp_all.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        ent = -(logp_all.exp() * logp_all).sum(-1)
        return logp, ent


class ScaledTanhHead(nn.Module):
    """Deploy head for SAC: features -> tanh(mean) scaled to the env's action range."""

    def __init__(self, actor: SquashedGaussianActor, low: torch.Tensor, high: torch.Tensor):
        super().__init__()
        self.trunk, self.mu = actor.trunk, actor.mu
        self.register_buffer("low", low.detach().clone().float().cpu())
        self.register_buffer("high", high.detach().clone().float().cpu())

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        a = torch.tanh(self.mu(self.trunk(feat)))
        return self.low + (a + 1.0) * 0.5 * (self.high - self.low)


class ClippedMeanHead(nn.Module):
    """Deploy head for PPO (continuous): features -> mean clipped to the env's action range."""

    def __init__(self, mean: nn.Module, low: torch.Tensor, high: torch.Tensor):
        super().__init__()
        self.mean = mean
        self.register_buffer("low", low.detach().clone().float().cpu())
        self.register_buffer("high", high.detach().clone().float().cpu())

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        return torch.minimum(torch.maximum(self.mean(feat), self.low), self.high)


class ArgmaxHead(nn.Module):
    """Deploy head for DQN / discrete PPO: features -> int64 env action (argmax + the space's start)."""

    def __init__(self, scores: nn.Module, offset: int):
        super().__init__()
        self.scores = scores
        self.offset = int(offset)

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        return torch.argmax(self.scores(feat), dim=-1) + self.offset
