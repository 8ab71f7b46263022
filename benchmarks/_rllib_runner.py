"""RLlib's multi-agent PPO on tinker's SwarmFormation, for ``benchmarks/multi_agent.py --rllib``.

Run by that script with the RLlib venv's python (``benchmarks/rllib_venv.sh`` builds /work/venv-rllib):
``python benchmarks/_rllib_runner.py --seed S --json '{...}'`` trains one seed and prints one JSON line
(``RESULT {...}``): env steps, training wall time, env steps/s, greedy evaluation.

This module also holds what both sides share and imports only numpy at the top, so the project's venv
imports it too: the task and hyperparameters (`BENCH`), the env factory and the greedy evaluation.
tinker is not installed in the RLlib venv: `shim_path` links tinker_core and tinker_sim (= sim/) of
this repository into a temporary directory put on ``sys.path``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

BENCH: dict[str, Any] = {
    "env": "tinker/SwarmFormation-v0",
    "env_kwargs": {"n_robots": 4, "tolerance": 0.15, "max_steps": 50},
    "total_env_steps": 20_000,
    "rollout_env_steps": 200,        # env steps per PPO update (x n_robots agent steps)
    "minibatch_agent_steps": 200,
    "epochs": 5,
    "lr": 3e-4,
    "gamma": 0.97,
    "lambda": 0.95,
    "clip": 0.2,
    "vf_coef": 0.5,
    "ent_coef": 0.0,
    "max_grad_norm": 0.5,
    "net_arch": [64, 64],
    "activation": "tanh",
    "eval_episodes": 20,
    "eval_seed0": 10_000,
}
"""One task, one set of hyperparameters for both sides. One policy shared by all robots (parameter
sharing), separate policy and value MLPs, state-independent log-std starting at 0, advantages
normalized per minibatch (tinker) / batch (RLlib), no observation or reward normalization (tinker's
are off here: RLlib has no per-group reward normalization to match)."""


def shim_path() -> str:
    """A temporary directory linking ``tinker_core`` and ``tinker_sim`` to this repository."""
    d = Path(tempfile.mkdtemp(prefix="tkshim"))
    (d / "tinker_core").symlink_to(ROOT / "tinker_core")
    (d / "tinker_sim").symlink_to(ROOT / "sim")
    return str(d)


def make_env(bench: Mapping[str, Any]) -> Any:
    """A SwarmFormation (tinker's PettingZoo Parallel env) as ``bench`` says."""
    from tinker_sim.multi.formation import SwarmFormation

    return SwarmFormation(**bench["env_kwargs"])


def evaluate(env: Any, policy: Callable[[dict], dict], episodes: int, seed0: int) -> dict[str, Any]:
    """``episodes`` episodes reset with seeds ``seed0 + i``, greedy ``policy(obs) -> actions``: the mean
    per-agent return of each episode, its mean/std, and the success rate."""
    rets, succ = [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed0 + i)
        total: dict[str, float] = {}
        info: Mapping[str, Any] = {}
        while env.agents:
            obs, rew, _, _, info = env.step(policy({a: o for a, o in obs.items() if a in env.agents}))
            for a, v in rew.items():
                total[a] = total.get(a, 0.0) + float(v)
        rets.append(float(np.mean(list(total.values()))))
        succ.append(any(bool(v.get("is_success")) for v in info.values()))
    return {"episodes": episodes, "mean_return": round(float(np.mean(rets)), 4),
            "std_return": round(float(np.std(rets)), 4), "success_rate": round(float(np.mean(succ)), 4)}


def run_rllib(bench: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """Train RLlib's PPO (new API stack, 1 process: local env runner and local learner) for
    ``bench['total_env_steps']`` env steps and evaluate it greedily."""
    import ray
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec
    from ray.rllib.env.wrappers.pettingzoo_env import ParallelPettingZooEnv
    from ray.tune.registry import register_env

    torch.set_num_threads(1)
    n = int(bench["env_kwargs"]["n_robots"])
    register_env("tinker_swarm", lambda _cfg: ParallelPettingZooEnv(make_env(bench)))
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             _temp_dir=tempfile.mkdtemp(prefix="rl", dir="/tmp"))
    t_build = time.perf_counter()
    config = (
        PPOConfig()
        .environment("tinker_swarm")
        .framework("torch")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=1, rollout_fragment_length="auto")
        .learners(num_learners=0)
        .multi_agent(policies={"shared"}, policy_mapping_fn=lambda aid, *a, **k: "shared")
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs={"shared": RLModuleSpec(
            model_config=DefaultModelConfig(fcnet_hiddens=list(bench["net_arch"]),
                                            fcnet_activation=bench["activation"], vf_share_layers=False,
                                            free_log_std=True))}))
        .training(train_batch_size_per_learner=int(bench["rollout_env_steps"]) * n,
                  minibatch_size=int(bench["minibatch_agent_steps"]), num_epochs=int(bench["epochs"]),
                  lr=float(bench["lr"]), gamma=float(bench["gamma"]), lambda_=float(bench["lambda"]),
                  clip_param=float(bench["clip"]), vf_loss_coeff=float(bench["vf_coef"]),
                  entropy_coeff=float(bench["ent_coef"]), use_kl_loss=False, vf_clip_param=1e9,
                  grad_clip=float(bench["max_grad_norm"]), grad_clip_by="global_norm")
        .debugging(seed=seed, log_level="ERROR")
        .reporting(metrics_num_episodes_for_smoothing=20)
    )
    config.count_steps_by = "agent_steps"
    algo = config.build_algo()
    build_s = time.perf_counter() - t_build
    env_steps, agent_steps, iters, per_iter = 0, 0, 0, []
    t0 = time.perf_counter()
    while env_steps < int(bench["total_env_steps"]):
        res = algo.train()
        iters += 1
        env_steps = _lifetime(res, "num_env_steps_sampled_lifetime")
        agent_steps = _lifetime(res, "num_agent_steps_sampled_lifetime")
        per_iter.append(env_steps - sum(per_iter))
    train_s = time.perf_counter() - t0
    module = algo.get_module("shared")

    def greedy(obs: dict) -> dict:
        names = list(obs)
        with torch.no_grad():
            out = module.forward_inference({"obs": torch.as_tensor(np.stack([obs[a] for a in names]))})
        mean = out["action_dist_inputs"][:, :2].numpy()
        return {a: np.clip(mean[i], -1.0, 1.0).astype(np.float32) for i, a in enumerate(names)}

    env = make_env(bench)
    ev = evaluate(env, greedy, int(bench["eval_episodes"]), int(bench["eval_seed0"]))
    env.close()
    algo.stop()
    ray.shutdown()
    return {"seed": seed, "env_steps": env_steps, "agent_steps": agent_steps, "train_iterations": iters,
            "env_steps_per_iteration": sorted(set(per_iter)),
            "train_wall_s": round(train_s, 2), "build_s": round(build_s, 2),
            "env_steps_per_s": round(env_steps / train_s, 1), "greedy_eval": ev,
            "versions": {"ray": ray.__version__, "torch": torch.__version__}}


def _lifetime(res: Mapping[str, Any], key: str) -> int:
    """A lifetime counter of an RLlib result (top level or under env_runners; summed if per agent)."""
    v = res.get(key, res.get("env_runners", {}).get(key, 0))
    return int(sum(v.values())) if isinstance(v, Mapping) else int(v or 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="{}", help="overrides of BENCH (a JSON object)")
    a = ap.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    sys.path.insert(0, shim_path())
    bench = {**BENCH, **json.loads(a.json)}
    print("RESULT " + json.dumps(run_rllib(bench, a.seed)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
