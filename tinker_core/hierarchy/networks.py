"""The networks of a hierarchical policy, one per level: the high level over options, the learned options
(one network conditioned on a one-hot option), the learned termination beta(s, o), and the deterministic
heads each level is deployed as (plain tensor graphs: ONNX-exportable)."""

from __future__ import annotations

import math

import torch
from torch import nn

from tinker_core.algos.networks import CategoricalActor, GaussianActor
from tinker_core.nn import mlp


def one_hot(option: torch.Tensor, k: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(option.long(), k).to(torch.float32)


def with_option(obs: torch.Tensor, option: torch.Tensor, k: int) -> torch.Tensor:
    """``obs ⊕ one_hot(option)``: what the option-conditioned networks read (and the low level's ONNX input)."""
    return torch.cat([obs, one_hot(option, k)], dim=-1)


def _ortho(modules: list[nn.Module], out: nn.Linear | None, out_gain: float) -> None:
    for mod in modules:
        for m in mod.modules():
            if isinstance(m, nn.Linear):
                nn.init.orthogonal_(m.weight, math.sqrt(2))
                nn.init.zeros_(m.bias)
    if out is not None:
        nn.init.orthogonal_(out.weight, out_gain)


class HighLevel(nn.Module):
    """pi(o | s) over K options (logits) and Q(s, o) for every option; V(s) = sum_o pi(o|s) Q(s, o)."""

    def __init__(self, obs_dim: int, k: int, hidden: list[int], act: str):
        super().__init__()
        self.k = k
        self.pi = CategoricalActor(obs_dim, hidden, k, act)
        self.q = mlp(obs_dim, hidden, k, act)
        _ortho([self.pi, self.q], None, 1.0)
        nn.init.orthogonal_(self.pi.logits[-1].weight, 0.01)
        nn.init.orthogonal_(self.q[-1].weight, 1.0)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(self.pi.logits(obs), -1).detach()
        return (probs * self.q(obs)).sum(-1)


class LearnedOptions(nn.Module):
    """K learned options as one network on ``obs ⊕ one_hot(o)``: an actor (Gaussian or categorical, as the env's
    actions) and a value V(s, o) for the option's own PPO."""

    def __init__(self, obs_dim: int, k: int, hidden: list[int], act: str, discrete: bool, act_dim: int,
                 n_actions: int, log_std_init: float):
        super().__init__()
        self.k, self.discrete = k, discrete
        d = obs_dim + k
        if discrete:
            self.pi: nn.Module = CategoricalActor(d, hidden, n_actions, act)
            out = self.pi.logits[-1]
        else:
            self.pi = GaussianActor(d, hidden, act_dim, act, log_std_init)
            out = self.pi.mean[-1]
        self.vf = mlp(d, hidden, 1, act)
        _ortho([self.pi, self.vf], out, 0.01)
        nn.init.orthogonal_(self.vf[-1].weight, 1.0)


class Termination(nn.Module):
    """beta(s, o): the probability that option o ends in state s (option-critic's termination function)."""

    def __init__(self, obs_dim: int, k: int, hidden: list[int], act: str):
        super().__init__()
        self.k = k
        self.net = mlp(obs_dim + k, hidden, 1, act)
        _ortho([self.net], self.net[-1], 0.01)

    def forward(self, obs_opt: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(obs_opt)).squeeze(-1)


# -- deployed heads -----------------------------------------------------------------------------------
class HighArgmax(nn.Module):
    """Deployed high level: obs -> [option index] (int64, shape (1,)), the most probable option."""

    def __init__(self, high: HighLevel):
        super().__init__()
        self.logits = high.pi.logits

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.argmax(self.logits(obs), dim=-1, keepdim=True)


class LearnedLowHead(nn.Module):
    """Deployed learned options: ``obs ⊕ one_hot(o)`` -> deterministic env action (mean clipped to the bounds,
    or the argmax action plus the space's offset)."""

    def __init__(self, options: LearnedOptions, low: torch.Tensor | None, high: torch.Tensor | None, offset: int = 0):
        super().__init__()
        self.discrete = options.discrete
        self.net = options.pi.logits if options.discrete else options.pi.mean
        self.offset = offset
        if not self.discrete:
            self.register_buffer("low", low.detach().clone())
            self.register_buffer("high", high.detach().clone())

    def forward(self, obs_opt: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return torch.argmax(self.net(obs_opt), dim=-1) + self.offset
        return torch.minimum(torch.maximum(self.net(obs_opt), self.low), self.high)


class SkillLowHead(nn.Module):
    """Deployed scripted skills: ``obs ⊕ one_hot(o)`` -> the chosen skill's action."""

    def __init__(self, skills: nn.Module, obs_dim: int):
        super().__init__()
        self.skills, self.obs_dim = skills, obs_dim

    def forward(self, obs_opt: torch.Tensor) -> torch.Tensor:
        obs = obs_opt[..., :self.obs_dim]
        option = torch.argmax(obs_opt[..., self.obs_dim:], dim=-1)
        return self.skills(obs, option)


class TerminationHead(nn.Module):
    """Deployed termination: ``obs ⊕ one_hot(o)`` -> [beta] (the runtime ends the option when beta > 0.5)."""

    def __init__(self, term: Termination):
        super().__init__()
        self.term = term

    def forward(self, obs_opt: torch.Tensor) -> torch.Tensor:
        return self.term(obs_opt).unsqueeze(-1)
