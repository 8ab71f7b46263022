"""IMPALA benchmark on CartPole-v1: env-steps/s with 1, 2 and 4 Ray actors (asynchronous) and 2 in
sync mode and on threads, the policy-lag distribution of each, and learning at equal wall-clock
time against tinker's synchronous PPO, all in one run.

    python benchmarks/impala.py [--quick]

Throughput is what the learner consumed (env steps in the trajectories it trained on) per second
of wall time, after the first 20% of each run (actor start-up excluded). The floor it is compared
with is one process stepping the env with the same policy network and nothing else (no learner, no
queue). Learning: each algorithm trains for the same wall time per seed, then 10 deterministic
evaluation episodes. Writes benchmarks/results/impala.json (``--quick``: impala.quick.json).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np

# benchmarks/ is sys.path[0] when run as `python benchmarks/NAME.py`
from _common import ROOT, arg_parser, git_state, header, machine, write_result

sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402

from tinker_core.algos import IMPALA, PPO, IMPALAConfig, PPOConfig  # noqa: E402
from tinker_core.evaluate import evaluate as core_evaluate  # noqa: E402

ENV = "CartPole-v1"
# RL Zoo's CartPole-v1 PPO entry (its linear lr and clip schedules as constants: tinker's PPO has none)
PPO_ZOO = dict(n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
               learning_rate=1e-3, clip_range=0.2)


def evaluate(algo, episodes: int = 10) -> float:
    """Mean return of the deterministic policy over seeds 1000.. (tinker_core.evaluate)."""
    policy = lambda o: algo.predict(o, deterministic=True)  # noqa: E731
    return core_evaluate(gym.make(ENV), policy, episodes, seed=1000).mean_return


def floor_steps_per_s(seconds: float) -> float:
    """One process: CartPole stepped with the IMPALA policy's sampling (act_logp), nothing else."""
    algo = IMPALA(ENV, IMPALAConfig(seed=0))
    env = gym.make(ENV)
    obs, _ = env.reset(seed=0)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(200):
            a, _, _ = algo.act_logp(obs[None])
            obs, _, te, tr, _ = env.step(int(a[0]))
            if te or tr:
                obs, _ = env.reset()
        n += 200
    return n / (time.perf_counter() - t0)


class Clock:
    """``learn`` callback: records (wall s, env steps) per update; stops after ``budget_s`` or ``steps``."""

    def __init__(self, budget_s: float):
        self.t0 = time.perf_counter()
        self.budget_s = budget_s
        self.points: list[tuple[float, int]] = []
        self.returns: list[tuple[float, float]] = []

    def __call__(self, algo, info) -> bool:
        now = time.perf_counter() - self.t0
        self.points.append((now, algo.num_timesteps))
        self.returns += [(now, e.ret) for e in info.get("episodes", ())]
        return now < self.budget_s

    def rate(self, skip: float = 0.2) -> float:
        """Env steps per second after the first ``skip`` of the run."""
        pts = self.points
        if len(pts) < 2:
            return float("nan")
        i = next(k for k, p in enumerate(pts) if p[0] >= skip * pts[-1][0])
        i = min(i, len(pts) - 2)
        return (pts[-1][1] - pts[i][1]) / (pts[-1][0] - pts[i][0])

    def curve(self, every_s: float) -> list[list[float]]:
        """[wall s, mean return of the last 10 episodes], every ``every_s`` seconds."""
        out, nxt, rets = [], every_s, []
        for t, r in self.returns:
            rets.append(r)
            if t >= nxt:
                out.append([round(t, 1), round(float(np.mean(rets[-10:])), 1)])
                nxt += every_s
        return out


def throughput(n_actors: int, seconds: float, mode: str = "async", backend: str = "ray") -> dict:
    cores = os.cpu_count() or 1
    cfg = IMPALAConfig(backend=backend, mode=mode, num_actors=n_actors, actor_cpus=min(1.0, cores / n_actors),
                       batch_trajectories=4 if mode == "async" or 4 % n_actors == 0 else n_actors, seed=0)
    algo = IMPALA(ENV, cfg)
    t0 = time.perf_counter()
    algo.start_actors().wait_ready()
    start_s = time.perf_counter() - t0
    clock = Clock(seconds)
    algo.learn(10_000_000, callback=clock, progress=False)
    wall = clock.points[-1][0]
    blocked = sum(s["blocked_s"] for s in algo.actor_stats) / (n_actors * wall)
    waited = sum(s["wait_params_s"] for s in algo.actor_stats) / (n_actors * wall)
    collected = sum(s["steps"] for s in algo.actor_stats)
    return {"env_steps_per_s": round(clock.rate(), 1), "updates": algo.num_updates, "actor_start_s": round(start_s, 1),
            "actor_collected_per_s": round(collected / wall, 1),
            "actor_blocked_fraction": round(blocked, 3), "actor_wait_params_fraction": round(waited, 3),
            "lag": algo.lag.summary()}


