"""Perception encoders: images (NatureCNN, MobileNet-style), joint state, short histories, fusion; maps and images at
several scales in `tinker_core.nn.spatial`.

Images are ``uint8[H, W, C]`` (channels last, as gymnasium and cameras give them); each image
encoder scales to [0, 1] and moves channels first itself, so the exported graph takes camera bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import torch
from torch import nn

from tinker_core.errors import ConfigError, SpecError
from tinker_core.nn.base import PerceptionModule
from tinker_core.nn.spatial import MultiScaleSpatial
from tinker_core.spec import AnySpec, DictSpec, Spec

_ACTS = {"relu": nn.ReLU, "tanh": nn.Tanh, "elu": nn.ELU, "silu": nn.SiLU}


def activation(name: str) -> type[nn.Module]:
    if name not in _ACTS:
        raise ConfigError(f"activation: expected one of {sorted(_ACTS)}, got {name!r}")
    return _ACTS[name]


def mlp(in_dim: int, hidden: list[int], out_dim: int | None, act: str = "relu", out_act: bool = False) -> nn.Sequential:
    """Linear layers with ``act`` between them; ``out_dim=None`` ends at the last hidden layer."""
    layers: list[nn.Module] = []
    d = in_dim
    for h in hidden:
        layers += [nn.Linear(d, h), activation(act)()]
        d = h
    if out_dim is not None:
        layers.append(nn.Linear(d, out_dim))
        if out_act:
            layers.append(activation(act)())
    return nn.Sequential(*layers)


def _image_spec(spec: AnySpec, where: str) -> tuple[int, int, int]:
    if not isinstance(spec, Spec) or len(spec.shape) != 3:
        raise SpecError(f"{where}: expected an image spec uint8[H,W,C], got {spec!r}")
    h, w, c = spec.shape
    if c > 4 or h < 16 or w < 16:
        raise SpecError(f"{where}: expected channels-last uint8[H>=16,W>=16,C<=4], got {spec.describe()}")
    return h, w, c


def _vector_dim(spec: AnySpec, where: str) -> int:
    if not isinstance(spec, Spec) or len(spec.shape) > 1:
        raise SpecError(f"{where}: expected a vector spec float32[N], got {spec!r}")
    return max(1, spec.size)


class _ImageIn(nn.Module):
    """uint8 HWC -> float CHW in [0, 1]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 3, 1, 2).float() * (1.0 / 255.0)


# -- flat vectors --------------------------------------------------------------------------------
@dataclass
class FlattenConfig:
    """Flattening needs no settings."""


def flat_keys(spec: AnySpec, where: str = "Flatten.obs") -> list[tuple[str, int]] | None:
    """``[(key, size)]`` in the dict's order for a dict of vector (non-image) specs, None for a plain spec."""
    if not isinstance(spec, DictSpec):
        return None
    out = []
    for k, s in spec.items():
        if not isinstance(s, Spec) or len(s.shape) >= 3:
            raise SpecError(f"{where}[{k!r}]: flatten takes vector fields only (not images or nested dicts), got "
                            f"{s!r}; use perception 'dict' for these")
        out.append((k, max(1, s.size)))
    return out


def flatten_np(obs: Any, keys: list[tuple[str, int]]) -> np.ndarray:
    """A batch of dict observations -> float32 ``[n, sum(sizes)]``, the fields concatenated in ``keys``'
    order: what `Flatten` computes, in numpy (how the off-policy replay stores dict observations)."""
    first = np.asarray(obs[keys[0][0]])
    n = first.shape[0]
    out = np.empty((n, sum(d for _, d in keys)), dtype=np.float32)
    i = 0
    for k, d in keys:
        out[:, i:i + d] = np.asarray(obs[k]).reshape(n, d)
        i += d
    return out


