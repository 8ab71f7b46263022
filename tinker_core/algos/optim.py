"""Adam for small networks: the fused kernel, called directly where its bookkeeping costs as much as the step."""

from __future__ import annotations

from typing import Any

import torch


def make_adam(params: Any, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam with the fused kernel where the build has it (one kernel for all parameters)."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)


def fused_adam_args(opt: torch.optim.Optimizer) -> tuple[list, list, list, list, list, dict] | None:
    """(params, grads, exp_avgs, exp_avg_sqs, steps, hyperparameters) of a single-group fused Adam
    whose parameters all have gradients and state, or None for any other optimizer or state."""
    group = opt.param_groups[0]
    params = group["params"]
    if (type(opt) is not torch.optim.Adam or len(opt.param_groups) != 1 or not group.get("fused")
            or group["amsgrad"] or group["maximize"] or group.get("decoupled_weight_decay")
            or isinstance(group["lr"], torch.Tensor) or len({(p.device, p.dtype) for p in params}) != 1
            or any(p.grad is None or p not in opt.state for p in params)):
        return None
    states = [opt.state[p] for p in params]
    beta1, beta2 = group["betas"]
    return (params, [p.grad for p in params], [st["exp_avg"] for st in states], [st["exp_avg_sq"] for st in states],
            [st["step"] for st in states],
            dict(lr=group["lr"], beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"]))


def adam_step(opt: torch.optim.Optimizer) -> None:
    """``opt.step()`` for a single-group fused Adam whose parameters all have gradients and state,
    calling the fused kernel directly (what ``Adam.step`` calls, with the same state), without its
    per-call bookkeeping, which costs as much as the kernel for networks this small. Any other
    optimizer or state (the first step creates the state) goes through ``opt.step()``."""
    args = fused_adam_args(opt)
    if args is None:
        opt.step()
        return
    params, grads, exp_avgs, exp_avg_sqs, steps, h = args
    torch._foreach_add_(steps, 1)
    torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, maximize=False, **h)


def backward_in_caller_thread() -> Any:
    """Context in which autograd runs backward on the calling thread instead of handing it to its
    device worker thread: with networks this small the hand-off costs more than the backward (about
    half of it on a busy 2-core machine). Gradients are the same."""
    return torch.autograd.set_multithreading_enabled(False)
