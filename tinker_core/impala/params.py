"""`ParamStore`: the newest published weights and their version, which actors pull from.

The learner publishes after its updates; an actor asks for weights newer than the ones it holds,
without waiting (asynchronous mode) or waiting until they exist (synchronous mode). The same class
runs in this process or as a threaded Ray actor (``max_concurrency`` above the number of actors, so
a waiting actor does not block the learner's publish)."""

from __future__ import annotations

import threading
import time
from typing import Any


class ParamStore:
    """Version-stamped weights; a publish with an older version than held is ignored."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._version = -2  # nothing published yet (-1 is the initial weights' version)
        self._weights: Any = None

    def publish(self, version: int, weights: Any) -> int:
        """Hold ``weights`` as version ``version`` (if newer than what is held); returns the held version."""
        with self._cond:
            if int(version) > self._version:
                self._version, self._weights = int(version), weights
                self._cond.notify_all()
            return self._version

    def version(self) -> int:
        return self._version

    def get(self, newer_than: int, timeout_s: float = 0.0) -> tuple[int, Any] | None:
        """(version, weights) newer than ``newer_than``, waiting up to ``timeout_s``; None if none came."""
        deadline = time.monotonic() + max(0.0, float(timeout_s))
        with self._cond:
            while self._version <= newer_than:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._cond.wait(left)
            return self._version, self._weights


class RemoteParams:
    """A Ray actor handle of a `ParamStore` with the store's own (blocking) interface."""

    def __init__(self, handle: Any):
        self.handle = handle

    def publish(self, version: int, weights: Any) -> None:
        self.handle.publish.remote(version, weights)  # fire and forget: the store keeps the newest

    def version(self) -> int:
        import ray

        return int(ray.get(self.handle.version.remote()))

    def get(self, newer_than: int, timeout_s: float = 0.0) -> tuple[int, Any] | None:
        import ray

        return ray.get(self.handle.get.remote(newer_than, timeout_s))
