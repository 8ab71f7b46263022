"""Perception modules: observation -> feature vector, each a `TorchModule` with specs, ONNX-exportable."""

from tinker_core.nn.base import PerceptionModule
from tinker_core.nn.encoders import (
    ENCODERS, CrossModalFusion, DepthwiseEncoder, DictConcat, Flatten, JointMLP, LSTMEncoder, NatureCNN,
    TemporalCNN, build_perception, flat_keys, flatten_np, mlp,
)
from tinker_core.nn.spatial import MultiScaleConfig, MultiScaleSpatial

__all__ = ["PerceptionModule", "ENCODERS", "CrossModalFusion", "DepthwiseEncoder", "DictConcat", "Flatten",
           "JointMLP", "LSTMEncoder", "MultiScaleConfig", "MultiScaleSpatial", "NatureCNN", "TemporalCNN",
           "build_perception", "flat_keys", "flatten_np", "mlp"]
