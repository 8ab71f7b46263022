"""IMPALA: actors on threads and on Ray, the bounded queue, policy lag, sync mode, learning, checkpoints.

Real Ray actors (the module-wide local Ray of conftest) and real CartPole envs; nothing is mocked.
"""

from __future__ import annotations

import math
import time

import gymnasium as gym
import numpy as np
import pytest

from tinker_core.algos import IMPALA, IMPALAConfig, load_algorithm
from tinker_core.errors import ConfigError
from tinker_core.evaluate import evaluate as core_evaluate
from tinker_core.impala import ActorPool


def evaluate(algo, episodes: int = 5) -> float:
    """Mean return of the deterministic policy over seeds 1000.. (tinker_core.evaluate)."""
    policy = lambda o: algo.predict(o, deterministic=True)  # noqa: E731
    return core_evaluate(gym.make("CartPole-v1"), policy, episodes, seed=1000).mean_return


def wait_for(pred, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        ok, last = pred()
        if ok:
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout} s; last {last}")


def check_full_queue_blocks(pool: ActorPool, queue_size: int, num_actors: int) -> None:
    """Nobody takes from the queue: it fills to its bound, then every actor holds one finished unroll
    and blocks in put (nothing is dropped, nothing more is collected); one get frees one slot."""
    def settled():
        st = pool.stats()
        return pool.qsize() == queue_size and sum(s["unrolls"] for s in st) == queue_size + num_actors, st

    wait_for(settled, what="a full queue with every actor blocked")
    time.sleep(1.0)  # had the actors dropped or kept collecting, the counts would move on
    st = pool.stats()
    assert pool.qsize() == queue_size
    assert sum(s["unrolls"] for s in st) == queue_size + num_actors
    assert sum(s["sent"] for s in st) == queue_size
    assert all(s["blocked_s"] > 0 or s["unrolls"] > s["sent"] for s in st)
    got = pool.get(1)
    assert len(got) == 1 and got[0].policy_version == 0
    wait_for(lambda: (sum(s["sent"] for s in pool.stats()) == queue_size + 1, pool.stats()),
             what="the blocked put going through once a slot freed")
    assert pool.qsize() == queue_size


def test_full_queue_blocks_the_actors_threads():
    cfg = IMPALAConfig(num_actors=2, queue_size=3, unroll_length=8)
    algo = IMPALA("CartPole-v1", cfg)
    pool = ActorPool(algo.env_factory, (algo.obs_spec, algo.action_spec), cfg)
    try:
        pool.publish(0, algo.actor_payload())
        check_full_queue_blocks(pool, 3, 2)
    finally:
        pool.close()


# Deterministic evaluation (5 episodes) after 30k env steps with 2 actors, default config; seeds
# measured: Ray actors 0-3 scored 461, 454, 381, 286 (17-32 s wall at load average 9); threads 0-5
# scored 487, 148, 474, 241, 500, 196. Actors' timing is not seeded, so a seed does not fix the score.
# A random policy scores about 20; the bound 100 sits below every measured run.
def test_two_ray_actors_block_on_a_full_queue_then_learn_cartpole_with_bounded_lag(ray_local):
    cfg = IMPALAConfig(backend="ray", num_actors=2, actor_cpus=0.5, seed=0)
    algo = IMPALA("CartPole-v1", cfg)
    pool = algo.start_actors()  # learn() takes the started pool (Ray actors start slowly: start them once)
    check_full_queue_blocks(pool, cfg.queue_size, cfg.num_actors)
    algo.learn(30_000, progress=False)
    assert algo.num_timesteps >= 30_000
    assert {s["actor"] for s in algo.actor_stats} == {0, 1} and all(s["sent"] > 0 for s in algo.actor_stats)
    score = evaluate(algo)
    assert score >= 100, score
    lag = algo.lag.summary()
    assert lag["count"] == algo.num_updates * cfg.batch_trajectories
    # A trajectory waits behind at most queue_size queued ones and one per other actor, with
    # batch_trajectories taken per update, plus the update in flight while it was collected:
    # ceil((8 + 2) / 4) + 1 = 4 here (measured: p99 1, max 1-2). The max may pass it if an actor is
    # descheduled mid-unroll on a loaded machine; the p99 may not.
    bound = math.ceil((cfg.queue_size + cfg.num_actors) / cfg.batch_trajectories) + 1
    assert lag["p99"] <= bound, lag
    assert lag["max"] <= 2 * bound, lag
    assert lag["max"] > 0, lag  # asynchronous: some trajectories were acted by older weights


