"""`SACUpdate`: SAC's gradient step for MLP actor and critics with the backward passes written out.

The losses are those of `SAC`'s autograd path (Stable-Baselines3's, term for term); here each
gradient is an explicit product, so no autograd graph is built and every product runs in the
layout the BLAS is fast at. On one CPU thread that matters: the critics' last layer as a batched
``[E, B, H] x [E, H, 1]`` matmul costs 4x a ``[E, 1, H] x [E, H, B]`` one, and its backward's
outer product 8x a broadcast multiply.

FLOPs: per step, 15 products the size of ``B x H x H`` for two critics (forward: the actor on obs
and next obs, the target critics, the critics, the critics on the actor's action; backward: the
critics' weights and inputs, the actor's weights and inputs, and the actor loss through the
critics' inputs, where each sample goes back through its argmin critic only: one network's
products instead of two, as the gradient of a min is zero for the others).

Used when both perception modules are `Flatten` (no parameters), the MLPs use relu or tanh and the
critic runs in fp32; tests/algos/test_sac_update.py holds it to SB3's step (and the autograd path).
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from tinker_core.algos.optim import adam_step
from tinker_core.algos.networks import (
    LOG_STD_MAX, LOG_STD_MIN, EnsembleQ, GSDESquashedActor, SquashedGaussianActor, noise_like, squashed_sample,
)

_FORWARD = {nn.ReLU: torch.relu_, nn.Tanh: torch.tanh_}
Layer = tuple[torch.Tensor, torch.Tensor]  # (weight, bias): parameters, held directly (no module lookups)


def _backward_act(kind: type, g: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Gradient before the activation from the gradient ``g`` after it and its output ``h``."""
    if kind is nn.ReLU:
        return torch.ops.aten.threshold_backward(g, h, 0.0)
    return g * (1.0 - h * h)


