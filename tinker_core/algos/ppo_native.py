"""`NativePPOUpdate`: PPO's whole update (every epoch and minibatch) in one compiled call (ppo_native.cpp).

A PPO minibatch at RL Zoo's sizes (64 samples, 64-wide MLPs) through autograd costs ~600 us, nearly
all of it dispatch: forward, backward, loss and clip are some hundred kernels on tiny tensors. The
compiled update writes the same losses' gradients out and runs the global-norm clip and the fused
Adam step of the flat buffer in place. It applies to the fused actor-critic pair (`FusedActorCritic`)
with Gaussian actions (gSDE or a state-independent std) on the CPU; the first update (which creates
Adam's state) and everything else go through autograd, and `tests/algos/test_ppo_native.py` holds the
two to each other.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from tinker_core.algos import native
from tinker_core.algos.fused_ac import FusedActorCritic
from tinker_core.algos.networks import GaussianActor


class NativePPOUpdate:
    """Built by `NativePPOUpdate.create`, which returns None where autograd must do."""

    def __init__(self, fused: FusedActorCritic, sde: bool):
        self.fused, self.sde = fused, sde
        self._gtiles: tuple[torch.Tensor, list[torch.Tensor]] | None = None

    @classmethod
    def create(cls, fused: FusedActorCritic | None, discrete: bool, sde: bool,
               device: torch.device) -> "NativePPOUpdate | None":
        if fused is None or discrete or device.type != "cpu" or os.environ.get("TINKER_NATIVE") == "0":
            return None
        if fused.flat.flat.dtype != torch.float32:
            return None
        return cls(fused, sde)

    def _grad_tiles(self) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The flat gradient (allocated once; the update writes every element) and its tile views."""
        flat = self.fused.flat.flat
        g = flat.grad
        if g is None or g.shape != flat.shape or not g.is_contiguous():
            flat.grad = g = torch.zeros_like(flat)
        if self._gtiles is None or self._gtiles[0] is not g:
            self._gtiles = (g, [g[o:o + n].view(shape) for o, n, shape in self.fused.tile_specs])
        return self._gtiles

    @staticmethod
    def _adam_state(opt: torch.optim.Optimizer, p: torch.Tensor) -> dict | None:
        st = opt.state.get(p)
        group = opt.param_groups[0]
        if (not st or type(opt) is not torch.optim.Adam or len(opt.param_groups) != 1 or not group.get("fused")
                or group["amsgrad"] or group["maximize"] or st["step"].dtype != torch.float32
                or st["step"].device.type != "cpu"):
            return None
        return st

    def ready(self, opt: torch.optim.Optimizer) -> bool:
        """Whether `update` applies now: the extension loads (built at the first call) and ``opt`` is a
        fused Adam over the flat buffer whose state exists (the first update, through autograd, makes it)."""
        return self._adam_state(opt, self.fused.flat.flat) is not None and native.load()

    def update(self, opt: torch.optim.Optimizer, obs: torch.Tensor, actions: torch.Tensor, scal: torch.Tensor,
               perms: torch.Tensor, c: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every epoch's minibatches (``perms`` [epochs, N] orders the rollout's N samples; ``scal`` [N, 4]
        holds old value, old log-prob, advantage and return) with the settings of config ``c``, where
        `ready`; returns (losses [M, 2] (policy, value), log ratios [epochs * N], gradient norms [M])."""
        flat = self.fused.flat.flat
        st = self._adam_state(opt, flat)
        assert st is not None, "NativePPOUpdate.update: not ready (see ready())"
        g, gtiles = self._grad_tiles()
        group = opt.param_groups[0]
        beta1, beta2 = group["betas"]
        n = obs.shape[0]
        losses, log_ratios, norms = torch.ops.tinker_ppo.update(
            obs.reshape(n, -1).float().contiguous(), actions.reshape(n, -1).float().contiguous(), scal.contiguous(),
            perms.contiguous(), self.fused.tiles(), gtiles, flat.detach(), g, st["exp_avg"], st["exp_avg_sq"],
            st["step"], self.fused.n_hidden, 0 if self.fused.act is torch.relu else 1, self.sde,
            GaussianActor.SDE_EPS, c.batch_size, c.clip_range, -1.0 if c.clip_range_vf is None else c.clip_range_vf,
            c.vf_coef, c.ent_coef, c.max_grad_norm, c.normalize_advantage, float(group["lr"]), float(beta1),
            float(beta2), float(group["weight_decay"]), float(group["eps"]))
        return losses, log_ratios, norms
