"""Actor and critic networks shared by the algorithms (after a perception module's features)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tinker_core.nn.encoders import activation, mlp

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


def seq_forward(seq: nn.Sequential | list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    """``seq(x)`` without ``nn.Module.__call__`` per layer (hooks are not run): for MLPs this
    small, the per-call bookkeeping costs as much as the layer."""
    for m in seq:
        t = type(m)
        if t is nn.Linear:
            x = F.linear(x, m.weight, m.bias)
        elif t is nn.Tanh:
            x = torch.tanh(x)
        elif t is nn.ReLU:
            x = torch.relu(x)
        else:
            x = m(x)
    return x


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


def noise_like(mu: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
    """Standard normal noise shaped like ``mu``, from ``gen`` when given."""
    return torch.randn(mu.shape, generator=gen, device=mu.device) if gen is not None else torch.randn_like(mu)


def squashed_sample(mu: torch.Tensor, log_std: torch.Tensor, gen: torch.Generator | None,
                    eps: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``a = tanh(mu + std * eps)`` and its log-probability (Gaussian log-density minus
    ``log(1 - a^2 + 1e-6)``, as Stable-Baselines3), plus ``eps`` and ``std`` for a hand-written backward.
    ``eps`` (standard normal, shaped like ``mu``) is drawn from ``gen`` unless given."""
    std = log_std.exp()
    if eps is None:
        eps = noise_like(mu, gen)
    a = torch.tanh(mu + std * eps)
    logp = (-0.5 * eps.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    logp = logp - torch.log1p(-a.square() + 1e-6).sum(-1)
    return a, logp, eps, std


class SquashedGaussianActor(nn.Module):
    """SAC's actor: a Gaussian over pre-tanh actions; tanh squashes to [-1, 1]."""

    def __init__(self, d_in: int, hidden: list[int], act_dim: int, act: str = "relu"):
        super().__init__()
        self.trunk = mlp(d_in, hidden, None, act)
        d = hidden[-1] if hidden else d_in
        self.mu = nn.Linear(d, act_dim)
        self.log_std = nn.Linear(d, act_dim)

    def dist_params(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = seq_forward(self.trunk, feat)
        return seq_forward((self.mu,), h), seq_forward((self.log_std,), h).clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, feat: torch.Tensor, gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized sample in [-1, 1] and its log-probability (with the tanh correction)."""
        a, logp, _, _ = squashed_sample(*self.dist_params(feat), gen)
        return a, logp

    def sample_action(self, feat: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        """``sample(feat, gen)[0]`` without the log-probability (acting)."""
        mu, log_std = self.dist_params(feat)
        return torch.tanh(mu + log_std.exp() * noise_like(mu, gen))

    def deterministic(self, feat: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mu(self.trunk(feat)))


class GSDESquashedActor(nn.Module):
    """SAC's actor with gSDE (Raffin et al. 2021), as Stable-Baselines3's SAC ``use_sde`` with its defaults (full_std,
    no expln, latent features learned, mean clipped to [-2, 2], tanh squashing).

    The pre-tanh action is ``mean + latent @ M`` with ``M ~ N(0, exp(log_std)^2)`` of shape [latent, act_dim]:
    ``M`` is held while acting (see `SAC`) and drawn anew, reparameterized, at each gradient step (so the actor
    loss reaches ``log_std`` through the noise too). Its log-density is the Gaussian's of std
    ``sqrt((latent^2) @ exp(log_std)^2 + 1e-6)`` minus tanh's ``log(1 - a^2 + 1e-6)``.
    """

    SDE_EPS = 1e-6
    CLIP_MEAN = 2.0

    def __init__(self, d_in: int, hidden: list[int], act_dim: int, act: str = "relu", log_std_init: float = -3.0):
        super().__init__()
        self.trunk = mlp(d_in, hidden, None, act)
        d = hidden[-1] if hidden else d_in
        self.mu = nn.Sequential(nn.Linear(d, act_dim), nn.Hardtanh(-self.CLIP_MEAN, self.CLIP_MEAN))
        self.log_std = nn.Parameter(torch.full((d, act_dim), float(log_std_init)))
        self.act_matrices: torch.Tensor | None = None
        """the exploration matrices while acting, [n_envs, latent, act_dim]"""
        self.train_matrix: torch.Tensor | None = None
        """this gradient step's matrix [latent, act_dim], a function of log_std"""

    def draw(self, n: int, gen: torch.Generator | None) -> torch.Tensor:
        """``n`` matrices ``exp(log_std) * eps`` (differentiable in ``log_std``), [n, latent, act_dim]."""
        eps = torch.randn((n, *self.log_std.shape), generator=gen).to(self.log_std.device)
        return self.log_std.exp() * eps

    def reset_acting_noise(self, n: int, gen: torch.Generator | None) -> None:
        with torch.no_grad():
            self.act_matrices = self.draw(n, gen)

    def reset_train_noise(self, gen: torch.Generator | None) -> None:
        """One matrix for the whole minibatch (SB3's ``reset_noise()`` before each gradient step)."""
        self.train_matrix = self.draw(1, gen)[0]

    def latent_mean(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = seq_forward(self.trunk, feat)
        return h, seq_forward(self.mu, h)

    def log_prob(self, latent: torch.Tensor, mean: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """log pi(tanh(u) | s) for pre-tanh actions ``u``."""
        var = torch.addmm(_as_tensor(self.SDE_EPS, latent), latent.square(), torch.exp(2.0 * self.log_std))
        logp = (-0.5 * (u - mean).square() / var - 0.5 * torch.log(var) - 0.5 * math.log(2 * math.pi)).sum(-1)
        return logp - torch.log1p(-torch.tanh(u).square() + 1e-6).sum(-1)

    def sample(self, feat: torch.Tensor, gen: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """A training sample in [-1, 1] with this step's matrix (`reset_train_noise`) and its log-probability."""
        if self.train_matrix is None:
            self.reset_train_noise(gen)
        latent, mean = self.latent_mean(feat)
        u = mean + latent @ self.train_matrix  # type: ignore[operator]
        return torch.tanh(u), self.log_prob(latent, mean, u)

    def sample_action(self, feat: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
        """An exploring action with the held acting matrices (one per row when there are as many)."""
        n = feat.shape[0]
        if self.act_matrices is None:
            self.reset_acting_noise(n, gen)
        latent, mean = self.latent_mean(feat)
        m = self.act_matrices
        noise = (torch.bmm(latent.unsqueeze(1), m).squeeze(1) if m.shape[0] == n and n > 1  # type: ignore[union-attr]
                 else latent @ m[0])  # type: ignore[index]
        return torch.tanh(mean + noise)

    def deterministic(self, feat: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.latent_mean(feat)[1])


class GaussianActor(nn.Module):
    """PPO's continuous actor: state-dependent mean, Gaussian noise (env units).

    Plain: a state-independent log std per action dimension. gSDE (``sde=True``, Raffin et al.
    2021, as Stable-Baselines3's ``use_sde`` with its defaults full_std, no expln, latent features
    not learned): the noise is ``latent @ M`` with ``M ~ N(0, exp(log_std)^2)`` of shape
    [latent, act_dim], held for several steps, so the action's std is
    ``sqrt((latent^2) @ exp(log_std)^2 + 1e-6)`` and depends on the state.
    """

    SDE_EPS = 1e-6

    def __init__(self, d_in: int, hidden: list[int], act_dim: int, act: str = "tanh", log_std_init: float = 0.0,
                 sde: bool = False):
        super().__init__()
        self.mean = mlp(d_in, hidden, act_dim, act)
        self.sde = bool(sde)
        latent = hidden[-1] if hidden else d_in
        shape = (latent, act_dim) if self.sde else (act_dim,)
        self.log_std = nn.Parameter(torch.full(shape, float(log_std_init)))

    def latent_mean(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(last hidden layer, mean action): the latent feeds gSDE's noise."""
        layers = list(self.mean)
        h = seq_forward(layers[:-1], feat)
        return h, seq_forward(layers[-1:], h)

    def mean_action(self, feat: torch.Tensor) -> torch.Tensor:
        return seq_forward(self.mean, feat)

    def std(self, latent: torch.Tensor, weight_var: torch.Tensor | None = None) -> torch.Tensor:
        """Per-sample action std [B, act_dim] (gSDE) or [act_dim] (plain). ``weight_var``:
        ``exp(log_std)^2`` when the caller already has it (it is constant during a rollout)."""
        if self.sde:
            if weight_var is None:
                weight_var = torch.exp(2.0 * self.log_std)
            return torch.sqrt(torch.addmm(_as_tensor(self.SDE_EPS, latent), latent.detach().square(), weight_var))
        return self.log_std.exp()

    def sde_noise(self, latent: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
        """gSDE noise ``latent @ M``: one matrix per row when there are as many, else the first for all."""
        if matrices.shape[0] == latent.shape[0] and latent.shape[0] > 1:
            return torch.bmm(latent.unsqueeze(1), matrices).squeeze(1)
        return latent @ matrices[0]

    def log_prob_entropy(self, feat: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        latent, mu = self.latent_mean(feat)
        if self.sde:
            log_std = torch.log(self.std(latent))
        else:
            log_std = self.log_std.expand_as(mu)
        z = (action - mu) * torch.exp(-log_std)
        logp = (-0.5 * z.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        ent = (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)
        return logp, ent


def _as_tensor(v: float, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(v, dtype=like.dtype, device=like.device)


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
