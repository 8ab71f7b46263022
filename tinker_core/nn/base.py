"""`PerceptionModule`: a `TorchModule` mapping observations to a flat float32 feature vector.

Takes a batched tensor (or a dict of them for dict observations) and returns ``[B, features_dim]``.
Given numpy input (the pipeline's case, unbatched), it adds the batch axis, runs without gradients
and returns numpy, so the same module serves the training graph, the pipeline and the ONNX export.
``forward`` holds no data-dependent Python control flow: everything in it exports to ONNX.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch

from tinker_core.spec import Spec
from tinker_core.torch_module import TorchModule


def _to_tensor(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _to_tensor(v) for k, v in x.items()}
    return torch.as_tensor(np.asarray(x))[None]


class PerceptionModule(TorchModule):
    """Base of every encoder: ``features_dim`` and a float32 ``[features_dim]`` output spec."""

    input_name = "obs"
    output_name = "features"
    features_dim: int = 0

    def _set_output(self, dim: int) -> None:
        self.features_dim = int(dim)
        self.output_spec = Spec((self.features_dim,), "float32")

    def __call__(self, x: Any) -> Any:
        if isinstance(x, np.ndarray) or (isinstance(x, Mapping) and any(isinstance(v, np.ndarray) for v in x.values())):
            p = next(self.parameters(), None)
            dev = p.device if p is not None else torch.device("cpu")
            t = _to_tensor(x)
            t = {k: v.to(dev) for k, v in t.items()} if isinstance(t, dict) else t.to(dev)
            with torch.no_grad():
                return super().__call__(t)[0].cpu().numpy()
        return super().__call__(x)
