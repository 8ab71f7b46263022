"""The learner: a training process fed over ZeroMQ, with gated publishing and Ray rollout workers."""

from tinker_core.learner.config import LearnerConfig, resolve_device
from tinker_core.learner.distributed import DistributedConfig, DistributedTrainer
from tinker_core.learner.mix import MixedReplay
from tinker_core.learner.server import Learner
from tinker_core.learner.worker import RolloutWorker

__all__ = ["Learner", "LearnerConfig", "DistributedTrainer", "DistributedConfig", "MixedReplay", "RolloutWorker",
           "resolve_device"]
