"""`MultiScaleSpatial`: an encoder for image or map observations that keeps where things are, at several scales.

A game map or a camera image asks two things of an encoder: what is there, and where. A CNN that ends in one
flattening layer (`NatureCNN`) learns the where only through its last linear layer, at one scale. Here each level
halves the resolution (a stride-2 3x3 convolution, then a 3x3 convolution, ReLU after each; the first level keeps
the input's resolution, the channels double at each level), and every level's feature map is summarized per channel
by its mean, its max and the expected position of its activation (a spatial soft-argmax with a learned temperature
per level: x and y in [-1, 1]). So a
fine level says where a small thing is, and a coarse level what the region around it holds. The summaries of all
levels are concatenated and projected to ``features_dim``.

Maps (float32 ``[H, W, C]`` planes: unit counts, terrain, ...) are taken as they are; uint8 images are scaled to
[0, 1]. Both are channels last, as gymnasium gives them. Everything in ``forward`` exports to ONNX (opset 17).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from tinker_core.errors import SpecError
from tinker_core.nn.base import PerceptionModule
from tinker_core.spec import AnySpec, Spec

MAX_CHANNELS = 64
"""map planes or image channels the encoder takes"""


@dataclass
class MultiScaleConfig:
    width: int = 16
    """Channels of the first level; each further level doubles them."""
    levels: int = 3
    """Resolutions: H, H/2, H/4, ... (each at least 2 cells wide)."""
    features_dim: int = 128
    """Width of the output feature vector."""


def _spatial_spec(spec: AnySpec, levels: int, where: str) -> tuple[int, int, int]:
    if not isinstance(spec, Spec) or len(spec.shape) != 3:
        raise SpecError(f"{where}: expected a map or image spec [H, W, C] (channels last), got {spec!r}")
    h, w, c = spec.shape
    smallest = 2 ** levels
    if c > MAX_CHANNELS or h < smallest or w < smallest:
        raise SpecError(f"{where}: expected [H>={smallest}, W>={smallest}, C<={MAX_CHANNELS}] for {levels} levels, "
                        f"got {spec.describe()}")
    if spec.dtype not in ("uint8", "float32"):
        raise SpecError(f"{where}: expected uint8 (an image) or float32 (map planes), got {spec.dtype}")
    return h, w, c


class MultiScaleSpatial(PerceptionModule):
    """Image or map ``[H, W, C]`` -> per level (mean, max, soft-argmax x/y of each channel) -> features."""

    config_class = MultiScaleConfig

    def __init__(self, obs_spec: Spec, config: MultiScaleConfig | None = None):
        super().__init__(config)
        c = self.config
        h, w, ch = _spatial_spec(obs_spec, c.levels, "MultiScaleSpatial.obs")
        self.input_spec = obs_spec
        self.scale = 1.0 / 255.0 if obs_spec.dtype == "uint8" else 1.0
        stages, cin = [], ch
        for i in range(c.levels):
            cout = c.width * 2 ** i
            stages.append(nn.Sequential(nn.Conv2d(cin, cout, 3, stride=1 if i == 0 else 2, padding=1), nn.ReLU(),
                                        nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU()))
            cin = cout
        self.stages = nn.ModuleList(stages)
        with torch.no_grad():
            maps = self.feature_maps(torch.zeros(1, h, w, ch))
        for i, m in enumerate(maps):
            mh, mw = m.shape[-2:]
            ys, xs = torch.meshgrid(torch.linspace(-1.0, 1.0, mh), torch.linspace(-1.0, 1.0, mw), indexing="ij")
            self.register_buffer(f"grid{i}", torch.stack([xs.flatten(), ys.flatten()], dim=1))  # [N, 2]
        self.log_temperature = nn.Parameter(torch.zeros(c.levels))
        """per level, the soft-argmax's sharpness (learned: a peak can come to dominate its map)"""
        self.head = nn.Sequential(nn.Linear(sum(4 * m.shape[1] for m in maps), c.features_dim), nn.ReLU())
        self._set_output(c.features_dim)

    def feature_maps(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Each level's feature map ``[B, C_i, H_i, W_i]``, finest first."""
        h = x.permute(0, 3, 1, 2).float() * self.scale
        out = []
        for stage in self.stages:
            h = stage(h)
            out.append(h)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = []
        for i, m in enumerate(self.feature_maps(x)):
            flat = m.flatten(2)  # [B, C, N]
            sharp = flat * torch.exp(self.log_temperature[i])
            where = torch.matmul(torch.softmax(sharp, dim=-1), getattr(self, f"grid{i}"))  # [B, C, 2]
            parts += [flat.mean(-1), flat.amax(-1), where.flatten(1)]
        return self.head(torch.cat(parts, dim=-1))