def _grad_weight(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``g.t() @ x`` (a linear layer's weight gradient); for a narrow input (few observation
    dimensions) as ``(x.t() @ g).t()``, which the BLAS runs 5x faster than an output 3 columns wide."""
    if x.shape[1] < 16:
        return (x.t() @ g).t().contiguous()
    return g.t() @ x


class SACLosses(NamedTuple):
    """What one step reports: losses and statistics (tensors, no host sync) and |TD| per sample."""

    critic_loss: torch.Tensor
    actor_loss: torch.Tensor
    ent_coef: torch.Tensor
    entropy: torch.Tensor
    q_mean: torch.Tensor
    td_abs: torch.Tensor


class SACUpdate:
    """Forward and backward of the actor and the ensemble critic; writes each parameter's ``.grad``."""

    def __init__(self, actor: SquashedGaussianActor, critic: EnsembleQ, critic_target: EnsembleQ):
        lin = [m for m in actor.trunk if type(m) is nn.Linear]
        self.trunk: list[Layer] = [(m.weight, m.bias) for m in lin]
        self._heads(actor)
        self.critic: list[Layer] = [(m.weight, m.bias) for m in critic.layers]
        self.target: list[Layer] = [(m.weight, m.bias) for m in critic_target.layers]
        self.actor_act = next(type(m) for m in actor.trunk if type(m) is not nn.Linear)
        self.critic_act = type(critic.act)

    def _heads(self, actor: Any) -> None:
        self.mu: Layer = (actor.mu.weight, actor.mu.bias)
        self.log_std: Layer = (actor.log_std.weight, actor.log_std.bias)

    @staticmethod
    def of(actor: SquashedGaussianActor | GSDESquashedActor, critic: EnsembleQ,
           critic_target: EnsembleQ) -> "SACUpdate":
        """The written-out step for ``actor``'s kind: `GSDESACUpdate` for gSDE's actor, else `SACUpdate`."""
        cls = GSDESACUpdate if isinstance(actor, GSDESquashedActor) else SACUpdate
        return cls(actor, critic, critic_target)

    adam_step = staticmethod(adam_step)
    """The optimizer step this update's caller runs (`NativeSACUpdate` has its own)."""

    @staticmethod
    def polyak(dst: list[torch.Tensor], src: list[torch.Tensor], tau: float) -> None:
        """The target critics' Polyak update (`NativeSACUpdate` has its own)."""
        torch._foreach_lerp_(dst, src, tau)

    @staticmethod
    def supports(actor: SquashedGaussianActor, critic: EnsembleQ) -> bool:
        """Whether both networks are plain MLPs this class can differentiate (at least one hidden layer)."""
        layers = list(actor.trunk)
        lin, acts = layers[0::2], layers[1::2]
        kinds = {type(a) for a in acts}
        return (len(lin) >= 1 and len(lin) == len(acts) and all(type(m) is nn.Linear for m in lin)
                and len(kinds) == 1 and kinds <= set(_FORWARD) and type(critic.act) in _FORWARD
                and len(critic.layers) >= 2)

    # -- actor ---------------------------------------------------------------------------------------
    def trunk_forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The inputs of each trunk layer and the trunk's output."""
        act = _FORWARD[self.actor_act]
        hs = [x]
        for w, b in self.trunk:
            x = act(F.linear(x, w, b))
            hs.append(x)
        return hs

    def actor_forward(self, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """(inputs of each trunk layer and the trunk's output, mean, log std before the clamp)."""
        hs = self.trunk_forward(x)
        return hs, F.linear(hs[-1], *self.mu), F.linear(hs[-1], *self.log_std)

    def actor_backward(self, hs: list[torch.Tensor], g_mu: torch.Tensor, g_log_std: torch.Tensor) -> None:
        """Gradients of every actor parameter from those of the mean and the (unclamped) log std;
        ``hs`` may have more rows than the gradients (the first rows are used)."""
        n = g_mu.shape[0]
        h = hs[-1][:n]
        (wm, bm), (ws, bs) = self.mu, self.log_std
        wm.grad, bm.grad = g_mu.t() @ h, g_mu.sum(0)
        ws.grad, bs.grad = g_log_std.t() @ h, g_log_std.sum(0)
        self.trunk_backward(hs, torch.addmm(g_mu @ wm, g_log_std, ws))

    def trunk_backward(self, hs: list[torch.Tensor], g: torch.Tensor) -> None:
        """The trunk's parameter gradients from ``g``, that of its output (the first ``len(g)`` rows of ``hs``)."""
        n = g.shape[0]
        for i in range(len(self.trunk) - 1, -1, -1):
            w, b = self.trunk[i]
            g = _backward_act(self.actor_act, g, hs[i + 1][:n])
            w.grad, b.grad = _grad_weight(g, hs[i][:n]), g.sum(0)
            if i > 0:
                g = g @ w

    # -- critics -------------------------------------------------------------------------------------
    def critic_forward(self, net: list[Layer], x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """(inputs of each layer, ``[E, B]`` values) for ``x = [features, action]`` of shape [B, in]."""
        act = _FORWARD[self.critic_act]
        w, b = net[0]
        E = w.shape[0]
        hs = [x]
        h = act(torch.baddbmm(b, x.expand(E, *x.shape), w))
        hs.append(h)
        for w, b in net[1:-1]:
            h = act(torch.baddbmm(b, h, w))
            hs.append(h)
        w, b = net[-1]
        return hs, torch.baddbmm(b, w.transpose(1, 2), h.transpose(1, 2)).squeeze(1)

    def critic_weight_grads(self, net: list[Layer], hs: list[torch.Tensor], g_q: torch.Tensor) -> None:
        """Writes the weight gradients from ``g_q`` [E, B], the gradient of the values."""
        E = g_q.shape[0]
        w, b = net[-1]
        w.grad = torch.bmm(g_q.unsqueeze(1), hs[-1]).reshape(w.shape)
        b.grad = g_q.sum(1).reshape(b.shape)
        g = g_q.unsqueeze(-1) * w.transpose(1, 2)
        for i in range(len(net) - 2, -1, -1):
            w, b = net[i]
            g = _backward_act(self.critic_act, g, hs[i + 1])
            x = hs[i] if i > 0 else hs[0].expand(E, *hs[0].shape)
            w.grad, b.grad = torch.bmm(x.transpose(1, 2), g), g.sum(1, keepdim=True)
            if i > 0:
                g = torch.bmm(g, w.transpose(1, 2))

    def min_q_input_grad(self, net: list[Layer], hs: list[torch.Tensor], idx: torch.Tensor,
                         g_min: torch.Tensor) -> torch.Tensor:
        """Gradient of the input [B, in] from ``g_min`` [B], the gradient of ``min_i Q_i`` whose
        argmin is ``idx``: each row goes back through its argmin critic only."""
        w_last = net[-1][0]
        g_x = hs[0].new_empty(hs[0].shape)
        for e in range(w_last.shape[0]):
            rows = (idx == e).nonzero().squeeze(1)
            if rows.numel() == 0:
                continue
            g = g_min.index_select(0, rows).unsqueeze(1) * w_last[e, :, 0]
            for i in range(len(net) - 2, -1, -1):
                g = _backward_act(self.critic_act, g, hs[i + 1][e].index_select(0, rows))
                g = g @ net[i][0][e].t()
            g_x.index_copy_(0, rows, g)
        return g_x

    # -- one step ------------------------------------------------------------------------------------
    def losses_and_grads(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor,
                         rewards: torch.Tensor, dones: torch.Tensor, weights: torch.Tensor | None,
                         log_ent_coef: torch.Tensor, learn_ent_coef: bool, target_entropy: float, gamma: float,
                         gen: torch.Generator | None, step_critic: Callable[[], None]) -> SACLosses:
        """The critic's gradients, then ``step_critic()`` (the actor loss sees the stepped critic, as
        in SB3), then the actor's and (with ``learn_ent_coef``) the entropy coefficient's gradients.
        ``obs`` and ``next_obs`` are features (the actor's and the critics' alike)."""
        B = obs.shape[0]
        hs_a, a_all, logp_all, saved = self.sample(torch.cat([obs, next_obs]), B, gen)
        a_pi, logp_pi, next_a, next_logp = a_all[:B], logp_all[:B], a_all[B:], logp_all[B:]
        ent_coef = log_ent_coef.detach().exp()
        _, tq = self.critic_forward(self.target, torch.cat([next_obs, next_a], dim=-1))
        target = rewards + (1.0 - dones) * gamma * (tq.min(0).values - ent_coef * next_logp)
        # critic: 0.5 * sum over critics of the mean squared TD error
        hs_c, q = self.critic_forward(self.critic, torch.cat([obs, actions], dim=-1))
        td = q - target
        g_q = td * (1.0 / B) if weights is None else td * (weights * (1.0 / B))
        per = td.square() if weights is None else td.square() * weights
        critic_loss = 0.5 * per.mean(1).sum()
        self.critic_weight_grads(self.critic, hs_c, g_q)
        step_critic()
        # actor: mean(ent_coef * logp - min_i Q_i(s, a_pi)) through the stepped critic's input
        hs_p, q_pi = self.critic_forward(self.critic, torch.cat([obs, a_pi], dim=-1))
        q_min, idx = q_pi.min(0)
        actor_loss = (ent_coef * logp_pi - q_min).mean()
        g_x = self.min_q_input_grad(self.critic, hs_p, idx, q_min.new_full((B,), -1.0 / B))
        k = ent_coef / B  # d actor_loss / d logp
        a2 = a_pi.square()
        g_a = g_x[:, obs.shape[1]:] + k * (2.0 * a_pi) / (1.0 - a2 + 1e-6)  # + logp's tanh correction
        self.actor_grads(hs_a, g_a * (1.0 - a2), k, saved)
        if learn_ent_coef:
            log_ent_coef.grad = -(logp_pi + target_entropy).mean().reshape(log_ent_coef.shape)
        return SACLosses(critic_loss, actor_loss, ent_coef.squeeze(), -logp_pi.mean(), q.mean(),
                         td.abs().max(0).values)

    def sample(self, x2: torch.Tensor, B: int, gen: torch.Generator | None
               ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        """The actor on ``x2 = [obs; next_obs]`` in one pass, its squashed samples (noise drawn for obs, then
        next obs) and their log-probabilities: (trunk activations, actions, logp, what `actor_grads` needs)."""
        hs_a, mu, ls_raw = self.actor_forward(x2)
        log_std = ls_raw.clamp(LOG_STD_MIN, LOG_STD_MAX)
        eps = torch.cat([noise_like(mu[:B], gen), noise_like(mu[B:], gen)])
        a_all, logp_all, eps, std = squashed_sample(mu, log_std, gen, eps)
        return hs_a, a_all, logp_all, (eps, std, ls_raw)

    def actor_grads(self, hs: list[torch.Tensor], g_u: torch.Tensor, k: torch.Tensor,
                    saved: tuple[torch.Tensor, ...]) -> None:
        """Every actor parameter's gradient from ``g_u`` [B, A] (the actor loss's gradient at the pre-tanh
        actions of obs, through the critics and the tanh correction) and ``k`` (its gradient per logp term)."""
        eps, std, ls_raw = saved
        B = g_u.shape[0]
        ls_b = ls_raw[:B]
        g_log_std = (g_u * eps[:B] * std[:B] - k) * ((ls_b >= LOG_STD_MIN) & (ls_b <= LOG_STD_MAX))
        self.actor_backward(hs, g_u, g_log_std)

    def train_step(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor, rewards: torch.Tensor,
                   dones: torch.Tensor, weights: torch.Tensor | None, log_ent_coef: torch.Tensor,
                   ent_opt: torch.optim.Optimizer | None, target_entropy: float, gamma: float,
                   gen: torch.Generator | None, critic_opt: torch.optim.Optimizer, actor_opt: torch.optim.Optimizer,
                   polyak: tuple[list[torch.Tensor], list[torch.Tensor], float] | None) -> SACLosses:
        """One whole step as `SAC` takes it: `losses_and_grads` on the flattened observations with the
        critic's Adam step in between, the actor's Adam step, the entropy coefficient's (with ``ent_opt``:
        it is learned) and, given ``polyak = (targets, sources, tau)``, the target update."""
        return train_step_in_sequence(self, obs, actions, next_obs, rewards, dones, weights, log_ent_coef, ent_opt,
                                      target_entropy, gamma, gen, critic_opt, actor_opt, polyak)


class GSDESACUpdate(SACUpdate):
    """`SACUpdate` for gSDE's actor (`GSDESquashedActor`): the same step, with one noise matrix
    ``M = exp(log_std) * E`` per step (drawn by the actor from the step's generator, as the autograd path's
    ``reset_train_noise``) for the actions of obs and of next obs. Per row, with ``h`` the trunk's output:
    ``m = hardtanh(W_mu h + b, -2, 2)``, ``n = h M``, ``a = tanh(m + n)``, ``var = 1e-6 + h^2 exp(2 log_std)``,
    ``logp = sum(-n^2 / (2 var) - log(var) / 2 - log(2 pi) / 2) - sum log(1 - a^2 + 1e-6)``."""

    def _heads(self, actor: Any) -> None:
        self.gsde_actor: GSDESquashedActor = actor
        self.mu = (actor.mu[0].weight, actor.mu[0].bias)
        self.log_std_param: torch.Tensor = actor.log_std

    def sample(self, x2: torch.Tensor, B: int, gen: torch.Generator | None
               ) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
        hs_a = self.trunk_forward(x2)
        h = hs_a[-1]
        mu_raw = F.linear(h, *self.mu)
        M = self.gsde_actor.draw(1, gen)[0].detach()
        m = mu_raw.clamp(-GSDESquashedActor.CLIP_MEAN, GSDESquashedActor.CLIP_MEAN)
        u = m + h @ M
        n = u - m  # the noise as the autograd step's log-density sees it (pre-tanh action minus mean), rounding too
        var2 = torch.exp(2.0 * self.log_std_param.detach())
        var = torch.addmm(h.new_full((1,), GSDESquashedActor.SDE_EPS), h.square(), var2)
        a = torch.tanh(u)
        logp = (-0.5 * n.square() / var - 0.5 * torch.log(var) - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - torch.log1p(-a.square() + 1e-6).sum(-1)
        return hs_a, a, logp, (mu_raw, n, var, M, var2)

    def actor_grads(self, hs: list[torch.Tensor], g_u: torch.Tensor, k: torch.Tensor,
                    saved: tuple[torch.Tensor, ...]) -> None:
        """See `SACUpdate.actor_grads`: here through the clipped mean, the noise ``h M`` (to the trunk and,
        as ``M = exp(log_std) * E``, to log_std) and the state-dependent variance (to both as well)."""
        B = g_u.shape[0]
        mu_raw, n, var = (t[:B] for t in saved[:3])
        M, var2 = saved[3], saved[4]
        h = hs[-1][:B]
        g_n = g_u - k * n / var
        g_var = k * (0.5 * n.square() / var.square() - 0.5 / var)
        c = GSDESquashedActor.CLIP_MEAN
        g_m = g_u * ((mu_raw > -c) & (mu_raw < c))
        wm, bm = self.mu
        wm.grad, bm.grad = g_m.t() @ h, g_m.sum(0)
        self.log_std_param.grad = (h.t() @ g_n) * M + (h.square().t() @ g_var) * (2.0 * var2)
        g_h = torch.addmm(g_m @ wm, g_n, M.t()) + 2.0 * h * (g_var @ var2.t())
        self.trunk_backward(hs, g_h)


def train_step_in_sequence(update: Any, obs: torch.Tensor, actions: torch.Tensor,
                           next_obs: torch.Tensor, rewards: torch.Tensor, dones: torch.Tensor,
                           weights: torch.Tensor | None, log_ent_coef: torch.Tensor,
                           ent_opt: torch.optim.Optimizer | None, target_entropy: float, gamma: float,
                           gen: torch.Generator | None, critic_opt: torch.optim.Optimizer,
                           actor_opt: torch.optim.Optimizer,
                           polyak: tuple[list[torch.Tensor], list[torch.Tensor], float] | None) -> SACLosses:
    """`SACUpdate.train_step` through ``update``'s ``losses_and_grads``, ``adam_step`` and ``polyak``."""
    B = obs.shape[0]
    out = update.losses_and_grads(obs.reshape(B, -1).float(), actions.reshape(B, -1).float(),
                                  next_obs.reshape(B, -1).float(), rewards, dones, weights, log_ent_coef,
                                  ent_opt is not None, target_entropy, gamma, gen,
                                  lambda: update.adam_step(critic_opt))
    update.adam_step(actor_opt)
    if ent_opt is not None:
        update.adam_step(ent_opt)
    if polyak is not None:
        update.polyak(*polyak)
    return out