def test_threads_async_then_sync_and_checkpoint_round_trips(tmp_path):
    algo = IMPALA("CartPole-v1", IMPALAConfig(num_actors=2, seed=0, unroll_length=16))
    algo.learn(3000, progress=False)
    algo.config.mode = "sync"  # the one setting: actors now wait for each update's weights
    algo.lag.counts.clear()
    algo.learn(3000, progress=False)
    lag = algo.lag.summary()
    assert lag["count"] > 0 and lag["max"] == 0, lag
    assert all(s["wait_params_s"] > 0 for s in algo.actor_stats)
    path = algo.save(tmp_path / "impala")
    back = load_algorithm(path)
    assert isinstance(back, IMPALA) and back.num_updates == algo.num_updates > 0
    assert back.lag.summary() == algo.lag.summary()
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    assert np.array_equal(back.predict(obs), algo.predict(obs))
    # the deployed graph (ONNX, onnxruntime) acts as predict does
    import onnxruntime as ort
    import torch

    parts = back.deployable_parts()
    model = torch.nn.Sequential(parts["perception"], parts["actor"])
    torch.onnx.export(model, (torch.as_tensor(obs),), str(tmp_path / "p.onnx"), opset_version=17, dynamo=False,
                      input_names=["obs"], output_names=["action"], dynamic_axes={"obs": {0: "b"}, "action": {0: "b"}})
    sess = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    assert np.array_equal(sess.run(None, {"obs": obs})[0], back.predict(obs))
    back.learn(4000, progress=False)  # training goes on from the checkpoint
    assert back.num_updates > algo.num_updates and back.num_timesteps >= 4000 + algo.num_timesteps


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="IMPALAConfig.mode: expected one of"):
        IMPALAConfig(mode="lockstep")
    with pytest.raises(ConfigError, match="IMPALAConfig.batch_trajectories: sync mode needs a multiple of num_actors=3"):
        IMPALAConfig(mode="sync", num_actors=3, batch_trajectories=4)
    with pytest.raises(ConfigError, match="IMPALAConfig.queue_size: expected >= 1"):
        IMPALAConfig(queue_size=0)
    with pytest.raises(ConfigError, match=r"IMPALAConfig.policy_loss: expected one of \('vtrace', 'clip'\), got 'ppo'"):
        IMPALAConfig(policy_loss="ppo")
    algo = IMPALA((IMPALA("CartPole-v1").obs_spec, IMPALA("CartPole-v1").action_spec))
    with pytest.raises(ConfigError, match="built from specs only"):
        algo.learn(100, progress=False)


class SideMap(gym.Env):
    """One decision per episode: a map of 3 float planes (16 x 16) with one marker on plane 0, in the left or the
    right half, and noise on the other planes; action 1 for the right half, 0 for the left (reward 1 if right)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (16, 16, 3), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.right = bool(self.np_random.integers(2))
        m = self.np_random.uniform(0.0, 0.3, (16, 16, 3)).astype(np.float32)
        m[..., 0] = 0.0
        m[self.np_random.integers(16), self.np_random.integers(8) + 8 * self.right, 0] = 1.0
        return m, {}

    def step(self, action):
        return np.zeros((16, 16, 3), np.float32), float(int(action) == int(self.right)), True, False, {}


def test_impala_learns_from_map_observations_through_the_multiscale_encoder():
    """The multi-scale spatial encoder is IMPALA's for map observations (``perception: auto`` picks it for float
    planes): where the marker is decides the reward, and the greedy policy learns it. Measured with these settings
    (APPO's clipped loss, 4 epochs, lr 3e-4), seeds 0-5, 200 held-out maps: 1.0 in 6 of 6 at 12k steps; at 6k
    steps 4 of 6 (two at 0.5); IMPALA's one-step loss at lr 1e-3 was 0.5-1.0 at 12k (its entropy collapsed)."""
    from tinker_core.nn import MultiScaleSpatial

    algo = IMPALA(SideMap, IMPALAConfig(num_actors=2, seed=0, unroll_length=16, learning_rate=3e-4,
                                        policy_loss="clip", n_epochs=4))
    assert isinstance(algo.perception, MultiScaleSpatial)
    algo.learn(12_000, progress=False)
    env = SideMap()
    obs, right = [], []
    for s in range(200):
        o, _ = env.reset(seed=10_000 + s)
        obs.append(o)
        right.append(env.right)
    acc = float(np.mean(algo.predict(np.stack(obs), deterministic=True).reshape(-1) == np.asarray(right, int)))
    assert acc >= 0.9, acc
