"""Demonstrations as the learner's prior data (RLPD): a saved replay loaded into the simulation buffer at start,
sampled beside the live data, and marked as demonstrations in each batch so SAC's ``td3bc_alpha`` imitates them;
a resumed learner does not load them twice. No ROS: the live transitions come over the learner's ZeroMQ socket."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import numpy as np

from tinker_core.learner import Learner, LearnerConfig, MixedReplay
from tinker_core.replay import ReplayBuffer, StorageConfig

DEMO = 55.0  # the reward of every demonstration here, so a batch shows where each row came from


def _demonstrations(pendulum, path: Path, n: int = 80) -> Path:
    buf = ReplayBuffer(n, seed=0)
    for t in pendulum(n, seed=7, source="demonstration"):
        buf.add(t.__class__(t.obs, t.action, DEMO, t.terminated, t.truncated, t.info, t.next_obs))
    buf.save(path)
    return path


def _learner(ckpt: Path, **over) -> Learner:
    from tinker_cli.learner import make_algo
    from tinker_core.transport import free_endpoints

    t, w, p, c = free_endpoints(4)
    cfg = LearnerConfig(transitions_endpoint=t, weights_endpoint=w, params_endpoint=p, control_endpoint=c,
                        env_id="Pendulum-v1", batch_size=32, warmup=20, publish_every=0, param_sync_every=0,
                        checkpoint_every=0, checkpoint_dir=str(ckpt), real_fraction=0.5,
                        algo_kwargs={"net_arch": [16], "torch_threads": 1, "td3bc_alpha": 0.05}, **over)
    return Learner(cfg, functools.partial(make_algo, "sac", "Pendulum-v1", None, cfg.algo_kwargs, "cpu", 0)).open()


def test_the_mask_marks_the_rows_of_the_demonstration_sources_in_batch_order(pendulum):
    mix = MixedReplay(100, 100, real_fraction=0.5, prioritized=False, storage=StorageConfig(), intervention_warmup=1)
    split = {"sim": 3, "real": 2, "intervention": 1}
    assert mix.demo_mask(split, ("sim", "intervention")).tolist() == [True] * 3 + [False] * 2 + [True]
    assert mix.demo_mask(split, ("intervention",)).tolist() == [False] * 5 + [True]


def test_the_learner_trains_on_demonstrations_and_live_data_and_loads_them_once(pendulum, tmp_path):
    from tinker_core.transport import TransitionSender

    demos = _demonstrations(pendulum, tmp_path / "demos")
    ckpt = tmp_path / "ckpt"
    learner = _learner(ckpt, demonstrations=str(demos))
    seen: list[np.ndarray] = []
    real_step = learner.algo.train_on_batch

    def spy(batch, weights=None, demo_mask=None):  # records what the algorithm was told, then trains for real
        seen.append((np.asarray(batch.reward).copy(), None if demo_mask is None else np.asarray(demo_mask).copy()))
        return real_step(batch, weights=weights, demo_mask=demo_mask)

    learner.algo.train_on_batch = spy
    try:
        assert learner.demonstrations == 80 and len(learner.replay.buffers["sim"]) == 80
        tx = TransitionSender(learner.config.transitions_endpoint)
        tx.send_many(pendulum(40, source="real"))
        deadline = time.monotonic() + 30
        while learner.updates < 5 and time.monotonic() < deadline:
            learner.tick()
        assert learner.updates >= 5
        for rewards, mask in seen:  # half demonstrations, half live, and exactly the demonstrations are marked
            assert mask is not None and mask.sum() == 16
            np.testing.assert_array_equal(rewards == DEMO, mask)
        assert learner.last_train.get("imitation_loss", 0) > 0
        assert learner.command({"cmd": "status"})["demonstrations"] == 80
        learner.checkpoint()
        tx.close()
    finally:
        learner.close(checkpoint=False)
    again = _learner(ckpt, demonstrations=str(demos))
    try:  # resumed: its saved replay holds the demonstrations already
        assert again.demonstrations == 0 and len(again.replay.buffers["sim"]) == 80
    finally:
        again.close(checkpoint=False)
