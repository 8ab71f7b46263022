"""Advantages and value targets on a semi-MDP: one decision per option, each lasting ``duration`` steps.

For decision ``i`` with summed discounted reward ``R_i = sum_k gamma^k r_{t_i + k}`` over its ``d_i`` steps:

    delta_i = R_i + gamma^{d_i} (1 - terminal_i) V(s'_i) - V(s_i)
    A_i     = delta_i + (gamma^{d_i} lambda) (1 - end_i) A_{i+1}

``terminal_i``: the episode terminated during the option (no bootstrap); ``end_i``: the episode ended
there (terminated or truncated), so the chain of advantages stops; a truncated episode still bootstraps
from ``V(s'_i)``. The last decision of a sequence is cut there (``A = delta``). With every duration 1 this
is GAE (Schulman et al. 2016).
"""

from __future__ import annotations

import numpy as np


def discounted_sum(rewards: np.ndarray, gamma: float) -> float:
    """``sum_k gamma^k r_k``: an option's reward as the high level sees it."""
    r = np.asarray(rewards, dtype=np.float64)
    return float(np.sum(r * gamma ** np.arange(len(r))))


def smdp_gae(rewards: np.ndarray, durations: np.ndarray, values: np.ndarray, next_values: np.ndarray,
             terminals: np.ndarray, ends: np.ndarray, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, value targets = advantages + values) for one env's decisions in time order (1-D arrays)."""
    n = len(rewards)
    disc = gamma ** np.asarray(durations, dtype=np.float64)
    adv = np.zeros(n, dtype=np.float64)
    nxt = 0.0
    for i in range(n - 1, -1, -1):
        delta = rewards[i] + disc[i] * (1.0 - float(terminals[i])) * next_values[i] - values[i]
        cont = 0.0 if (ends[i] or i == n - 1) else 1.0
        nxt = delta + disc[i] * lam * cont * nxt
        adv[i] = nxt
    return adv, adv + np.asarray(values, dtype=np.float64)


def gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray, terminals: np.ndarray,
        ends: np.ndarray, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """Plain GAE over one env's primitive steps (``smdp_gae`` with every duration 1)."""
    return smdp_gae(rewards, np.ones(len(rewards)), values, next_values, terminals, ends, gamma, lam)