class Flatten(PerceptionModule):
    """Identity for vector observations (cast to float32, flattened): the default for MLP policies.

    For a dict of vectors (a goal-conditioned env's ``observation``/``achieved_goal``/``desired_goal``)
    it concatenates the fields in the spec's order; given an already flattened tensor (what the
    off-policy replay stores, `flatten_np`) it passes it through, so the training step sees one flat
    vector while the exported graph takes the dict."""

    config_class = FlattenConfig

    def __init__(self, obs_spec: AnySpec, config: FlattenConfig | None = None):
        super().__init__(config)
        self.input_spec = obs_spec
        self.keys = flat_keys(obs_spec)
        self._set_output(sum(d for _, d in self.keys) if self.keys is not None
                         else max(1, obs_spec.size))  # type: ignore[union-attr]

    def forward(self, x: Any) -> torch.Tensor:
        if isinstance(x, Mapping):  # decided when traced: the exported graph has no branch
            return torch.cat([x[k].reshape(x[k].shape[0], -1).float() for k, _ in self.keys], dim=-1)  # type: ignore[union-attr]
        return x.reshape(x.shape[0], -1).float()


@dataclass
class JointMLPConfig:
    hidden: list[int] = field(default_factory=lambda: [128, 128])
    """Hidden layer widths."""
    features_dim: int = 64
    """Width of the output feature vector."""
    activation: str = "relu"
    """Nonlinearity: relu, tanh, elu or silu."""


class JointMLP(PerceptionModule):
    """MLP over a joint-state vector (positions, velocities, targets)."""

    config_class = JointMLPConfig

    def __init__(self, obs_spec: Spec, config: JointMLPConfig | None = None):
        super().__init__(config)
        c = self.config
        self.input_spec = obs_spec
        self.net = mlp(_vector_dim(obs_spec, "JointMLP.obs"), c.hidden, c.features_dim, c.activation, out_act=True)
        self._set_output(c.features_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.reshape(x.shape[0], -1).float())


# -- images --------------------------------------------------------------------------------------
@dataclass
class NatureCNNConfig:
    features_dim: int = 256
    """Width of the output feature vector."""


class NatureCNN(PerceptionModule):
    """The DQN-Nature CNN (8x8/4, 4x4/2, 3x3/1) for 64-96 px images."""

    config_class = NatureCNNConfig

    def __init__(self, obs_spec: Spec, config: NatureCNNConfig | None = None):
        super().__init__(config)
        h, w, c = _image_spec(obs_spec, "NatureCNN.obs")
        self.input_spec = obs_spec
        self.trunk = nn.Sequential(
            _ImageIn(),
            nn.Conv2d(c, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
        )
        with torch.no_grad():
            n = self.trunk(torch.zeros(1, h, w, c, dtype=torch.uint8)).flatten(1).shape[1]
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(n, self.config.features_dim), nn.ReLU())
        self._set_output(self.config.features_dim)

    def feature_map(self, x: torch.Tensor) -> torch.Tensor:
        return self.trunk(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(x))


class _DepthwiseSeparable(nn.Sequential):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__(
            nn.Conv2d(cin, cin, 3, stride=stride, padding=1, groups=cin, bias=False),
            nn.BatchNorm2d(cin), nn.ReLU6(),
            nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU6(),
        )


@dataclass
class DepthwiseConfig:
    width: int = 16
    """Channels of the first layer; each stride-2 block doubles them."""
    blocks: int = 4
    """Depthwise-separable blocks (stride 2 each)."""
    features_dim: int = 128
    """Width of the output feature vector."""


class DepthwiseEncoder(PerceptionModule):
    """MobileNet-v1-style encoder (depthwise 3x3 + pointwise 1x1) for edge CPUs; a fraction of NatureCNN's FLOPs."""

    config_class = DepthwiseConfig

    def __init__(self, obs_spec: Spec, config: DepthwiseConfig | None = None):
        super().__init__(config)
        c = self.config
        _, _, ch = _image_spec(obs_spec, "DepthwiseEncoder.obs")
        self.input_spec = obs_spec
        layers: list[nn.Module] = [_ImageIn(), nn.Conv2d(ch, c.width, 3, stride=2, padding=1, bias=False),
                                   nn.BatchNorm2d(c.width), nn.ReLU6()]
        w = c.width
        for _ in range(c.blocks):
            layers.append(_DepthwiseSeparable(w, w * 2, 2))
            w *= 2
        self.trunk = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(w, c.features_dim), nn.ReLU())
        self._set_output(c.features_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(x))


