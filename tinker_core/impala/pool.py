"""`ActorPool`: IMPALA's actors, their bounded trajectory queue and the weight store, on threads in this
process (``backend="local"``) or as Ray actors (``backend="ray"``: a local Ray, or a cluster's with
``ray_address``). The learner sees the same four calls either way: `publish`, `get`, `stats`, `close`.

Policy lag: for every trajectory the learner takes, learner version (its update count) minus the
version that acted; `LagStats` keeps the distribution."""

from __future__ import annotations

import queue as queue_mod
import threading
import time
from collections import Counter
from typing import Any, Callable

import numpy as np

from tinker_core.errors import TransportError
from tinker_core.impala.actor import ImpalaActor
from tinker_core.impala.params import ParamStore, RemoteParams
from tinker_core.impala.queue import LocalQueue, RayQueue
from tinker_core.impala.trajectory import Trajectory


class LagStats:
    """Distribution of policy lag (learner version minus behaviour version) over trajectories."""

    def __init__(self) -> None:
        self.counts: Counter[int] = Counter()

    def add(self, lags: Any) -> None:
        self.counts.update(int(x) for x in np.atleast_1d(lags))

    def summary(self) -> dict:
        """count, mean, p50/p90/p99, max and the histogram {lag: trajectories}."""
        n = sum(self.counts.values())
        if n == 0:
            return {"count": 0}
        values = np.repeat(np.array(sorted(self.counts)), [self.counts[k] for k in sorted(self.counts)])
        return {"count": int(n), "mean": float(values.mean()), "p50": float(np.percentile(values, 50)),
                "p90": float(np.percentile(values, 90)), "p99": float(np.percentile(values, 99)),
                "max": int(values.max()), "histogram": {str(k): int(self.counts[k]) for k in sorted(self.counts)}}


class ActorPool:
    """Start ``config.num_actors`` actors feeding a queue of ``config.queue_size`` trajectories."""

    def __init__(self, env_factory: Callable[[], Any], specs: tuple[Any, Any], config: Any, seed: int = 0):
        self.config = config
        self.sync = config.mode == "sync"
        self.unrolls_per_round = config.batch_trajectories // config.num_actors if self.sync else 1
        args = [dict(env_factory=env_factory, specs=specs, config=config, actor_id=i, sync=self.sync,
                     unrolls_per_round=self.unrolls_per_round, seed=seed) for i in range(config.num_actors)]
        self.ray = config.backend == "ray"
        self._errors: list[BaseException] = []
        if self.ray:
            self._start_ray(args)
        else:
            self._start_local(args)

    # -- start ---------------------------------------------------------------------------------
    def _start_local(self, args: list[dict]) -> None:
        self.queue: Any = LocalQueue(self.config.queue_size)
        self.params: Any = ParamStore()
        self.actors = [ImpalaActor(trajectory_queue=self.queue, params=self.params, **a) for a in args]
        self._threads = [threading.Thread(target=self._run_local, args=(a,), name=f"tinker-impala-{a.actor_id}",
                                          daemon=True) for a in self.actors]
        for t in self._threads:
            t.start()

    def _run_local(self, actor: ImpalaActor) -> None:
        try:
            actor.run()
        except BaseException as e:  # reported by the learner's next get
            self._errors.append(e)

    def _start_ray(self, args: list[dict]) -> None:
        import ray

        c = self.config
        if not ray.is_initialized():
            ray.init(address=c.ray_address, include_dashboard=False)
        self.queue = RayQueue(c.queue_size)
        store = ray.remote(ParamStore).options(num_cpus=0, max_concurrency=c.num_actors + 4).remote()
        self.params = RemoteParams(store)
        remote = ray.remote(ImpalaActor).options(num_cpus=c.actor_cpus, max_concurrency=3)
        self.actors = [remote.remote(trajectory_queue=self.queue, params=self.params, **a) for a in args]
        self._runs = [a.run.remote() for a in self.actors]

    # -- the learner's side --------------------------------------------------------------------
    def publish(self, version: int, payload: dict) -> None:
        """Make ``payload`` (`IMPALA.actor_payload`: weights and env settings) version ``version``."""
        self.params.publish(version, payload)

    def get(self, n: int, timeout_s: float = 120.0) -> list[Trajectory]:
        """``n`` trajectories in arrival order, waiting for them; TransportError when an actor failed
        or none came for ``timeout_s``."""
        out: list[Trajectory] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < n:
            try:
                out += self.queue.get_batch(n - len(out), timeout=0.5)
                deadline = time.monotonic() + timeout_s
                continue
            except queue_mod.Empty:
                pass
            self._raise_failed()
            if time.monotonic() > deadline:
                raise TransportError(f"IMPALA learner: no trajectory from the {self.config.num_actors} actors in "
                                     f"{timeout_s} s (got {len(out)} of {n}); actor stats {self.stats()}")
        return out

    def _raise_failed(self) -> None:
        if self._errors:
            raise TransportError(f"IMPALA actor failed: {self._errors[0]!r}") from self._errors[0]
        if self.ray:
            import ray

            done, _ = ray.wait(self._runs, num_returns=len(self._runs), timeout=0)
            for ref in done:
                try:
                    ray.get(ref)
                except Exception as e:
                    raise TransportError(f"IMPALA actor failed: {e}") from e
                raise TransportError("IMPALA actor stopped while the learner still waits for trajectories")
        elif not all(t.is_alive() for t in self._threads):
            raise TransportError("IMPALA actor thread stopped while the learner still waits for trajectories")

    def wait_ready(self, timeout_s: float = 300.0) -> list[dict]:
        """Block until every actor is built (Ray actors start a process and import torch: seconds)."""
        if self.ray:
            import ray

            return ray.get([a.stats.remote() for a in self.actors], timeout=timeout_s)
        return self.stats()

    def qsize(self) -> int:
        return int(self.queue.qsize())

    def stats(self) -> list[dict]:
        if self.ray:
            import ray

            return ray.get([a.stats.remote() for a in self.actors], timeout=30)
        return [a.stats() for a in self.actors]

    def close(self) -> list[dict]:
        """Stop the actors (unblocking any waiting on the queue), free their envs; returns last stats."""
        if not self.actors:
            return []
        if self.ray:
            import ray

            ray.get([a.stop.remote() for a in self.actors], timeout=30)
            try:
                ray.get(self._runs, timeout=30)
            except Exception:
                pass  # a failed actor was already reported by get
            stats = self.stats()
            ray.get([a.close.remote() for a in self.actors], timeout=30)
            for a in self.actors:
                ray.kill(a)
            ray.kill(self.params.handle)
            self.queue.close()
        else:
            for a in self.actors:
                a.stop()
            for t in self._threads:
                t.join(timeout=30)
            stats = self.stats()
            for a in self.actors:
                a.close()
        self.actors = []
        return stats

    def __enter__(self) -> "ActorPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
