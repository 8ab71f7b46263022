"""Training-loop facilities: checkpoints, hot-intervention control, logging and learning curves."""

from tinker_core.training.checkpoint import read_checkpoint, write_checkpoint
from tinker_core.training.control import Control
from tinker_core.training.logger import TrainingLogger, plot_learning_curves

__all__ = ["Control", "TrainingLogger", "plot_learning_curves", "read_checkpoint", "write_checkpoint"]
