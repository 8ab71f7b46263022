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
from tinker_core.algos.optim import fused_adam_args
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

    def _adam_args(self, opt: torch.optim.Optimizer) -> tuple | None:
        """`fused_adam_args` of ``opt`` where the compiled update takes them: one fused Adam over the flat
        buffer, with state, on the CPU, counting steps in float32; else None. The flat gradient is made
        first (the update writes it; a loaded checkpoint has none)."""
        self._grad_tiles()
        args = fused_adam_args(opt)
        if (args is None or len(args[0]) != 1 or args[0][0] is not self.fused.flat.flat
                or args[4][0].dtype != torch.float32 or args[4][0].device.type != "cpu"):
            return None
        return args

    def ready(self, opt: torch.optim.Optimizer) -> bool:
        """Whether `update` applies now: the extension loads (built at the first call) and ``opt`` is a
        fused Adam over the flat buffer whose state exists (the first update, through autograd, makes it)."""
        return self._adam_args(opt) is not None and native.load()

    def update(self, opt: torch.optim.Optimizer, obs: torch.Tensor, actions: torch.Tensor, scal: torch.Tensor,
               perms: torch.Tensor, c: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every epoch's minibatches (``perms`` [epochs, N] orders the rollout's N samples; ``scal`` [N, 4]
        holds old value, old log-prob, advantage and return) with the settings of config ``c``, where
        `ready`; returns (losses [M, 2] (policy, value), log ratios [epochs * N], gradient norms [M])."""
        args = self._adam_args(opt)
        assert args is not None, "NativePPOUpdate.update: not ready (see ready())"
        _, _, exp_avgs, exp_avg_sqs, steps, h = args
        flat = self.fused.flat.flat
        g, gtiles = self._grad_tiles()
        n = obs.shape[0]
        losses, log_ratios, norms = torch.ops.tinker_ppo.update(
            obs.reshape(n, -1).float().contiguous(), actions.reshape(n, -1).float().contiguous(), scal.contiguous(),
            perms.contiguous(), self.fused.tiles(), gtiles, flat.detach(), g, exp_avgs[0], exp_avg_sqs[0], steps[0],
            self.fused.n_hidden, 0 if self.fused.act is torch.relu else 1, self.sde, GaussianActor.SDE_EPS,
            c.batch_size, c.clip_range, -1.0 if c.clip_range_vf is None else c.clip_range_vf, c.vf_coef, c.ent_coef,
            c.max_grad_norm, c.normalize_advantage, float(h["lr"]), float(h["beta1"]), float(h["beta2"]),
            float(h["weight_decay"]), float(h["eps"]))
        return losses, log_ratios, norms
