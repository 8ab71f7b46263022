"""V-trace (Espeholt et al. 2018, "IMPALA", section 4): off-policy value targets and policy-gradient
advantages from trajectories an older (behaviour) policy collected.

Pure functions on time-major tensors ``[T, B]`` (``T`` steps of ``B`` trajectories). With
``rho_t = min(rho_bar, pi(a_t|x_t) / mu(a_t|x_t))`` and ``c_t = lambda * min(c_bar, pi / mu)``:

    delta_t = rho_t * (r_t + gamma_t * V(x'_t) - V(x_t))
    v_t - V(x_t) = delta_t + gamma_t * c_t * (v_{t+1} - V(x_{t+1}))       (within one episode)
    A_t = rho_pg_t * (r_t + gamma_t * v'_t - V(x_t))

Episode ends: ``gamma_t`` is the discount, zero where the episode terminated at step t (the caller
gives ``discounts = gamma * (1 - terminated)``). ``episode_ends`` (terminated or truncated) cut the
trace: nothing after an end reaches the steps before it. ``next_values`` is ``V(x'_t)``, the value of
the observation step t led to: at a truncation that is the last observation of the cut episode
(bootstrapped), at the window's last step the bootstrap value, elsewhere ``V(x_{t+1})``. ``v'_t`` is
``v_{t+1}`` inside an episode and ``V(x'_t)`` at an end or at the window's last step.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from tinker_core.errors import ConfigError


class VTraceReturns(NamedTuple):
    """What `vtrace` returns, each ``[T, B]`` and without gradient."""

    vs: torch.Tensor
    """V-trace value targets v_t."""
    pg_advantages: torch.Tensor
    """Policy-gradient advantages rho_pg_t * (r_t + gamma_t * v'_t - V(x_t))."""
    rhos: torch.Tensor
    """Importance weights clipped at rho_bar (the rho_t of delta_t)."""
    cs: torch.Tensor
    """Trace coefficients lambda * min(c_bar, pi / mu)."""


def _check(name: str, t: torch.Tensor, shape: torch.Size) -> None:
    if not isinstance(t, torch.Tensor):
        raise ConfigError(f"vtrace.{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.shape != shape:
        raise ConfigError(f"vtrace.{name}: expected shape {tuple(shape)} (time-major [T, B]), got {tuple(t.shape)}")


def vtrace(behaviour_log_probs: torch.Tensor, target_log_probs: torch.Tensor, rewards: torch.Tensor,
           values: torch.Tensor, next_values: torch.Tensor, discounts: torch.Tensor, episode_ends: torch.Tensor,
           rho_bar: float = 1.0, c_bar: float = 1.0, pg_rho_bar: float | None = None,
           lambda_: float = 1.0) -> VTraceReturns:
    """V-trace targets and advantages for time-major ``[T, B]`` inputs (see the module docstring).

    ``rho_bar`` / ``c_bar``: truncation levels of the importance weights in delta_t and in the trace
    (``float('inf')``: no truncation); ``pg_rho_bar``: truncation in the advantages (default
    ``rho_bar``); ``lambda_``: the paper's lambda (section 4.1, remark 5). Inputs are detached.
    """
    shape = rewards.shape
    if rewards.dim() != 2:
        raise ConfigError(f"vtrace.rewards: expected a time-major [T, B] tensor, got shape {tuple(shape)}")
    for name, t in (("behaviour_log_probs", behaviour_log_probs), ("target_log_probs", target_log_probs),
                    ("values", values), ("next_values", next_values), ("discounts", discounts),
                    ("episode_ends", episode_ends)):
        _check(name, t, shape)
    for name, v in (("rho_bar", rho_bar), ("c_bar", c_bar)):
        if not v > 0:
            raise ConfigError(f"vtrace.{name}: expected > 0, got {v}")
    if not 0.0 <= lambda_ <= 1.0:
        raise ConfigError(f"vtrace.lambda_: expected 0..1, got {lambda_}")
    pg_rho_bar = rho_bar if pg_rho_bar is None else pg_rho_bar
    with torch.no_grad():
        f = rewards.dtype if rewards.is_floating_point() else torch.float32
        log_rhos = (target_log_probs - behaviour_log_probs).to(f)
        ratio = log_rhos.exp()
        rhos = ratio.clamp(max=rho_bar)
        cs = lambda_ * ratio.clamp(max=c_bar)
        pg_rhos = ratio.clamp(max=pg_rho_bar)
        r, v, nv, g = rewards.to(f), values.to(f), next_values.to(f), discounts.to(f)
        cont = 1.0 - episode_ends.to(f)  # 0 where the trace is cut
        deltas = rhos * (r + g * nv - v)
        decay = g * cs * cont
        acc = torch.zeros_like(v)  # vs_t - V(x_t)
        nxt = torch.zeros_like(v[0])
        for t in range(shape[0] - 1, -1, -1):
            nxt = deltas[t] + decay[t] * nxt
            acc[t] = nxt
        vs = v + acc
        # v'_t: v_{t+1} inside an episode, V(x'_t) at an end and at the window's last step
        acc_next = torch.cat([acc[1:], torch.zeros_like(acc[:1])]) * cont
        vs_next = nv + acc_next
        pg_adv = pg_rhos * (r + g * vs_next - v)
    return VTraceReturns(vs, pg_adv, rhos, cs)


def next_values_of(values: torch.Tensor, bootstrap: torch.Tensor, end_values: torch.Tensor | None = None,
                   episode_ends: torch.Tensor | None = None) -> torch.Tensor:
    """``V(x'_t)`` from the window's values ``[T, B]`` and the bootstrap value ``[B]`` of the
    observation after it; where ``episode_ends`` is set, ``end_values`` (the value of that episode's
    last observation, ``[T, B]``) is used instead of the next window step's value."""
    nv = torch.cat([values[1:], bootstrap.reshape(1, -1).to(values.dtype)])
    if episode_ends is not None:
        if end_values is None:
            raise ConfigError("next_values_of: episode_ends needs end_values (the value of each ended episode's last obs)")
        nv = torch.where(episode_ends.bool(), end_values.to(values.dtype), nv)
    return nv


__all__ = ["VTraceReturns", "vtrace", "next_values_of"]
