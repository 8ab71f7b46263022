"""tinker_core: the ROS-free framework. One data contract (the transition), declared specs, a
validator at every edge, modules, the pipeline, the flow monitor, the tracer and the transport."""

from tinker_core.errors import (
    BundleError, CheckpointError, ConfigError, PipelineError, SpecError, TinkerError, TransportError,
    ValidationError,
)
from tinker_core.module import ModuleBase
from tinker_core.spec import DictSpec, Spec
from tinker_core.transition import Transition, TransitionBatch, TransitionSpec

__version__ = "0.1.0"

__all__ = [
    "BundleError", "CheckpointError", "ConfigError", "DictSpec", "ModuleBase", "PipelineError", "Spec",
    "SpecError", "TinkerError", "Transition", "TransitionBatch", "TransitionSpec", "TransportError",
    "ValidationError", "__version__",
]
