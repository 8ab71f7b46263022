"""`RolloutWorker`: collects experience in its own envs with the newest policy and sends it to the learner.

The same class runs in-process (``backend="local"``) or as a Ray actor. It never waits on the
learner to send: transitions are cached (``cache_size``) and handed to a non-blocking ZeroMQ sender
that drops on a full queue and counts the drops. Parameters arrive on the learner's params socket
as the bytes of a saved algorithm file; until the first arrives the worker acts at random. The
saved file also holds the learner's random state; each worker keeps its own exploration noise
(seeded ``seed + 7919 * worker_id``), or all of them would draw the same noise after every load.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np

from tinker_core.transition import Transition


class RolloutWorker:
    """One env, one sender, one params subscriber; `collect` runs a number of env steps."""

    def __init__(self, env_factory: Callable[[], Any], transitions_endpoint: str, params_endpoint: str,
                 worker_id: int = 0, cache_size: int = 256, param_sync_every: int = 100, seed: int = 0,
                 source: str = "sim", deterministic: bool = False):
        import tinker_core.algos  # noqa: F401  (import torch now, not in the middle of the first round)

        try:  # building an optimizer imports torch._dynamo (seconds); do it here rather than at the first load
            import torch._dynamo  # noqa: F401
        except ImportError:
            pass
        from tinker_core.learner.graph import ACTOR_LEARNER, WORKER
        from tinker_core.transport import TransitionSender, WeightsSubscriber

        ACTOR_LEARNER.check_port(WORKER, "transitions", "out")
        ACTOR_LEARNER.check_port(WORKER, "params", "in")
        self.env = env_factory()
        self.worker_id, self.cache_size, self.source = int(worker_id), max(1, int(cache_size)), source
        self.param_sync_every, self.deterministic = max(1, int(param_sync_every)), deterministic
        self.sender = TransitionSender(transitions_endpoint, hwm=max(1000, 4 * self.cache_size), batch=64)
        self.params = WeightsSubscriber(params_endpoint)
        self.algo: Any = None
        self.param_version: int | None = None
        self.seed = int(seed + 7919 * self.worker_id)
        self.rng = np.random.default_rng(self.seed)
        self.env.action_space.seed(self.seed)
        self._obs, _ = self.env.reset(seed=self.seed)
        self._cache: list[Transition] = []
        self._ep_return, self._returns = 0.0, []
        self.steps = 0
        self.seq = 0

    def _poll_params(self, timeout_ms: int = 0) -> bool:
        msg = self.params.poll(timeout_ms)
        if msg is None:
            return False
        version, blobs, _meta = msg
        if version == self.param_version:
            return True  # the learner re-sent what this worker already has
        from tinker_core.learner.params import algo_from_bytes, unpack_algo_dir

        if self.algo is None:
            self.algo = algo_from_bytes(blobs["algo"])
            self.algo.gen.manual_seed(self.seed)  # this worker's noise, not the learner's
        else:  # same networks: load the new weights in place instead of building a new algorithm
            from tinker_core.algos.checkpointing import load_checkpoint_into

            noise = self.algo.gen.get_state()
            with unpack_algo_dir(blobs["algo"]) as root:
                load_checkpoint_into(self.algo, root)
            self.algo.gen.set_state(noise)  # the load set the learner's random state
        self.param_version = version
        return True

    def wait_params(self, newer_than: int | None, timeout_s: float, at_least: int = 0) -> bool:
        """Block until parameters newer than ``newer_than`` and of version (learner updates) ``at_least``
        or more arrived (sync mode); False on timeout."""
        def ready() -> bool:
            v = self.param_version
            return v is not None and (newer_than is None or v > newer_than) and v >= at_least

        if ready():
            return True
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._poll_params(50) and ready():
                return True
        return False

    def _act(self, obs: Any) -> np.ndarray:
        if self.algo is None:
            return self.env.action_space.sample()
        return np.asarray(self.algo.predict(obs, deterministic=self.deterministic))

    def flush(self) -> None:
        if self._cache:
            self.sender.send_many(self._cache)
            self._cache = []

    def collect(self, steps: int, wait_newer: bool = False, wait_timeout_s: float = 30.0,
                min_version: int = 0) -> dict:
        """Run ``steps`` env steps (after waiting for newer parameters, of version ``min_version`` or
        more, if ``wait_newer``); returns counters."""
        waited_ok = self.wait_params(self.param_version, wait_timeout_s, min_version) if wait_newer else None
        started_with = self.param_version
        self._returns = []
        for _ in range(int(steps)):
            if self.steps % self.param_sync_every == 0:
                self._poll_params(0)
            action = self._act(self._obs)
            nxt, r, term, trunc, info = self.env.step(action)
            self._ep_return += float(r)
            meta = {"source": self.source, "worker": self.worker_id, "seq": self.seq,
                    "policy_version": -1 if self.param_version is None else int(self.param_version)}
            if "is_success" in info:
                meta["is_success"] = bool(info["is_success"])
            act = np.asarray(action)
            if act.dtype == np.float64:
                act = act.astype(np.float32)
            self._cache.append(Transition(self._obs, act, float(r), bool(term),
                                          bool(trunc), meta, nxt))
            self.seq += 1
            self.steps += 1
            if len(self._cache) >= self.cache_size:
                self.flush()
            if term or trunc:
                self._returns.append(self._ep_return)
                self._ep_return = 0.0
                nxt, _ = self.env.reset()
            self._obs = nxt
        self.flush()
        return {**self.stats(waited_ok), "start_param_version": started_with}

    def stats(self, waited_ok: bool | None = None) -> dict:
        return {"worker": self.worker_id, "steps": self.steps, "sent": self.sender.sent,
                "dropped": self.sender.dropped, "param_version": self.param_version,
                "episode_returns": list(self._returns), "waited_for_params": waited_ok}

    def close(self) -> None:
        self.flush()
        self.sender.close()
        self.params.close()
        self.env.close()
