"""`NativeSACUpdate`: `SACUpdate`'s step compiled (sac_native.cpp, built and loaded by `native`), for the CPU.

`SACUpdate` spends about a third of a step outside its matrix products: some 200 small kernels
(bias, activation and their backward, sums, the squashed Gaussian, the target), each a dispatch and
a pass over memory. The C++ step does the same products (through the BLAS or oneDNN, see `native`)
and fuses the rest into one loop per activation. Where the extension cannot be had, SAC runs
`SACUpdate` instead (`native` says why, once).
"""

from __future__ import annotations

import os
from typing import Any, Callable

import torch
from torch import nn

from tinker_core.algos import native
from tinker_core.algos.optim import adam_step, fused_adam_args
from tinker_core.algos.networks import EnsembleQ, GSDESquashedActor, SquashedGaussianActor, noise_like
from tinker_core.algos.sac_update import SACLosses, SACUpdate, train_step_in_sequence


def _act_code(kind: type) -> int:
    return 0 if kind is nn.ReLU else 1


class NativeSACUpdate:
    """`SACUpdate.losses_and_grads` through the compiled step; the same arguments and results.
    Build it with `NativeSACUpdate.create`, which returns None where `SACUpdate` must do. The
    extension is built or loaded at the first step, not here: an algorithm that only acts, evaluates
    or exports compiles nothing. Where it cannot be had, every call goes to `SACUpdate`."""

    def __init__(self, actor: SquashedGaussianActor | GSDESquashedActor, critic: EnsembleQ, critic_target: EnsembleQ):
        lin = [m for m in actor.trunk if type(m) is nn.Linear]
        self.gsde = actor if isinstance(actor, GSDESquashedActor) else None
        """gSDE's actor, which draws each step's noise matrix; None for the plain actor"""
        if self.gsde is not None:  # the trunk, the mean layer, then log_std [H, A]: an odd-length list
            self.actor = [*(t for m in [*lin, actor.mu[0]] for t in (m.weight, m.bias)), actor.log_std]
        else:
            self.actor = [t for m in [*lin, actor.mu, actor.log_std] for t in (m.weight, m.bias)]
        self.critic = [t for m in critic.layers for t in (m.weight, m.bias)]
        self.target = [t for m in critic_target.layers for t in (m.weight, m.bias)]
        self.actor_act = _act_code(next(type(m) for m in actor.trunk if type(m) is not nn.Linear))
        self.critic_act = _act_code(type(critic.act))
        self.python = SACUpdate.of(actor, critic, critic_target)
        self._ops: Any = None  # the extension's ops once loaded; False when it cannot be had
        self._adam: dict[torch.optim.Optimizer, tuple[Any, Any, tuple]] = {}

    @property
    def compiled(self) -> bool:
        """Whether steps run compiled (the first call builds or loads the extension)."""
        if self._ops is None:
            self._ops = torch.ops.tinker_sac if native.load() else False
        return self._ops is not False

    @classmethod
    def create(cls, actor: SquashedGaussianActor | GSDESquashedActor, critic: EnsembleQ, critic_target: EnsembleQ,
               device: torch.device) -> "NativeSACUpdate | None":
        """The compiled step where it applies (what `SACUpdate` supports, fp32, on the CPU) and builds."""
        params = [*actor.parameters(), *critic.parameters(), *critic_target.parameters()]
        if (device.type != "cpu" or os.environ.get("TINKER_NATIVE") == "0" or not SACUpdate.supports(actor, critic)
                or any(p.dtype != torch.float32 or not p.is_contiguous() for p in params)):
            return None
        return cls(actor, critic, critic_target)

    def _sde_matrix(self, gen: torch.Generator | None) -> torch.Tensor | None:
        """gSDE's noise matrix for this step, drawn as the autograd path's ``reset_train_noise`` draws it; None
        for the plain actor (its noise is drawn in the compiled step, from the same generator)."""
        return None if self.gsde is None else self.gsde.draw(1, gen)[0].detach().contiguous()

    @staticmethod
    def _grads(params: list[torch.Tensor]) -> list[torch.Tensor]:
        """Each parameter's ``.grad``, allocated once: the step writes into them."""
        for p in params:
            if p.grad is None or p.grad.shape != p.shape or not p.grad.is_contiguous():
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        return [p.grad for p in params]

    @staticmethod
    def _compiled_adam_args(opt: torch.optim.Optimizer) -> tuple | None:
        """`fused_adam_args` where the compiled Adam step takes them (CPU, float32 step counts), else None."""
        args = fused_adam_args(opt)
        if args is None or args[0][0].device.type != "cpu" or args[4][0].dtype != torch.float32:
            return None
        return args

    def adam_step(self, opt: torch.optim.Optimizer) -> None:
        """`adam_step` with the step counting done in the same compiled call."""
        args = self._compiled_adam_args(opt) if self.compiled else None
        if args is None:
            adam_step(opt)
            return
        params, grads, exp_avgs, exp_avg_sqs, steps, h = args
        self._ops.adam_step(params, grads, exp_avgs, exp_avg_sqs, steps, **h)

    def polyak(self, dst: list[torch.Tensor], src: list[torch.Tensor], tau: float) -> None:
        """``torch._foreach_lerp_(dst, src, tau)`` in one compiled loop (all CPU fp32, contiguous)."""
        if self.compiled:
            self._ops.polyak_(dst, src, tau)
        else:
            torch._foreach_lerp_(dst, src, tau)

    def _adam_lists(self, opt: torch.optim.Optimizer) -> tuple | None:
        """`fused_adam_args` (params, grads, exp_avgs, exp_avg_sqs, steps), kept while the optimizer's
        state, group and gradient tensors are the same objects (a loaded state or a reassigned ``.grad``
        makes them new); None where the compiled Adam step does not apply."""
        kept = self._adam.get(opt)
        group = opt.param_groups[0]
        if (kept is not None and kept[0] is opt.state and kept[1] is group and len(opt.param_groups) == 1
                and all(p.grad is g for p, g in zip(kept[2][0], kept[2][1]))):
            return kept[2]
        args = self._compiled_adam_args(opt)
        if args is None:
            self._adam.pop(opt, None)
            return None
        self._adam[opt] = (opt.state, group, args[:5])
        return args[:5]

    def train_step(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor, rewards: torch.Tensor,
                   dones: torch.Tensor, weights: torch.Tensor | None, log_ent_coef: torch.Tensor,
                   ent_opt: torch.optim.Optimizer | None, target_entropy: float, gamma: float,
                   gen: torch.Generator | None, critic_opt: torch.optim.Optimizer, actor_opt: torch.optim.Optimizer,
                   polyak: tuple[list[torch.Tensor], list[torch.Tensor], float] | None) -> SACLosses:
        """See `SACUpdate.train_step`: one compiled call once every optimizer has its state (the first step
        creates it through ``opt.step()``); the same calls as `SACUpdate` until then."""
        opts = [critic_opt, actor_opt] + ([ent_opt] if ent_opt is not None else [])
        if self.compiled:
            actor_grads, critic_grads = self._grads(self.actor), self._grads(self.critic)  # the step writes these
            if ent_opt is not None:
                self._grads([log_ent_coef])
            lists = [self._adam_lists(o) for o in opts]
            if all(x is not None for x in lists):
                cat = [[t for x in lists for t in x[i]] for i in range(5)]  # type: ignore[index]
                hyper = []
                for o in opts:
                    g = o.param_groups[0]
                    hyper += [float(g["lr"]), *map(float, g["betas"]), float(g["weight_decay"]), float(g["eps"])]
                dst, src, tau = polyak if polyak is not None else ([], [], 0.0)
                out = self._ops.train_step(
                    obs, actions, next_obs, rewards, dones, weights, gen, log_ent_coef,
                    log_ent_coef.grad if ent_opt is not None else None, float(target_entropy), float(gamma),
                    self.actor, self.critic, self.target, actor_grads, critic_grads, *cat,
                    [len(x[0]) for x in lists] + [0] * (3 - len(lists)), hyper, dst, src, float(tau),  # type: ignore[index]
                    self.actor_act, self.critic_act, self._sde_matrix(gen))
                return SACLosses(*out)
        return train_step_in_sequence(self, obs, actions, next_obs, rewards, dones, weights, log_ent_coef, ent_opt,
                                      target_entropy, gamma, gen, critic_opt, actor_opt, polyak)

    def losses_and_grads(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor,
                         rewards: torch.Tensor, dones: torch.Tensor, weights: torch.Tensor | None,
                         log_ent_coef: torch.Tensor, learn_ent_coef: bool, target_entropy: float, gamma: float,
                         gen: torch.Generator | None, step_critic: Callable[[], None]) -> SACLosses:
        """See `SACUpdate.losses_and_grads`."""
        if not self.compiled:
            return self.python.losses_and_grads(obs, actions, next_obs, rewards, dones, weights, log_ent_coef,
                                                learn_ent_coef, target_entropy, gamma, gen, step_critic)
        B = obs.shape[0]
        x2 = torch.cat([obs, next_obs]).float().contiguous()
        A = actions.shape[1]
        mu_shape = (B, A)
        noise = self._sde_matrix(gen)
        if noise is None:
            noise = torch.cat([noise_like(x2.new_empty(mu_shape), gen), noise_like(x2.new_empty(mu_shape), gen)])
        ent = log_ent_coef.detach().exp()
        ent_f = float(ent)
        w = None if weights is None else weights.float().contiguous()
        saved = self._ops.critic_step(x2, actions.float().contiguous(), rewards.float().contiguous(),
                                     dones.float().contiguous(), w, noise, self.actor, self.critic, self.target,
                                     self._grads(self.critic), ent_f, float(gamma), self.actor_act, self.critic_act,
                                     self.gsde is not None)
        step_critic()
        actor_loss, logp_mean = self._ops.actor_step(x2, saved, self.actor, self._grads(self.actor), self.critic,
                                                    ent_f, self.actor_act, self.critic_act, self.gsde is not None)
        if learn_ent_coef:
            log_ent_coef.grad = -(logp_mean + target_entropy).reshape(log_ent_coef.shape)
        critic_loss, q_mean, td_abs = saved[0], saved[1], saved[2]
        return SACLosses(critic_loss, actor_loss, ent.squeeze(), -logp_mean, q_mean, td_abs)
