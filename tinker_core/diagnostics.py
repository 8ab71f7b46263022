"""Training diagnostics: checks that run during training and warn in plain words.

Fed by the algorithms at each log point (cheap: a few floats): reward scale per batch, gradient
norm per parameter group, policy entropy, value loss, and finiteness of losses and weights. A
non-finite value raises `DivergenceError`; the training loop then stops without overwriting the last
good checkpoint. Every warning goes to the ``tinker.diagnostics`` logger and to ``warnings``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from tinker_core.errors import TinkerError

log = logging.getLogger("tinker.diagnostics")


class DivergenceError(TinkerError):
    """Training produced NaN or inf; the run stopped and the last good checkpoint was kept."""


@dataclass
class DiagnosticsConfig:
    vanishing_grad: float = 1e-8
    """A parameter group whose gradient norm stays below this is flagged as vanishing."""
    exploding_grad: float = 1e3
    """A parameter group whose gradient norm exceeds this is flagged as exploding."""
    reward_large: float = 100.0
    """Batch reward |mean| or std above this is flagged: scale or normalize rewards."""
    reward_small: float = 1e-4
    """Batch rewards all within this of zero are flagged: no signal to learn from (sparse reward never reached)."""
    entropy_floor: float | None = None
    """Policy entropy below this is flagged as collapsed (None: the algorithm sets it from the action space)."""
    value_loss_growth: float = 100.0
    """A value loss this many times its running median (and above ``value_loss_floor``) is flagged as exploding."""
    value_loss_floor: float = 1e3
    """Value losses below this are never flagged."""
    repeat_every: int = 50
    """The same warning is logged again only after this many checks."""


class Diagnostics:
    """Stateful checks; each method returns the warnings it raised (plain sentences)."""

    def __init__(self, config: DiagnosticsConfig | None = None):
        self.config = config or DiagnosticsConfig()
        self.warnings: list[str] = []
        self._last: dict[str, int] = {}
        self._checks = 0
        self._vloss: list[float] = []

    def _warn(self, key: str, msg: str) -> list[str]:
        self._checks += 1
        last = self._last.get(key)
        self.warnings.append(msg)
        if last is None or self._checks - last >= self.config.repeat_every:
            log.warning(msg)
            self._last[key] = self._checks
        return [msg]

    def rewards(self, rewards: np.ndarray) -> list[str]:
        r = np.asarray(rewards, dtype=np.float64)
        self.finite("reward", r)
        mean, std = float(r.mean()), float(r.std())
        c = self.config
        if abs(mean) > c.reward_large or std > c.reward_large:
            return self._warn("reward_large", f"Rewards are large (batch mean {mean:.3g}, std {std:.3g}): value "
                              "targets will be huge and learning unstable; scale the reward or turn on reward normalization.")
        if r.size > 1 and std < c.reward_small and abs(mean) < c.reward_small:
            return self._warn("reward_flat", f"Rewards are all zero in this batch (mean {mean:.2g}, std {std:.2g}): the "
                              "agent gets no signal to learn from; shape the reward or make the task easier (curriculum).")
        return []

    def grad_norms(self, norms: Mapping[str, float]) -> list[str]:
        out: list[str] = []
        c = self.config
        for group, n in norms.items():
            self.finite(f"gradient norm of {group}", n)
            if n > c.exploding_grad:
                out += self._warn(f"grad_big_{group}", f"Gradients of '{group}' are exploding (norm {n:.3g} > "
                                  f"{c.exploding_grad:g}): lower the learning rate or clip gradients.")
            elif n < c.vanishing_grad:
                out += self._warn(f"grad_small_{group}", f"Gradients of '{group}' are vanishing (norm {n:.2g} < "
                                  f"{c.vanishing_grad:g}): this part of the network has stopped learning.")
        return out

    def entropy(self, value: float, floor: float | None = None) -> list[str]:
        self.finite("policy entropy", value)
        floor = self.config.entropy_floor if self.config.entropy_floor is not None else floor
        if floor is not None and value < floor:
            return self._warn("entropy", f"Policy entropy has collapsed ({value:.3g} < {floor:.3g}): the policy has "
                              "stopped exploring; raise the entropy coefficient or lower the learning rate.")
        return []

    def value_loss(self, value: float) -> list[str]:
        self.finite("value loss", value)
        hist = self._vloss
        median = float(np.median(hist)) if len(hist) >= 5 else None
        hist.append(float(value))
        del hist[:-100]
        c = self.config
        if median is not None and value > c.value_loss_floor and value > c.value_loss_growth * max(median, 1e-12):
            return self._warn("vloss", f"Value loss is exploding ({value:.3g}, {value / max(median, 1e-12):.0f}x its "
                              "recent median): lower the learning rate, normalize rewards or clip the value function.")
        return []

    def finite(self, what: str, value: object) -> None:
        """Raise `DivergenceError` if ``value`` (number or array) holds NaN or inf."""
        a = np.asarray(value, dtype=np.float64)
        if not np.isfinite(a).all():
            bad = "NaN" if np.isnan(a).any() else "inf"
            msg = f"{what} is {bad}: training diverged and is stopped; the last good checkpoint is kept."
            log.error(msg)
            self.warnings.append(msg)
            raise DivergenceError(msg)

    def metrics(self, values: Mapping[str, float]) -> None:
        """Finiteness of every logged metric (losses, coefficients)."""
        for k, v in values.items():
            if isinstance(v, float) and not math.isfinite(v):
                self.finite(k, v)