# -- short histories -----------------------------------------------------------------------------
def _history_spec(spec: AnySpec, where: str) -> tuple[int, int]:
    if not isinstance(spec, Spec) or len(spec.shape) != 2:
        raise SpecError(f"{where}: expected a history spec float32[T,N], got {spec!r}")
    return spec.shape  # type: ignore[return-value]


@dataclass
class LSTMConfig:
    hidden: int = 64
    """LSTM hidden size, which is also the feature width."""
    layers: int = 1
    """Stacked LSTM layers."""


class LSTMEncoder(PerceptionModule):
    """LSTM over a fixed window ``[T, N]`` of past observations; features = last hidden state.

    The window comes in whole each step (stateless between calls), so the exported graph has no
    recurrent state to carry and the deployed node just keeps a ring buffer.
    """

    config_class = LSTMConfig

    def __init__(self, obs_spec: Spec, config: LSTMConfig | None = None):
        super().__init__(config)
        _, n = _history_spec(obs_spec, "LSTMEncoder.obs")
        self.input_spec = obs_spec
        self.lstm = nn.LSTM(n, self.config.hidden, num_layers=self.config.layers, batch_first=True)
        self._set_output(self.config.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x.float())
        return out[:, -1]


@dataclass
class TemporalCNNConfig:
    channels: int = 64
    """Channels of each temporal convolution."""
    kernel: int = 3
    """Kernel size along time."""
    features_dim: int = 64
    """Width of the output feature vector."""


class TemporalCNN(PerceptionModule):
    """Two 1-D convolutions along time over a ``[T, N]`` window, then a linear head."""

    config_class = TemporalCNNConfig

    def __init__(self, obs_spec: Spec, config: TemporalCNNConfig | None = None):
        super().__init__(config)
        c = self.config
        t, n = _history_spec(obs_spec, "TemporalCNN.obs")
        if t < c.kernel:
            raise ConfigError(f"TemporalCNN.kernel: expected <= history length {t}, got {c.kernel}")
        self.input_spec = obs_spec
        self.conv = nn.Sequential(nn.Conv1d(n, c.channels, c.kernel, padding=c.kernel // 2), nn.ReLU(),
                                  nn.Conv1d(c.channels, c.channels, c.kernel, padding=c.kernel // 2), nn.ReLU())
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(c.channels * t, c.features_dim), nn.ReLU())
        self._set_output(c.features_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x.float().transpose(1, 2)))


# -- fusion --------------------------------------------------------------------------------------
@dataclass
class FusionConfig:
    image_key: str = "image"
    """Key of the camera image in the dict observation."""
    joints_key: str = "joints"
    """Key of the joint-state vector in the dict observation."""
    dim: int = 64
    """Token width for the attention."""
    heads: int = 4
    """Attention heads (dim must divide by it)."""
    features_dim: int = 128
    """Width of the output feature vector."""

    def __post_init__(self) -> None:
        if self.dim % self.heads:
            raise ConfigError(f"FusionConfig.dim: expected a multiple of heads={self.heads}, got {self.dim}")


class CrossModalFusion(PerceptionModule):
    """Cross-modal attention: the joint-state embedding queries the CNN's spatial tokens.

    Image -> conv feature map -> H*W tokens; joints -> MLP -> one query per head; softmax attention
    picks the image regions relevant to the arm's state; output = MLP([attended, joint embedding]).
    Attention is written out (no nn.MultiheadAttention) so the ONNX graph is plain MatMul/Softmax.
    """

    config_class = FusionConfig

    def __init__(self, obs_spec: DictSpec, config: FusionConfig | None = None):
        super().__init__(config)
        c = self.config
        if not isinstance(obs_spec, DictSpec) or c.image_key not in obs_spec.fields or c.joints_key not in obs_spec.fields:
            raise SpecError(f"CrossModalFusion.obs: expected a dict spec with keys {c.image_key!r} and "
                            f"{c.joints_key!r}, got {obs_spec!r}")
        h, w, ch = _image_spec(obs_spec[c.image_key], f"CrossModalFusion.obs[{c.image_key!r}]")
        nj = _vector_dim(obs_spec[c.joints_key], f"CrossModalFusion.obs[{c.joints_key!r}]")
        self.input_spec = obs_spec
        self.image = nn.Sequential(_ImageIn(), nn.Conv2d(ch, 32, 5, stride=2, padding=2), nn.ReLU(),
                                   nn.Conv2d(32, c.dim, 3, stride=2, padding=1), nn.ReLU(),
                                   nn.Conv2d(c.dim, c.dim, 3, stride=2, padding=1))
        self.joints = mlp(nj, [c.dim], c.dim, "relu")
        self.q = nn.Linear(c.dim, c.dim)
        self.kv = nn.Linear(c.dim, 2 * c.dim)
        self.out = mlp(2 * c.dim, [c.features_dim], c.features_dim, "relu", out_act=True)
        self.heads, self.dh = c.heads, c.dim // c.heads
        self.scale = 1.0 / math.sqrt(self.dh)
        self._set_output(c.features_dim)

    def forward(self, obs: dict) -> torch.Tensor:
        c = self.config
        fmap = self.image(obs[c.image_key])                       # [B, D, h, w]
        b = fmap.shape[0]
        tokens = fmap.flatten(2).transpose(1, 2)                  # [B, T, D]
        j = self.joints(obs[c.joints_key].reshape(b, -1).float())  # [B, D]
        q = self.q(j).reshape(b, self.heads, 1, self.dh)          # [B, H, 1, dh]
        k, v = self.kv(tokens).chunk(2, dim=-1)
        k = k.reshape(b, -1, self.heads, self.dh).transpose(1, 2)  # [B, H, T, dh]
        v = v.reshape(b, -1, self.heads, self.dh).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-1, -2) * self.scale, dim=-1)
        ctx = (att @ v).reshape(b, self.heads * self.dh)
        return self.out(torch.cat([ctx, j], dim=-1))


