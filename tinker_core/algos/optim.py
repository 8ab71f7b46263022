"""Adam for small networks: the fused kernel, called directly where its bookkeeping costs as much as the step;
and `update_scope`, the context every gradient update runs in."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

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


_scopes = threading.local()
"""``depth``: this thread's open update scopes (a scope inside another leaves the flush to the outer one)"""


@contextmanager
def update_scope() -> Iterator[None]:
    """The context every gradient update runs in: autograd's backward on the calling thread
    (`backward_in_caller_thread`), and floats below 1.2e-38 (denormals) flushed to zero on that thread.

    Adam's second moments of small gradients decay into the denormal range, where x86 cores compute many
    times slower. Measured on an Intel Xeon (Pendulum SAC, the compiled step, one thread): 4.4 ms a step for
    the first ~800 updates, then 6.3-6.7 ms with 72,580 denormal Adam state values; flushed, 4.4-4.7 ms
    throughout (JAX's CPU back-end, hence sbx, flushes them by default). The values flushed are below any
    effect on a step (Adam divides by their square root plus eps = 1e-8). Flushing is the thread's CPU
    setting (torch.set_flush_denormal: a no-op returning False where the CPU has none); it is turned on for
    the outermost scope and off when that scope ends (torch cannot read the setting back, so code that
    turned it on for the whole thread itself finds it off after an update). Intra-op worker threads, where
    torch uses more than one, keep their own setting."""
    depth = getattr(_scopes, "depth", 0)
    if depth == 0:
        torch.set_flush_denormal(True)
    _scopes.depth = depth + 1
    try:
        with backward_in_caller_thread():
            yield
    finally:
        _scopes.depth = depth
        if depth == 0:
            torch.set_flush_denormal(False)
