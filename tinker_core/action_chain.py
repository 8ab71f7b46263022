"""The action chain: from a policy's raw output to a joint position command, declared once.

The same `ActionChain` runs in simulation training, in evaluation and in the deployed policy node,
and its config is hashed into the model bundle so deploy cannot drift from training. The
SafetyWrapper comes after it and stays independent.

Steps, in order: clip the raw action to [-clip, clip]; map it to a joint target (``mode="delta"``:
``q + scale * a * max_delta``; ``mode="absolute"``: the [-1, 1] range spans the joint limits);
rate-limit the change from the previous command to ``max_step`` rad per cycle; low-pass filter
(``alpha`` = weight of the new target; 1.0 disables it); clip to the joint limits.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import numpy as np

from tinker_core.errors import ConfigError, ValidationError


@dataclass
class ActionChainConfig:
    mode: str = "delta"
    """``delta``: target = measured position + scale * action * max_delta; ``absolute``: [-1, 1] spans the limits."""
    clip: float = 1.0
    """raw actions are clipped to [-clip, clip] first"""
    scale: float = 1.0
    """multiplies the clipped action"""
    max_delta: float = 0.1
    """rad per unit action in delta mode"""
    max_step: float = 0.15
    """rate limit: largest change of the command between two cycles, rad"""
    alpha: float = 1.0
    """low-pass weight of the new target (1.0 = no filtering)"""

    def __post_init__(self) -> None:
        if self.mode not in ("delta", "absolute"):
            raise ConfigError(f"ActionChainConfig.mode: expected 'delta' or 'absolute', got {self.mode!r}")
        for name in ("clip", "scale", "max_delta", "max_step"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"ActionChainConfig.{name}: expected > 0, got {getattr(self, name)}")
        if not 0.0 < self.alpha <= 1.0:
            raise ConfigError(f"ActionChainConfig.alpha: expected in (0, 1], got {self.alpha}")

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()


class ActionChain:
    """Stateful (rate limit and filter remember the last command); call ``reset(q)`` at episode start."""

    def __init__(self, config: ActionChainConfig, lower: np.ndarray, upper: np.ndarray):
        self.config = config
        self.lower = np.asarray(lower, dtype=np.float64)
        self.upper = np.asarray(upper, dtype=np.float64)
        if self.lower.shape != self.upper.shape or np.any(self.lower >= self.upper):
            raise ConfigError(f"ActionChain: joint limits must satisfy lower < upper, got {self.lower} / {self.upper}")
        self.dof = self.lower.shape[0]
        self._last: np.ndarray | None = None

    def reset(self, q: np.ndarray) -> None:
        self._last = np.clip(np.asarray(q, dtype=np.float64), self.lower, self.upper)

    def __call__(self, action: np.ndarray, q: np.ndarray) -> np.ndarray:
        c = self.config
        a = np.asarray(action, dtype=np.float64).reshape(-1)
        if a.shape[0] != self.dof:
            raise ValidationError("action_chain.action", f"float[{self.dof}]", f"float[{a.shape[0]}]")
        q = np.asarray(q, dtype=np.float64)
        a = np.clip(np.nan_to_num(a, nan=0.0, posinf=c.clip, neginf=-c.clip), -c.clip, c.clip) * c.scale
        if c.mode == "delta":
            target = q + a * c.max_delta
        else:
            target = self.lower + (np.clip(a, -1.0, 1.0) + 1.0) * 0.5 * (self.upper - self.lower)
        last = q if self._last is None else self._last
        target = last + np.clip(target - last, -c.max_step, c.max_step)
        target = c.alpha * target + (1.0 - c.alpha) * last
        target = np.clip(target, self.lower, self.upper)
        self._last = target
        return target

    def invert(self, target: np.ndarray, q: np.ndarray) -> np.ndarray:
        """The raw action whose mapping step gives joint ``target`` from measured pose ``q`` (the inverse of the
        map above, for a person's joint target recorded as the policy's action, HIL-SERL style), clipped to
        [-clip, clip]. The rate limit, filter and joint clip are not inverted: a target beyond what one action
        can reach gives the clipped action towards it. Stateless (the chain's last command is not touched)."""
        c = self.config
        t = np.asarray(target, dtype=np.float64).reshape(-1)
        if t.shape[0] != self.dof:
            raise ValidationError("action_chain.invert.target", f"float[{self.dof}]", f"float[{t.shape[0]}]")
        t = np.clip(t, self.lower, self.upper)
        if c.mode == "delta":
            a = (t - np.asarray(q, dtype=np.float64)) / (c.max_delta * c.scale)
        else:
            a = (2.0 * (t - self.lower) / (self.upper - self.lower) - 1.0) / c.scale
        return np.clip(a, -c.clip, c.clip)
