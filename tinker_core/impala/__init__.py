"""IMPALA's runtime: actors that collect trajectories with a possibly stale policy, the bounded queue
that carries them to the learner, the store actors pull weights from, and the pool that runs them on
threads in this process or as Ray actors (locally or on a cluster). The learner is
`tinker_core.algos.impala.IMPALA`."""

from tinker_core.impala.pool import ActorPool, LagStats
from tinker_core.impala.trajectory import Trajectory, TrajectoryBatch

__all__ = ["ActorPool", "LagStats", "Trajectory", "TrajectoryBatch"]
