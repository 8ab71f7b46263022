"""A hierarchy's high level on IMPALA's Ray actors: `OptionEnv` over tinker/Skirmish-v0 (scripted squad skills as
the action), PPO's clipped surrogate on V-trace advantages with PPO's epochs, and the num_opponents curriculum
reaching the actors' processes with the weights (the thread actors: tests/sim/test_skirmish.py)."""

from __future__ import annotations

import tinker_sim  # noqa: F401  (registers tinker/Skirmish-v0 and the skirmish skills)
from tinker_core.algos import IMPALA, IMPALAConfig
from tinker_core.curriculum import Curriculum, CurriculumConfig
from tinker_core.envs import EnvConfig


def test_option_env_high_level_on_ray_actors_with_the_curriculum(ray_local):
    env = EnvConfig("tinker/Skirmish-v0", {}, ["tinker_sim"], [{"tinker_core.hierarchy.option_env.OptionEnv":
                                                                 {"skills": ["skirmish"], "max_duration": 5}}])
    algo = IMPALA(env, IMPALAConfig(seed=0, gamma=0.99 ** 5, backend="ray", num_actors=2, actor_cpus=0.5,
                                    envs_per_actor=2, unroll_length=10, batch_trajectories=2, queue_size=2,
                                    torch_threads=1, log_interval=10**9, policy_loss="clip", n_epochs=2,
                                    minibatch_size=10))
    cur = Curriculum(CurriculumConfig(param="num_opponents", levels=[2, 4], promote_at=0.5, window=3))
    cur.bind(algo)
    try:
        algo.learn(600, progress=False, callback=cur)  # decisions (x5 env steps)
        assert cur.history and cur.history[0]["to"] == 4  # 2 opponents are won by almost any skill sequence
        assert algo.num_updates >= 10 and algo.lag.summary()["count"] >= 20
        assert len(algo.actor_stats) == 2 and all(s["unrolls"] >= 1 for s in algo.actor_stats)
        assert any(s["env_params"].get("num_opponents") == 4.0 for s in algo.actor_stats)  # reached a Ray process
        # PPO's passes on the learner (2 epochs of 4 minibatches), the skirmish steps counted in the Ray actors
        assert algo._metrics["gradient_steps"] == 2 * 4
        assert algo.num_timesteps < algo.inner_env_steps <= 5 * algo.num_timesteps
        assert sum(s["inner_env_steps"] for s in algo.actor_stats) >= algo.inner_env_steps
    finally:
        algo.close()


def test_tinker_train_runs_the_shipped_hppo_on_impala_config(ray_local, tmp_path):
    """configs/hppo_impala_skirmish.yaml through `tinker train` on Ray (the module's local Ray), a tiny budget."""
    import json
    from pathlib import Path

    from tinker_cli import main

    config = Path(__file__).resolve().parents[2] / "configs" / "hppo_impala_skirmish.yaml"
    out = tmp_path / "run"
    assert main(["train", "--config", str(config), "--out", str(out), "--no-progress", "--total-timesteps", "200"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algo"] == "impala" and summary["timesteps"] >= 200
    assert summary["curriculum"]["param"] == "num_opponents"
    saved = json.loads((out / "config.json").read_text())["impala"]  # the settings it trained with
    assert (saved["backend"], saved["policy_loss"], saved["n_epochs"], saved["minibatch_size"]) == ("ray", "clip", 10, 32)
