"""Mixed precision chosen per module, with dynamic loss scaling and automatic fallback to fp32.

A critic can run its forward in reduced precision (fp16 on CUDA, bf16 on CPU) while the actor stays
fp32. Weights and optimizer state stay fp32 ("master weights"); only the compute is autocast. The
loss is multiplied by ``scale`` before backward and the gradients divided by it after; a step whose
gradients are non-finite (overflow) is skipped and the scale halved, a step whose gradients are all
zero though the loss is not (underflow) is skipped and the scale doubled; so no bad step ever
reaches the weights. After ``fallback_after`` non-finite steps in a row the module falls back to
fp32 for good, with a warning.

Note (measured here): CPUs without bf16 matrix units run bf16 matmuls far slower than fp32, so on
such CPUs reduced precision is a correctness feature, not a speed one; its speed shows on CUDA.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Iterable

import torch

from tinker_core.errors import ConfigError

log = logging.getLogger("tinker.amp")

PRECISIONS = ("fp32", "bf16", "fp16", "auto")


@dataclass
class LossScalerConfig:
    init_scale: float = 2.0 ** 16
    """Starting loss scale."""
    growth_factor: float = 2.0
    """Scale multiplier after ``growth_interval`` clean steps (and on underflow)."""
    backoff_factor: float = 0.5
    """Scale multiplier after an overflow."""
    growth_interval: int = 1000
    """Clean steps between two scale increases."""
    min_scale: float = 2.0 ** -14
    """Lower bound of the scale."""
    max_scale: float = 2.0 ** 24
    """Upper bound of the scale."""
    fallback_after: int = 8
    """Non-finite steps in a row after which the module falls back to fp32."""

    def __post_init__(self) -> None:
        if not 0 < self.backoff_factor < 1 < self.growth_factor:
            raise ConfigError(f"LossScalerConfig: expected 0 < backoff_factor < 1 < growth_factor, got "
                              f"{self.backoff_factor} and {self.growth_factor}")
        if self.fallback_after < 1:
            raise ConfigError(f"LossScalerConfig.fallback_after: expected >= 1, got {self.fallback_after}")


class ModulePrecision:
    """The precision of one module (its forward under ``autocast()``, its update through ``step``)."""

    def __init__(self, name: str, mode: str = "fp32", device: torch.device | str = "cpu",
                 scaler: LossScalerConfig | None = None):
        if mode not in PRECISIONS:
            raise ConfigError(f"{name} precision: expected one of {PRECISIONS}, got {mode!r}")
        self.name = name
        self.device_type = torch.device(device).type
        if mode == "auto":
            mode = "fp16" if self.device_type == "cuda" else "bf16"
        if mode == "fp16" and self.device_type != "cuda":
            raise ConfigError(f"{name} precision: fp16 needs CUDA, this module is on {self.device_type}; use bf16")
        self.mode = mode
        self.cfg = scaler or LossScalerConfig()
        self.scale = float(self.cfg.init_scale) if mode != "fp32" else 1.0
        self.overflows = 0
        self.underflows = 0
        self.bad_in_row = 0
        self.good_in_row = 0
        self.fell_back = False

    @property
    def enabled(self) -> bool:
        return self.mode != "fp32"

    @property
    def dtype(self) -> torch.dtype:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.mode, torch.float32)

    def autocast(self) -> contextlib.AbstractContextManager:
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer, params: Iterable[torch.nn.Parameter]) -> bool:
        """zero_grad, backward, unscale, check, step. Returns whether the optimizer stepped."""
        optimizer.zero_grad(set_to_none=True)
        if not self.enabled:
            loss.backward()
            optimizer.step()
            return True
        (loss.float() * self.scale).backward()
        grads = [p.grad for p in params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, 1.0 / self.scale)
            norms = torch.stack(torch._foreach_norm(grads))
            finite = bool(torch.isfinite(norms).all())
            all_zero = bool((norms == 0).all())
        else:
            finite, all_zero = True, True
        if not finite:
            self.overflows += 1
            self.bad_in_row += 1
            self.good_in_row = 0
            self.scale = max(self.cfg.min_scale, self.scale * self.cfg.backoff_factor)
            optimizer.zero_grad(set_to_none=True)
            log.info("%s: non-finite gradients, step skipped, loss scale -> %g", self.name, self.scale)
            if self.bad_in_row >= self.cfg.fallback_after:
                self.fallback()
            return False
        if all_zero and bool(loss.detach().abs() > 0) and self.scale < self.cfg.max_scale:
            self.underflows += 1
            self.scale = min(self.cfg.max_scale, self.scale * self.cfg.growth_factor)
            optimizer.zero_grad(set_to_none=True)
            log.info("%s: gradients underflowed to zero, step skipped, loss scale -> %g", self.name, self.scale)
            return False
        optimizer.step()
        self.bad_in_row = 0
        self.good_in_row += 1
        if self.good_in_row % self.cfg.growth_interval == 0:
            self.scale = min(self.cfg.max_scale, self.scale * self.cfg.growth_factor)
        return True

    def fallback(self) -> None:
        """Switch this module to fp32 for the rest of the run."""
        if self.enabled:
            log.warning("%s: gradients were non-finite %d steps in a row in %s; falling back to fp32 for this module.",
                        self.name, self.bad_in_row, self.mode)
        self.mode, self.scale, self.fell_back, self.bad_in_row = "fp32", 1.0, True, 0

    def state(self) -> dict:
        return {"mode": self.mode, "scale": self.scale, "overflows": self.overflows, "underflows": self.underflows,
                "fell_back": self.fell_back, "good_in_row": self.good_in_row, "bad_in_row": self.bad_in_row}

    def load_state(self, d: dict) -> None:
        self.mode, self.scale = d["mode"], float(d["scale"])
        self.overflows, self.underflows = int(d["overflows"]), int(d["underflows"])
        self.fell_back, self.good_in_row, self.bad_in_row = bool(d["fell_back"]), int(d["good_in_row"]), int(d["bad_in_row"])
