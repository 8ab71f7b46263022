"""The bounded trajectory queue between the actors and the learner, in this process or as a Ray actor.

Both forms have the same two calls: ``put(item, block=True, timeout=None)`` raises `queue.Full`
when no slot frees within ``timeout`` (the actor retries: actors block on a full queue, nothing is
dropped); ``get_batch(n, timeout)`` returns 1..n items in arrival order, waiting up to ``timeout``
for the first, and raises `queue.Empty` when none came. Taking several items per call matters on
Ray, where each call is a round trip to the queue's actor."""

from __future__ import annotations

import asyncio
import queue as queue_mod
from typing import Any

from tinker_core.errors import ConfigError


class LocalQueue:
    """A `queue.Queue` of ``maxsize`` items with `get_batch`."""

    def __init__(self, maxsize: int):
        if int(maxsize) < 1:
            raise ConfigError(f"trajectory queue: maxsize expected >= 1, got {maxsize}")
        self.q: queue_mod.Queue = queue_mod.Queue(maxsize=int(maxsize))
        self.maxsize = int(maxsize)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self.q.put(item, block=block, timeout=timeout)

    def get_batch(self, n: int, timeout: float | None = None) -> list[Any]:
        out = [self.q.get(block=True, timeout=timeout)]
        while len(out) < n:
            try:
                out.append(self.q.get_nowait())
            except queue_mod.Empty:
                break
        return out

    def qsize(self) -> int:
        return self.q.qsize()

    def close(self) -> None:
        pass


class _QueueActor:
    """The Ray actor behind `RayQueue` (async: waiting puts and gets do not block each other)."""

    def __init__(self, maxsize: int):
        self.q: asyncio.Queue = asyncio.Queue(maxsize=int(maxsize))

    async def put(self, item: Any, timeout: float | None) -> bool:
        try:
            await asyncio.wait_for(self.q.put(item), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def get_batch(self, n: int, timeout: float | None) -> list[Any]:
        try:
            out = [await asyncio.wait_for(self.q.get(), timeout)]
        except asyncio.TimeoutError:
            return []
        while len(out) < n and not self.q.empty():
            out.append(self.q.get_nowait())
        return out

    def qsize(self) -> int:
        return self.q.qsize()


class RayQueue:
    """The bounded queue as a Ray actor (0 CPUs); picklable, so actors get it as an argument."""

    def __init__(self, maxsize: int):
        import ray

        if int(maxsize) < 1:
            raise ConfigError(f"trajectory queue: maxsize expected >= 1, got {maxsize}")
        self.maxsize = int(maxsize)
        self.handle = ray.remote(_QueueActor).options(num_cpus=0, max_concurrency=1000).remote(self.maxsize)

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        import ray

        if not ray.get(self.handle.put.remote(item, timeout if block else 0.0)):
            raise queue_mod.Full

    def get_batch(self, n: int, timeout: float | None = None) -> list[Any]:
        import ray

        out = ray.get(self.handle.get_batch.remote(int(n), timeout))
        if not out:
            raise queue_mod.Empty
        return out

    def qsize(self) -> int:
        import ray

        return int(ray.get(self.handle.qsize.remote()))

    def close(self) -> None:
        import ray

        ray.kill(self.handle)
