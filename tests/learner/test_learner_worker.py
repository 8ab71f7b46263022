"""`RolloutWorker`: each worker explores with its own noise, even after loading the learner's parameters."""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np


class StillEnv(gym.Env):
    """Pendulum's spaces, but every observation is zero: the actions differ only by the policy's noise."""

    observation_space = gym.spaces.Box(np.array([-1, -1, -8], np.float32), np.array([1, 1, 8], np.float32))
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


def test_workers_draw_their_own_noise_after_loading_the_same_parameters():
    from tinker_cli.learner import make_algo
    from tinker_core.learner import RolloutWorker
    from tinker_core.learner.params import algo_bytes
    from tinker_core.transport import TransitionReceiver, WeightsPublisher, free_endpoints

    transitions, params = free_endpoints(2)
    algo = make_algo("sac", "Pendulum-v1", None, {"net_arch": [16], "torch_threads": 1}, "cpu", 0)
    receiver = TransitionReceiver(transitions, bind=True)
    pub = WeightsPublisher(params, bind=True)
    workers = [RolloutWorker(StillEnv, transitions, params, worker_id=i, cache_size=10) for i in range(2)]
    try:
        actions: dict[int, list] = {0: [], 1: []}
        for version in (1, 2):  # the first load builds the algorithm, the second loads into it
            deadline = time.monotonic() + 10
            while not all(w.param_version == version for w in workers) and time.monotonic() < deadline:
                pub.publish(version, {"algo": algo_bytes(algo)})
                for w in workers:
                    w.wait_params(None, 0.1, at_least=version)
            assert [w.param_version for w in workers] == [version, version]
            for w in workers:
                w.collect(10)
            got: list = []
            while len(got) < 20 and time.monotonic() < deadline:
                got += receiver.recv_many(timeout_ms=200)
            for t in (x for m in got for x in (m.to_transitions() if hasattr(m, "to_transitions") else [m])):
                actions[t.info["worker"]].append(float(t.action[0]))
            # the same weights, the same observations: equal actions would mean equal noise
            assert not np.allclose(actions[0][-10:], actions[1][-10:]), actions
    finally:
        for w in workers:
            w.close()
        receiver.close()
        pub.close()
