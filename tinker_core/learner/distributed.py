"""`DistributedTrainer`: rollout workers as Ray actors (or in-process), feeding one learner over ZeroMQ.

The same `RolloutWorker` class runs on both backends: ``backend="local"`` builds the workers in this
process and runs them on threads, ``backend="ray"`` makes each one an actor in a placement group
(one bundle of ``resources_per_worker`` per worker, ``placement_strategy`` "PACK", "SPREAD",
"STRICT_PACK" or "STRICT_SPREAD"). With Ray already initialized (``ray.init(num_cpus=2)`` here,
``ray.init(address=...)`` on a cluster) the trainer uses it unchanged; otherwise it calls
``ray.init(address=ray_address)``.

``sync="sync"``: collection runs in rounds; before each round every worker waits for parameters
newer than those it used last (lockstep with the learner), and with ``updates_per_step`` for
parameters from at least that many learner updates per env step collected so far. Without that
floor the pace is set by whoever is faster: workers that step their envs faster than the learner
trains fill the replay with early-policy data (in the Pendulum test 0.5 updates per step instead of
SAC's usual 1-2), and the learner's later updates only re-fit that data, which it often cannot turn
into a good policy. ``sync="async"``: workers never wait; they pick up the newest parameters every
``param_sync_every`` env steps. ``update_interval`` and ``param_sync_every`` are also set on the
learner through its control socket when one is given.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from tinker_core.errors import ConfigError
from tinker_core.learner.worker import RolloutWorker

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


@dataclass
class DistributedConfig:
    """How rollout workers are placed and synchronized."""

    backend: str = "local"
    """"ray" (actors in a placement group) or "local" (threads in this process)."""
    num_workers: int = 2
    """Rollout workers, one env each."""
    resources_per_worker: dict = field(default_factory=lambda: {"CPU": 1, "GPU": 0})
    """Ray resources reserved per worker (one placement-group bundle each)."""
    placement_strategy: str = "PACK"
    """Ray placement strategy for the workers' bundles."""
    sync: str = "async"
    """"sync": rounds in lockstep with parameter updates; "async": workers never wait for parameters."""
    worker_cache_size: int = 256
    """Transitions a worker gathers before sending them in one go."""
    update_interval: int | None = None
    """Learner gradient update per this many transitions (sent to the learner via ctl; None leaves it)."""
    param_sync_every: int = 100
    """Env steps between a worker's looks for new parameters (also sent to the learner as its
    parameter publishing interval in updates, when a control endpoint is given)."""
    updates_per_step: float = 0.0
    """Sync mode: the least learner updates per env step collected (the replay ratio, as SAC's
    ``gradient_steps`` per step in-process) before the workers start the next round; 0 waits only for
    the next parameters. The learner must be allowed that many (``update_interval`` 0, or at most
    ``1 / updates_per_step``) or the workers wait until ``wait_timeout_s``."""
    ray_address: str | None = None
    """Ray cluster address used when Ray is not initialized yet (None: start a local Ray)."""
    seed: int = 0
    """Base seed; worker i uses ``seed + 7919 * i``."""

    def __post_init__(self) -> None:
        if self.backend not in ("ray", "local"):
            raise ConfigError(f"DistributedConfig.backend: expected 'ray' or 'local', got {self.backend!r}")
        if self.sync not in ("sync", "async"):
            raise ConfigError(f"DistributedConfig.sync: expected 'sync' or 'async', got {self.sync!r}")
        if self.placement_strategy not in STRATEGIES:
            raise ConfigError(f"DistributedConfig.placement_strategy: expected one of {STRATEGIES}, "
                              f"got {self.placement_strategy!r}")
        if int(self.num_workers) < 1:
            raise ConfigError(f"DistributedConfig.num_workers: expected >= 1, got {self.num_workers!r}")
        if float(self.updates_per_step) < 0:
            raise ConfigError(f"DistributedConfig.updates_per_step: expected >= 0, got {self.updates_per_step!r}")
        if float(self.updates_per_step) > 0 and self.sync != "sync":
            raise ConfigError(f"DistributedConfig.updates_per_step: needs sync='sync' (async workers never wait), "
                              f"got sync={self.sync!r} with updates_per_step={self.updates_per_step!r}")
        bad = {k: v for k, v in self.resources_per_worker.items() if float(v) < 0}
        if bad:
            raise ConfigError(f"DistributedConfig.resources_per_worker: negative amounts {bad}")


