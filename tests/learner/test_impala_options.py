"""A hierarchy's high level on IMPALA's Ray actors: `OptionEnv` over tinker/Skirmish-v0 (scripted squad skills as
the action), PPO's clipped surrogate on V-trace advantages, and the num_opponents curriculum reaching the actors'
processes with the weights (the thread actors: tests/sim/test_skirmish.py)."""

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
                                    torch_threads=1, log_interval=10**9, policy_loss="clip"))
    cur = Curriculum(CurriculumConfig(param="num_opponents", levels=[2, 4], promote_at=0.5, window=3))
    cur.bind(algo)
    try:
        algo.learn(600, progress=False, callback=cur)  # decisions (x5 env steps)
        assert cur.history and cur.history[0]["to"] == 4  # 2 opponents are won by almost any skill sequence
        assert algo.num_updates >= 10 and algo.lag.summary()["count"] >= 20
        assert len(algo.actor_stats) == 2 and all(s["unrolls"] >= 1 for s in algo.actor_stats)
        assert any(s["env_params"].get("num_opponents") == 4.0 for s in algo.actor_stats)  # reached a Ray process
    finally:
        algo.close()
