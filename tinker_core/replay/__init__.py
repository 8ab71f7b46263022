"""Experience replay: uniform and prioritized buffers over compressed, persistable ring storage."""

from tinker_core.replay.buffer import ReplayBuffer
from tinker_core.replay.persist import acked_count, load_replay, save_replay
from tinker_core.replay.prioritized import PrioritizedReplay
from tinker_core.replay.storage import RingStorage, StorageConfig, estimate_state_bytes
from tinker_core.replay.sumtree import SumTree

__all__ = ["ReplayBuffer", "PrioritizedReplay", "RingStorage", "StorageConfig", "SumTree",
           "save_replay", "load_replay", "acked_count", "estimate_state_bytes"]