class DistributedTrainer:
    """Start workers, run collection rounds against a learner's endpoints, shut down."""

    def __init__(self, env_factory: Callable[[], Any], transitions_endpoint: str, params_endpoint: str,
                 control_endpoint: str | None = None, config: DistributedConfig | None = None, **overrides: Any):
        if config is None:
            config = DistributedConfig(**overrides)
        elif overrides:
            raise ConfigError(f"DistributedTrainer: give a config or keyword settings, not both ({sorted(overrides)})")
        self.config = config
        self.env_factory = env_factory
        self.endpoints = (transitions_endpoint, params_endpoint)
        self.control_endpoint = control_endpoint
        self.workers: list[Any] = []
        self._pg = None
        self._pool: ThreadPoolExecutor | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> "DistributedTrainer":
        c = self.config
        args = [dict(env_factory=self.env_factory, transitions_endpoint=self.endpoints[0],
                     params_endpoint=self.endpoints[1], worker_id=i, cache_size=c.worker_cache_size,
                     param_sync_every=c.param_sync_every, seed=c.seed) for i in range(c.num_workers)]
        if c.backend == "ray":
            self._start_ray(args)
        else:
            self.workers = [RolloutWorker(**a) for a in args]
            self._pool = ThreadPoolExecutor(max_workers=c.num_workers, thread_name_prefix="tinker-rollout")
        self._configure_learner()
        return self

    def _start_ray(self, args: list[dict]) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        c = self.config
        if not ray.is_initialized():
            ray.init(address=c.ray_address, include_dashboard=False)
        bundle = {k: float(v) for k, v in c.resources_per_worker.items() if float(v) > 0}
        self._pg = placement_group([dict(bundle) for _ in range(c.num_workers)], strategy=c.placement_strategy)
        ray.get(self._pg.ready(), timeout=120)
        actor = ray.remote(RolloutWorker)
        self.workers = [
            actor.options(num_cpus=bundle.get("CPU", 0), num_gpus=bundle.get("GPU", 0),
                          resources={k: v for k, v in bundle.items() if k not in ("CPU", "GPU")},
                          scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=i),
                          ).remote(**a)
            for i, a in enumerate(args)]

    def _configure_learner(self, timeout_s: float = 180.0) -> None:
        if self.control_endpoint is None:
            return
        from tinker_core.transport import ControlClient

        values: dict[str, Any] = {"param_sync_every": self.config.param_sync_every}
        if self.config.update_interval is not None:
            values["update_interval"] = self.config.update_interval
        cli = ControlClient(self.control_endpoint, timeout_ms=int(timeout_s * 1000))  # the learner may still be starting
        try:
            rep = cli.request({"cmd": "set", "values": values})
        finally:
            cli.close()
        if not rep.get("ok"):
            raise ConfigError(f"learner at {self.control_endpoint} refused {values}: {rep.get('error')}")

    def _call_all(self, method: str, *args: Any, **kw: Any) -> list[Any]:
        if self.config.backend == "ray":
            import ray

            return ray.get([getattr(w, method).remote(*args, **kw) for w in self.workers])
        assert self._pool is not None
        return list(self._pool.map(lambda w: getattr(w, method)(*args, **kw), self.workers))

    # -- collection ----------------------------------------------------------------------------
    def wait_params(self, timeout_s: float = 60.0) -> list[bool]:
        """Block until every worker holds parameters from the learner (so none acts at random)."""
        if not self.workers:
            self.start()
        return self._call_all("wait_params", None, timeout_s)

    def run(self, total_steps: int, steps_per_round: int = 200, wait_timeout_s: float = 60.0) -> dict:
        """Collect ``total_steps`` env steps over all workers; returns per-worker and summed counters."""
        if not self.workers:
            self.start()
        per_worker = max(1, int(total_steps) // self.config.num_workers)
        rounds = []
        times = []
        t0 = time.monotonic()
        if self.config.sync == "sync":
            done = 0
            first = True
            while done < per_worker:
                n = min(steps_per_round, per_worker - done)
                floor = math.ceil(self.config.updates_per_step * done * self.config.num_workers)
                rounds.append(self._call_all("collect", n, wait_newer=not first, wait_timeout_s=wait_timeout_s,
                                             min_version=floor))
                times.append(round(time.monotonic() - t0, 2))
                done += n
                first = False
        else:
            rounds.append(self._call_all("collect", per_worker))
            times.append(round(time.monotonic() - t0, 2))
        last = rounds[-1]
        return {"rounds": len(rounds), "steps": sum(s["steps"] for s in last), "sent": sum(s["sent"] for s in last),
                "dropped": sum(s["dropped"] for s in last), "workers": last, "round_end_s": times,
                "param_versions": [s["param_version"] for s in last],
                "round_start_versions": [[s["start_param_version"] for s in r] for r in rounds],
                "episode_returns": [r for rs in rounds for s in rs for r in s["episode_returns"]]}

    def shutdown(self) -> None:
        if not self.workers:
            return
        try:
            self._call_all("close")
        finally:
            if self.config.backend == "ray":
                import ray
                from ray.util.placement_group import remove_placement_group

                for w in self.workers:
                    ray.kill(w)
                if self._pg is not None:
                    remove_placement_group(self._pg)
            elif self._pool is not None:
                self._pool.shutdown(wait=True)
            self.workers = []

    def __enter__(self) -> "DistributedTrainer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