class DictConcat(PerceptionModule):
    """Default for dict observations: NatureCNN per image key, flatten per vector key, concatenated."""

    config_class = FlattenConfig

    def __init__(self, obs_spec: DictSpec, config: FlattenConfig | None = None):
        super().__init__(config)
        self.input_spec = obs_spec
        self.keys = list(obs_spec.fields)
        encs = {}
        for k, s in obs_spec.items():
            if not isinstance(s, Spec):
                raise SpecError(f"DictConcat.obs[{k!r}]: nested dicts are not supported, got {s!r}")
            encs[k] = NatureCNN(s) if len(s.shape) == 3 else Flatten(s)
        self.encoders = nn.ModuleDict(encs)
        self._set_output(sum(e.features_dim for e in encs.values()))

    def forward(self, obs: dict) -> torch.Tensor:
        return torch.cat([self.encoders[k](obs[k]) for k in self.keys], dim=-1)


ENCODERS: dict[str, type[PerceptionModule]] = {
    "flatten": Flatten, "joint_mlp": JointMLP, "nature_cnn": NatureCNN, "depthwise": DepthwiseEncoder,
    "lstm": LSTMEncoder, "temporal_cnn": TemporalCNN, "fusion": CrossModalFusion, "dict": DictConcat,
    "multiscale": MultiScaleSpatial,
}


def build_perception(obs_spec: AnySpec, kind: str = "auto") -> PerceptionModule:
    """The encoder named ``kind`` for ``obs_spec``; ``auto`` picks by the spec's shape (an image: NatureCNN, float
    map planes: the multi-scale spatial encoder)."""
    if kind == "auto":
        if isinstance(obs_spec, DictSpec):
            kind = "dict"
        elif len(obs_spec.shape) == 3:
            kind = "nature_cnn" if obs_spec.dtype == "uint8" else "multiscale"
        else:
            kind = "flatten"
    if kind not in ENCODERS:
        raise ConfigError(f"perception: expected 'auto' or one of {sorted(ENCODERS)}, got {kind!r}")
    return ENCODERS[kind](obs_spec)  # type: ignore[arg-type]