def learn_for(kind: str, seed: int, seconds: float) -> dict:
    start_s = 0.0
    if kind == "impala":
        algo = IMPALA(ENV, IMPALAConfig(backend="ray", num_actors=2, actor_cpus=1.0, seed=seed))
        t0 = time.perf_counter()
        algo.start_actors().wait_ready()  # actor start-up is reported, not counted in the budget
        start_s = time.perf_counter() - t0
    else:
        algo = PPO(ENV, PPOConfig(seed=seed, **PPO_ZOO))
    clock = Clock(seconds)
    algo.learn(10_000_000, callback=clock, progress=False)
    return {"eval_return": evaluate(algo), "env_steps": int(algo.num_timesteps), "actor_start_s": round(start_s, 1),
            "wall_s": round(clock.points[-1][0], 1), "curve": clock.curve(seconds / 10)}


def main() -> None:
    args = arg_parser(__doc__.splitlines()[0]).parse_args()
    quick = args.quick
    import ray

    commit, dirty = git_state()
    info = machine(("torch", "ray"), load_key="load_avg_start")
    torch.set_num_threads(1)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             _temp_dir=tempfile.mkdtemp(prefix="rt", dir="/tmp"),
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}})
    seconds = 8.0 if quick else 30.0
    learn_s = 12.0 if quick else 40.0
    seeds = [0] if quick else [0, 1, 2]
    figures: dict = {}
    runs: dict = {}
    try:
        figures["floor_one_process_steps_per_s"] = round(floor_steps_per_s(3.0 if quick else 10.0), 1)
        for n in (1, 2, 4):
            runs[f"ray_async_{n}"] = r = throughput(n, seconds)
            figures[f"ray_async_{n}actors_env_steps_per_s"] = r["env_steps_per_s"]
            figures[f"ray_async_{n}actors_lag_p50"] = r["lag"].get("p50")
            figures[f"ray_async_{n}actors_lag_p99"] = r["lag"].get("p99")
            figures[f"ray_async_{n}actors_lag_max"] = r["lag"].get("max")
            figures[f"ray_async_{n}actors_blocked_fraction"] = r["actor_blocked_fraction"]
            print(f"ray async {n} actors: {r['env_steps_per_s']} steps/s, lag {r['lag']}", flush=True)
        runs["ray_sync_2"] = r = throughput(2, seconds, mode="sync")
        figures["ray_sync_2actors_env_steps_per_s"] = r["env_steps_per_s"]
        figures["ray_sync_2actors_lag_max"] = r["lag"].get("max")
        print(f"ray sync 2 actors: {r['env_steps_per_s']} steps/s, lag {r['lag']}", flush=True)
        runs["threads_async_2"] = r = throughput(2, seconds, backend="local")
        figures["threads_async_2actors_env_steps_per_s"] = r["env_steps_per_s"]
        print(f"threads async 2 actors: {r['env_steps_per_s']} steps/s, lag {r['lag']}", flush=True)
        f1 = figures["ray_async_1actors_env_steps_per_s"]
        figures["ray_2_vs_1_actors_ratio"] = round(figures["ray_async_2actors_env_steps_per_s"] / f1, 3)
        figures["ray_4_vs_1_actors_ratio"] = round(figures["ray_async_4actors_env_steps_per_s"] / f1, 3)
        figures["ray_sync_vs_async_2actors_ratio"] = round(figures["ray_sync_2actors_env_steps_per_s"]
                                                           / figures["ray_async_2actors_env_steps_per_s"], 3)
        learning: dict = {"impala": {}, "ppo": {}}
        for seed in seeds:  # alternate the two, seed by seed
            for kind in ("impala", "ppo"):
                learning[kind][seed] = res = learn_for(kind, seed, learn_s)
                print(f"{kind} seed {seed}: eval {res['eval_return']} after {res['env_steps']} steps "
                      f"in {res['wall_s']} s", flush=True)
        runs["learning"] = learning
        for kind in ("impala", "ppo"):
            evals = [learning[kind][s]["eval_return"] for s in seeds]
            figures[f"{kind}_eval_return_mean"] = round(float(np.mean(evals)), 1)
            figures[f"{kind}_eval_return_min"] = round(float(np.min(evals)), 1)
            figures[f"{kind}_eval_return_max"] = round(float(np.max(evals)), 1)
            figures[f"{kind}_env_steps_median"] = int(np.median([learning[kind][s]["env_steps"] for s in seeds]))
        figures["learning_wall_s_per_seed"] = learn_s
    finally:
        ray.shutdown()
    result = {**header("impala", quick, info), "commit": commit, "dirty": dirty, "figures": figures,
              "goals": {}, "runs": runs,
              "notes": (f"{ENV}. IMPALA: [64, 64] tanh actor-critic, unroll 32, 4 trajectories per update, queue 8, "
                        "Adam 1e-3, V-trace rho_bar = c_bar = 1; async actors pull weights every unroll. Ray on "
                        f"ray.init(num_cpus={os.cpu_count()}); actors reserve min(1, cores / actors) CPUs each; learner "
                        "in the benchmark process, one torch thread everywhere. env_steps_per_s counts what the "
                        "learner trained on; actor_blocked_fraction is the share of the actors' time spent waiting on "
                        "a full queue (the learner is the bottleneck when it is high). PPO: RL Zoo's CartPole-v1 entry "
                        f"{PPO_ZOO} with constant lr and clip. Learning: {learn_s} s of training per seed and "
                        f"algorithm (seeds {seeds}), IMPALA with 2 Ray actors (the clock starts once they are built; their start-up time is actor_start_s), then 10 deterministic episodes. "
                        f"load average at the end: {round(os.getloadavg()[0], 2)}")}
    out = write_result("impala", quick, result)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
