"""Sim rollout workers as Ray actors → learner process → gated bundle → a policy that got better."""

from __future__ import annotations

import functools
from pathlib import Path

from tinker_core.cli.learner import make_algo, make_env
from tinker_core.evaluate import evaluate
from tinker_core.learner import DistributedTrainer
from tinker_core.learner.server import bundle_sha256

EVAL_SEEDS = 5


def mean_return(algo, seed: int = 123) -> float:
    env = make_env("Pendulum-v1")
    try:
        return evaluate(env, lambda o: algo.predict(o, deterministic=True), EVAL_SEEDS, seed=seed).mean_return
    finally:
        env.close()


def test_ray_workers_feed_learner_and_gated_policy_got_better(learner_factory, ray_local, tmp_path):
    from tinker_core.algos import load_algorithm
    from tinker_core.transport import WeightsSubscriber

    ckpt = tmp_path / "ckpt"
    lp = learner_factory(checkpoint_dir=str(ckpt), update_interval=0, warmup=300, batch_size=128,
                         param_sync_every=100, gate_episodes=EVAL_SEEDS, gate_seed=123).start(wait=False)
    cfg = lp.cfg
    env_factory = functools.partial(make_env, "Pendulum-v1")
    trainer = DistributedTrainer(env_factory, cfg["transitions_endpoint"], cfg["params_endpoint"],
                                 cfg["control_endpoint"], backend="ray", num_workers=2,
                                 resources_per_worker={"CPU": 1, "GPU": 0}, placement_strategy="PACK", sync="sync",
                                 worker_cache_size=125, param_sync_every=250, update_interval=0)
    trainer.start()  # the actors boot while the learner process starts; returns once the learner answers
    try:
        assert len(trainer.workers) == 2
        # the initial policy (the learner builds it with seed 0), measured on the same episodes as the final one
        initial = mean_return(make_algo("sac", "Pendulum-v1", None, cfg["algo_kwargs"], "cpu", 0))
        weights = WeightsSubscriber(cfg["weights_endpoint"])
        out = trainer.run(total_steps=2000, steps_per_round=250, wait_timeout_s=60)
    finally:
        trainer.shutdown()
    # both actors collected and sent everything, and in sync mode they acted with the learner's parameters
    assert out["rounds"] == 4 and out["steps"] == 2000 and out["dropped"] == 0
    assert all(v is not None and v > 0 for v in out["param_versions"])
    assert all(w["waited_for_params"] for w in out["workers"])
    st = lp.wait(lambda s: s["ingested"]["sim"] == 2000 and s["updates"] >= 2800, timeout=150)
    print(f"rounds ended at {out['round_end_s']} s; learner at {st['updates']} updates")

    # gate: the candidate must beat the initial policy by a clear margin in simulation before it is published
    assert lp.ctl("set", gate_min_return=initial + 300.0)["ok"]
    rep = lp.ctl("publish", timeout_ms=120_000)
    assert rep["ok"], rep
    gate = rep["gate"]
    assert gate["passed"], (initial, gate)
    assert gate["version"] == 1
    # the policy node is told: version, bundle path and sha256 of what was written
    msg = None
    for _ in range(50):
        msg = weights.poll(100)
        if msg:
            break
    assert msg is not None and msg[0] == 1
    assert msg[2]["sha256"] == bundle_sha256(Path(msg[2]["bundle"]))
    assert (Path(msg[2]["bundle"]) / "manifest.json").is_file()
    # the bundle's files travel with the announcement (a robot on another machine has no access to the path)
    assert msg[1]["manifest.json"] == (Path(msg[2]["bundle"]) / "manifest.json").read_bytes()

    # the trained policy, reloaded from the learner's checkpoint, is better than the initial one
    rep = lp.ctl("checkpoint")
    assert rep["ok"], rep
    final = mean_return(load_algorithm(ckpt / "algo"))
    print(f"mean return over {EVAL_SEEDS} episodes: initial {initial:.0f}, trained {final:.0f}")
    assert final > initial + 300.0
    assert lp.stop() == 0
    weights.close()
