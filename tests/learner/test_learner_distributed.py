"""`DistributedTrainer` in sync mode against a stand-in learner: the workers never outrun the learner's
update budget (``updates_per_step``), whatever the speed of their envs."""

from __future__ import annotations

import functools
import threading

import pytest

from tinker_core.errors import ConfigError
from tinker_core.learner import DistributedConfig, DistributedTrainer


class SlowLearner:
    """Publishes the same parameters as version 0, 10, 20, ... (a learner doing 10 updates a tick) on a
    thread, and drains the transitions socket: slower than two Pendulum workers."""

    def __init__(self, transitions_endpoint: str, params_endpoint: str, tick_s: float = 0.01):
        from tinker_cli.learner import make_algo
        from tinker_core.learner.params import algo_bytes
        from tinker_core.transport import TransitionReceiver, WeightsPublisher

        algo = make_algo("sac", "Pendulum-v1", None, {"net_arch": [16], "torch_threads": 1}, "cpu", 0)
        self.blob = algo_bytes(algo)
        self.receiver = TransitionReceiver(transitions_endpoint, bind=True)
        self.params = WeightsPublisher(params_endpoint, bind=True)
        self.tick_s, self.version, self.received = tick_s, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.params.publish(self.version, {"algo": self.blob})
            self.received += len(self.receiver.recv_many(timeout_ms=0))
            self._stop.wait(self.tick_s)
            self.version += 10

    def __enter__(self) -> "SlowLearner":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.receiver.close()
        self.params.close()


def test_sync_rounds_wait_for_the_learner_updates_per_step():
    from tinker_cli.learner import make_env
    from tinker_core.transport import free_endpoints

    transitions, params = free_endpoints(2)
    with SlowLearner(transitions, params):
        with DistributedTrainer(functools.partial(make_env, "Pendulum-v1"), transitions, params, backend="local",
                                num_workers=2, sync="sync", worker_cache_size=25, param_sync_every=1000,
                                updates_per_step=2.0) as trainer:
            out = trainer.run(total_steps=400, steps_per_round=50, wait_timeout_s=30)
    assert out["rounds"] == 4 and out["steps"] == 400
    versions = out["round_start_versions"]
    # before round k the workers collected 100 * k steps together: each started it with parameters
    # from at least 2 updates per step, not just the next version the learner happened to send
    for k, vs in enumerate(versions[1:], start=1):
        assert all(v is not None and v >= 2 * 100 * k for v in vs), versions
    assert all(w["waited_for_params"] for w in out["workers"])


def test_updates_per_step_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"DistributedConfig.updates_per_step: expected >= 0, got -1.0"):
        DistributedConfig(sync="sync", updates_per_step=-1.0)
    with pytest.raises(ConfigError, match=r"DistributedConfig.updates_per_step: needs sync='sync'"):
        DistributedConfig(sync="async", updates_per_step=1.0)
