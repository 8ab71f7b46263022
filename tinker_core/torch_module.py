"""`TorchModule`: a `ModuleBase` whose state is a torch ``state_dict``.

Kept apart from `module.py` so that torch-free installs (the edge runtime) never import torch.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from tinker_core.errors import CheckpointError
from tinker_core.module import C, ModuleBase


class TorchModule(ModuleBase[C], nn.Module):
    """A module with torch parameters; ``forward`` takes and returns tensors or numpy arrays."""

    def __init__(self, config: C | None = None):
        nn.Module.__init__(self)
        ModuleBase.__init__(self, config)

    def __call__(self, x: Any) -> Any:  # nn.Module.__call__ runs hooks; keep that path
        return nn.Module.__call__(self, x)

    def get_state(self) -> dict[str, np.ndarray]:
        return {k: v.detach().cpu().contiguous().numpy().copy() for k, v in self.state_dict().items()}

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        own = self.state_dict()
        missing = sorted(set(own) - set(state))
        extra = sorted(set(state) - set(own))
        if missing or extra:
            raise CheckpointError(f"{type(self).__name__}: state mismatch, missing {missing}, unexpected {extra}")
        for k in own:
            v = state[k]
            if tuple(own[k].shape) != tuple(v.shape):
                raise CheckpointError(
                    f"{type(self).__name__}.{k}: expected shape {tuple(own[k].shape)}, file has {tuple(v.shape)}")
        self.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})

    def train(self, mode: bool = True):  # keep nn.Module semantics
        return nn.Module.train(self, mode)
