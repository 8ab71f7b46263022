"""`FlatParams`: a group of parameters stored in one contiguous buffer, updated as one tensor.

With networks this small, an optimizer step, gradient clipping and zeroing cost a dispatch per
parameter tensor, which adds up to a third of a PPO minibatch. Here the module parameters become
views into one flat buffer (modules, ``state_dict`` and ``load_state_dict`` see no difference) and
a single flat `nn.Parameter` over the same storage is what the optimizer steps: one fused kernel,
one norm, one scale.
"""

from __future__ import annotations

import torch
from torch import nn


class FlatParams:
    """Make ``params`` views into one buffer; ``flat`` is the optimizer's single parameter."""

    def __init__(self, params: list[nn.Parameter]):
        if not params:
            raise ValueError("FlatParams: expected at least one parameter, got none")
        dtype, device = params[0].dtype, params[0].device
        total = sum(p.numel() for p in params)
        buf = torch.empty(total, dtype=dtype, device=device)
        off = 0
        with torch.no_grad():
            for p in params:
                n = p.numel()
                buf[off:off + n].copy_(p.reshape(-1))
                p.data = buf[off:off + n].view_as(p)
                off += n
        self.params = list(params)
        self.flat = nn.Parameter(buf)  # same storage as the views above

    def set_grad(self, loss: torch.Tensor) -> None:
        """Gradient of ``loss`` for every parameter, written as the flat parameter's ``.grad``
        (parameters the loss does not use get zeros)."""
        grads = torch.autograd.grad(loss, self.params, allow_unused=True)
        self.flat.grad = torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1)
                                    for p, g in zip(self.params, grads)])

    def clip_grad_norm_(self, max_norm: float) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` on the flat gradient (same formula); returns the norm."""
        g = self.flat.grad
        norm = torch.linalg.vector_norm(g)
        g.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        return norm

    def adam_step(self, opt: torch.optim.Optimizer) -> None:
        """``opt.step()`` for a fused Adam over ``[self.flat]``, calling the fused kernel directly:
        the same kernel, arguments and state, without ``Optimizer.step``'s per-call bookkeeping (which
        costs ten times the kernel at this size). Falls back to ``opt.step()`` for the first step
        (the optimizer creates its state) and for any optimizer that is not a single-group fused Adam."""
        st = opt.state.get(self.flat)
        group = opt.param_groups[0]
        if (not st or type(opt) is not torch.optim.Adam or len(opt.param_groups) != 1 or not group.get("fused")
                or group["amsgrad"] or group["maximize"] or self.flat.grad is None):
            opt.step()
            return
        st["step"] += 1
        beta1, beta2 = group["betas"]
        torch._fused_adam_([self.flat], [self.flat.grad], [st["exp_avg"]], [st["exp_avg_sq"]], [], [st["step"]],
                           amsgrad=False, lr=group["lr"], beta1=beta1, beta2=beta2,
                           weight_decay=group["weight_decay"], eps=group["eps"], maximize=False)
