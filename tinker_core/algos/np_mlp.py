"""`NumpyMLP`: a CPU ``nn.Sequential`` of Linear/Tanh/ReLU layers evaluated with numpy on views of
its own weights, for acting one env step at a time.

At a batch of a few observations each torch call costs a dispatch of several microseconds while the
arithmetic costs less than one; numpy on the same memory does it in a fraction. The views share
storage with the parameters, so optimizer steps (in place) are seen without copying. Used by PPO's
rollout; training still runs through torch autograd.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


class NumpyMLP:
    """``forward(x)`` == ``seq(x)`` (float32, up to rounding); build with `NumpyMLP.of`."""

    def __init__(self, layers: list[tuple[str, np.ndarray | None, np.ndarray | None]]):
        self.layers = layers

    @classmethod
    def of(cls, seq: nn.Sequential | list[nn.Module]) -> "NumpyMLP | None":
        """The numpy twin of ``seq``, or None when a layer is not Linear/Tanh/ReLU or not on the CPU."""
        layers: list[tuple[str, np.ndarray | None, np.ndarray | None]] = []
        for m in seq:
            t = type(m)
            if t is nn.Linear:
                if m.weight.device.type != "cpu" or m.weight.dtype != torch.float32 or m.bias is None:
                    return None
                layers.append(("linear", m.weight.detach().numpy().T, m.bias.detach().numpy()))
            elif t is nn.Tanh:
                layers.append(("tanh", None, None))
            elif t is nn.ReLU:
                layers.append(("relu", None, None))
            else:
                return None
        return cls(layers)

    def __call__(self, x: np.ndarray, upto: int | None = None) -> np.ndarray:
        """Output of the first ``upto`` layers (all by default)."""
        own = False  # activations work in place once x is an array of ours, never on the caller's
        for kind, w, b in self.layers[:upto]:
            if kind == "linear":
                x = x @ w
                x += b
                own = True
            elif kind == "tanh":
                x = np.tanh(x, out=x if own else None)
            else:
                x = np.maximum(x, 0.0, out=x if own else None)
        return x
