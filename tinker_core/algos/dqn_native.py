"""`NativeDQNUpdate`: DQN's gradient step compiled (dqn_native.cpp, built and loaded by `native`), for the CPU.

At RL Zoo's DQN sizes (batches of 64-128, two 256-wide layers) a step through autograd is some sixty
kernel dispatches plus the optimizer's bookkeeping, several times its arithmetic; RL Zoo's settings
take one to a hundred such steps per env step, so the update is ~90% of a run. The compiled step does
the same forward passes, Huber loss, gradients, global-norm clip and fused Adam step in one call. It
applies to an MLP Q-network of Linear layers with ReLU or Tanh behind a `Flatten` perception, in
float32 on the CPU; everything else (and any machine without a compiler) stays on autograd, which is
said once (`native.note_update_path`). tests/algos/test_dqn_native.py holds the two to each other.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import torch
from torch import nn

from tinker_core.algos import native
from tinker_core.algos.optim import fused_adam_args
from tinker_core.nn.encoders import Flatten


class DQNLosses(NamedTuple):
    """What one step reports (tensors) and |TD| per sample."""

    loss: torch.Tensor
    q_mean: torch.Tensor
    grad_norm: torch.Tensor
    td_abs: torch.Tensor


def unsupported(perception: nn.Module, q_net: nn.Module) -> str:
    """Why the compiled step does not apply to these networks ("" where it does)."""
    if type(perception) is not Flatten:
        return f"the perception is {type(perception).__name__}, not a plain Flatten (image or encoder observations)"
    mods = list(q_net) if isinstance(q_net, nn.Sequential) else []
    acts = {type(m) for m in mods[1::2]}
    if (not mods or len(mods) % 2 != 1 or any(type(m) is not nn.Linear or m.bias is None for m in mods[0::2])
            or not acts <= {nn.ReLU, nn.Tanh} or len(acts) > 1):
        return "the Q-network is not what the compiled step supports (an MLP of Linear layers with ReLU or Tanh)"
    return ""


class NativeDQNUpdate:
    """Build it with `NativeDQNUpdate.create`, which returns None where autograd must do. The extension
    is built or loaded at the first step, not here: an algorithm that only acts or exports compiles nothing."""

    def __init__(self, q_net: nn.Sequential, q_net_target: nn.Sequential):
        lin = [m for m in q_net if type(m) is nn.Linear]
        self.online = [t for m in lin for t in (m.weight, m.bias)]
        self.target = [t for m in q_net_target if type(m) is nn.Linear for t in (m.weight, m.bias)]
        acts = [type(m) for m in q_net if type(m) is not nn.Linear]
        self.act = 0 if not acts or acts[0] is nn.ReLU else 1
        self._ops: Any = None  # the extension's ops once loaded; False when it cannot be had
        self._adam: tuple[Any, Any, tuple] | None = None

    @classmethod
    def create(cls, perception: nn.Module, q_net: nn.Module, q_net_target: nn.Module,
               device: torch.device) -> "NativeDQNUpdate | None":
        """The compiled step where it applies (`unsupported` says nothing, fp32, on the CPU), else None."""
        if device.type != "cpu" or os.environ.get("TINKER_NATIVE") == "0" or unsupported(perception, q_net):
            return None
        params = [*q_net.parameters(), *q_net_target.parameters()]
        if any(p.dtype != torch.float32 or not p.is_contiguous() for p in params):
            return None
        return cls(q_net, q_net_target)  # type: ignore[arg-type]

    @property
    def compiled(self) -> bool:
        """Whether steps run compiled (the first call builds or loads the extension)."""
        if self._ops is None:
            self._ops = torch.ops.tinker_dqn if native.load() else False
        return self._ops is not False

    def _grads(self) -> list[torch.Tensor]:
        """Each parameter's ``.grad``, allocated once: the step writes every element."""
        for p in self.online:
            if p.grad is None or p.grad.shape != p.shape or not p.grad.is_contiguous():
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        return [p.grad for p in self.online]  # type: ignore[misc]

    def _adam_state(self, opt: torch.optim.Optimizer) -> tuple | None:
        """(exp_avgs, exp_avg_sqs, steps, hyperparameters) of ``opt`` where the compiled step can take its
        Adam step: a fused single-group Adam over exactly the online parameters, with state (the first
        step, through ``opt.step()``, makes it), counting steps in float32 on the CPU; else None. Kept while
        the optimizer's state, group and gradients are the same objects."""
        group = opt.param_groups[0]
        kept = self._adam
        if (kept is not None and kept[0] is opt.state and kept[1] is group and len(opt.param_groups) == 1
                and all(p.grad is g for p, g in zip(self.online, kept[2][3]))):
            m, v, steps, _ = kept[2]
        else:
            args = fused_adam_args(opt)
            if (args is None or len(args[0]) != len(self.online) or any(p is not q for p, q in zip(args[0], self.online))
                    or args[4][0].dtype != torch.float32 or args[4][0].device.type != "cpu"):
                self._adam = None
                return None
            m, v, steps = args[2], args[3], args[4]
            self._adam = (opt.state, group, (m, v, steps, args[1]))
        hyper = [float(group["lr"]), *map(float, group["betas"]), float(group["weight_decay"]), float(group["eps"])]
        return m, v, steps, hyper

    def train_step(self, obs: torch.Tensor, actions: torch.Tensor, next_obs: torch.Tensor, rewards: torch.Tensor,
                   dones: torch.Tensor, weights: torch.Tensor | None, opt: torch.optim.Optimizer, gamma: float,
                   double_q: bool, max_grad_norm: float) -> DQNLosses | None:
        """`DQN._train_step`'s step (gradients, clip, Adam) in one compiled call; the first step (no Adam
        state yet) computes the gradients compiled and steps through ``opt.step()``. None where the
        extension cannot be had (the caller steps through autograd)."""
        if not self.compiled:
            return None
        grads = self._grads()
        state = self._adam_state(opt)
        m, v, steps, hyper = state if state is not None else ([], [], [], [])
        out = self._ops.train_step(obs, actions, next_obs, rewards, dones, weights, self.online, self.target, grads,
                                   m, v, steps, hyper, float(gamma), bool(double_q), float(max_grad_norm), self.act)
        if state is None:
            opt.step()
        return DQNLosses(*out)
