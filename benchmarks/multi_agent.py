"""Multi-agent tasks: what the trained policies achieve, against baselines run in the same process.

``python benchmarks/multi_agent.py --swarm RUN/final --beacon RUN/final`` evaluates checkpoints written by
``tinker train --config configs/agents_swarm.yaml`` / ``agents_beacon.yaml`` on held-out seeds
(1000 + i; training resets drew from the run's own seed):

- **SwarmFormation** (20 robots, tolerance 0.15 m): formation success rate (Wilson 95% interval) and
  steps to formation of the shared-parameter PPO policy, against a scripted controller that drives each
  robot straight to its slot and against random actions.
- **BeaconRelay**: success rate of the two trained agents together, against each acting alone (the
  other one replaced by uniformly random actions).
- Training figures (env steps, wall time, env steps/s) from each run's ``summary.json``.

``python benchmarks/multi_agent.py --rllib [--seeds 0 1 2]`` trains tinker's multi-agent PPO and RLlib's
(new API stack) on the same PettingZoo env (SwarmFormation, 4 robots, one shared policy) with the same
hyperparameters and env-step budget (``BENCH`` in benchmarks/_rllib_runner.py), one seed after the
other, both in one process (RLlib: no remote env runners, local learner; in a subprocess with the RLlib
venv's python, built by benchmarks/rllib_venv.sh): env steps/s while training and the greedy return on
the same evaluation seeds. Writes benchmarks/results/multi_agent_rllib.json (``--quick``: a 4000-step
budget, .quick.json).

Not here yet (issue 24): the 20-agent loop's cycle latency on ROS 2. Writes
benchmarks/results/multi_agent.json (``--quick``: fewer episodes, multi_agent.quick.json) and copies each
run's learning curve to docs/multi_agent/.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from _common import ROOT, arg_parser, git_state, header, machine, write_result
from _rllib_runner import BENCH, evaluate, make_env

sys.path.insert(0, str(ROOT))

import tinker_sim.multi  # noqa: E402  (registers the env ids)
from tinker_core.multiagent.trainer import MultiAgentTrainer  # noqa: E402

DOCS = ROOT / "docs" / "multi_agent"
SEED0 = 1000
RLLIB_PY = Path(os.environ.get("RLLIB_VENV", "/work/venv-rllib")) / "bin" / "python"


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    if n == 0:
        return [0.0, 1.0]
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [round(max(0.0, c - h), 4), round(min(1.0, c + h), 4)]


def run_episodes(env, policy, episodes: int) -> dict:
    """``policy(obs_dict) -> actions`` over ``episodes`` seeded episodes: success rate and steps."""
    succ, steps = [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=SEED0 + i)
        n, info = 0, {}
        while env.agents:
            obs, _, _, _, info = env.step(policy({a: o for a, o in obs.items() if a in env.agents}))
            n += 1
        ok = any(bool(v.get("is_success")) for v in info.values())
        succ.append(ok)
        if ok:
            steps.append(n)
    k = int(sum(succ))
    return {"episodes": episodes, "success_rate": round(k / episodes, 4), "success_ci95": wilson(k, episodes),
            "steps_to_success_median": float(np.median(steps)) if steps else None}


def run_summary(final: Path) -> dict:
    s = final.parent / "summary.json"
    if not s.is_file():
        return {}
    d = json.loads(s.read_text())
    this_run = d.get("timesteps_this_run", d.get("timesteps"))
    out = {"train_env_steps": d.get("timesteps"), "train_episodes": d.get("episodes"),
           "train_success_rate_last50": d.get("success_rate_last50"),
           "last_run_env_steps": this_run, "last_run_wall_s": d.get("wall_s")}
    if this_run and d.get("wall_s"):
        out["last_run_env_steps_per_s"] = round(this_run / d["wall_s"], 1)
    return out


def copy_curve(final: Path, name: str) -> None:
    run = final.parent
    DOCS.mkdir(parents=True, exist_ok=True)
    if (run / "learning_curve.png").is_file():
        shutil.copy(run / "learning_curve.png", DOCS / f"{name}_curve.png")
    meta = json.loads((final / "multiagent.json").read_text())
    curve = {"env_steps": [int(s) for s, _ in meta["curve"]], "mean_agent_return": [r for _, r in meta["curve"]],
             "success": meta["successes"], "agents_file": meta["agents_file"]}
    if (run / "summary.json").is_file():
        curve["summary"] = json.loads((run / "summary.json").read_text())
    (DOCS / f"{name}_curve.json").write_text(json.dumps(curve) + "\n")


def swarm(final: Path, episodes: int) -> dict:
    tr = MultiAgentTrainer.load(final)
    env = tr.env
    rng = np.random.default_rng(0)
    out = {"tolerance_m": env.tolerance, "robots": env.n, **run_summary(final)}
    out["ppo_shared"] = run_episodes(env, lambda o: tr.act(o, deterministic=True), episodes)
    out["scripted_straight_to_slot"] = run_episodes(
        env, lambda o: {a: np.clip(2.0 * x[:2], -1, 1).astype(np.float32) for a, x in o.items()}, episodes)
    out["random"] = run_episodes(env, lambda o: {a: rng.uniform(-1, 1, 2).astype(np.float32) for a in o},
                                 max(10, episodes // 5))
    tr.close()
    return out


def beacon(final: Path, episodes: int) -> dict:
    tr = MultiAgentTrainer.load(final)
    env = tr.env
    rng = np.random.default_rng(0)

    def with_random(who: str):
        def policy(o):
            acts = tr.act({a: x for a, x in o.items() if a != who}, deterministic=True)
            if who in o:
                acts[who] = int(rng.integers(4)) if who == "spotter" else rng.uniform(-1, 1, 2).astype(np.float32)
            return acts
        return policy

    out = {**run_summary(final),
           "together": run_episodes(env, lambda o: tr.act(o, deterministic=True), episodes),
           "rover_alone_spotter_random": run_episodes(env, with_random("spotter"), episodes),
           "spotter_alone_rover_random": run_episodes(env, with_random("rover"), episodes)}
    tr.close()
    return out


def tinker_ppo(bench: dict, seed: int) -> dict:
    """tinker's MultiAgentTrainer with one shared PPO group, as ``bench`` says: training env steps/s
    (learn() only) and the greedy evaluation."""
    import torch

    torch.set_num_threads(1)
    n = int(bench["env_kwargs"]["n_robots"])
    agents = {"total_timesteps": int(bench["total_env_steps"]), "seed": seed, "centralized_critic": False,
              "agents": {"robot_*": {"policy": "PPO", "group": "swarm", "hyperparameters": {
                  "n_steps": int(bench["rollout_env_steps"]) * n, "batch_size": int(bench["minibatch_agent_steps"]),
                  "n_epochs": int(bench["epochs"]), "learning_rate": float(bench["lr"]),
                  "gamma": float(bench["gamma"]), "gae_lambda": float(bench["lambda"]),
                  "clip_range": float(bench["clip"]), "vf_coef": float(bench["vf_coef"]),
                  "ent_coef": float(bench["ent_coef"]), "max_grad_norm": float(bench["max_grad_norm"]),
                  "net_arch": list(bench["net_arch"]), "activation": bench["activation"], "log_std_init": 0.0,
                  "normalize_obs": False, "normalize_reward": False}}}}
    t_build = time.perf_counter()
    tr = MultiAgentTrainer(make_env(bench), agents)
    build_s = time.perf_counter() - t_build
    t0 = time.perf_counter()
    tr.learn(progress=False, tensorboard=False)
    train_s = time.perf_counter() - t0
    env = make_env(bench)
    ev = evaluate(env, lambda o: tr.act(o, deterministic=True), int(bench["eval_episodes"]), int(bench["eval_seed0"]))
    env.close()
    tr.close()
    return {"seed": seed, "env_steps": tr.num_timesteps, "agent_steps": tr.num_timesteps * n,
            "train_wall_s": round(train_s, 2), "build_s": round(build_s, 2),
            "env_steps_per_s": round(tr.num_timesteps / train_s, 1), "greedy_eval": ev}


def rllib_ppo(bench: dict, seed: int) -> dict:
    """benchmarks/_rllib_runner.py for one seed with the RLlib venv's python (its RESULT line)."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": ""}
    p = subprocess.run([str(RLLIB_PY), str(ROOT / "benchmarks" / "_rllib_runner.py"), "--seed", str(seed),
                        "--json", json.dumps(bench)], capture_output=True, text=True, env=env, timeout=3600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"RLlib runner failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def spread(runs: list[dict]) -> dict:
    sps = [r["env_steps_per_s"] for r in runs]
    ret = [r["greedy_eval"]["mean_return"] for r in runs]
    suc = [r["greedy_eval"]["success_rate"] for r in runs]
    return {"env_steps_per_s_mean": round(float(np.mean(sps)), 1), "env_steps_per_s_min_max": [min(sps), max(sps)],
            "greedy_return_mean": round(float(np.mean(ret)), 4), "greedy_return_std_over_seeds": round(float(np.std(ret)), 4),
            "greedy_return_min_max": [min(ret), max(ret)], "success_rate_mean": round(float(np.mean(suc)), 4)}


def versus_rllib(a) -> int:
    """tinker vs RLlib multi-agent PPO, seed after seed; writes multi_agent_rllib(.quick).json."""
    if not RLLIB_PY.is_file():
        print(f"skipped: no RLlib venv at {RLLIB_PY.parent.parent}; build it with benchmarks/rllib_venv.sh "
              "(or set RLLIB_VENV)", file=sys.stderr)
        return 2
    bench = dict(BENCH)
    if a.quick:
        bench.update(total_env_steps=4000, eval_episodes=5)
    if a.total_env_steps:
        bench["total_env_steps"] = a.total_env_steps
    name = "multi_agent_rllib"
    if a.robots and a.robots != bench["env_kwargs"]["n_robots"]:
        bench["env_kwargs"] = {**bench["env_kwargs"], "n_robots": a.robots}
        name += f"_{a.robots}robots"
    info = machine(("torch", "pybullet", "pettingzoo", "gymnasium"), load_key="load_avg_start")
    cmd = "python benchmarks/multi_agent.py " + " ".join(sys.argv[1:])
    runs: dict[str, list[dict]] = {"tinker": [], "rllib": []}
    for seed in a.seeds:
        for side, fn in (("tinker", tinker_ppo), ("rllib", rllib_ppo)):
            r = fn(bench, seed)
            runs[side].append(r)
            print(f"seed {seed} {side}: {r['env_steps']} env steps in {r['train_wall_s']} s = "
                  f"{r['env_steps_per_s']} env steps/s; greedy return {r['greedy_eval']['mean_return']} "
                  f"(success {r['greedy_eval']['success_rate']})", flush=True)
    t, r = spread(runs["tinker"]), spread(runs["rllib"])
    ratio = round(t["env_steps_per_s_mean"] / r["env_steps_per_s_mean"], 2)
    gap = round(t["greedy_return_mean"] - r["greedy_return_mean"], 4)
    worst_spread = max(t["greedy_return_std_over_seeds"], r["greedy_return_std_over_seeds"])
    figures = {"bench": bench, "tinker": {"summary": t, "runs": runs["tinker"]},
               "rllib": {"summary": r, "runs": runs["rllib"]},
               "env_steps_per_s_ratio_tinker_over_rllib": ratio,
               "env_steps_per_s_ratio_per_seed": [round(x["env_steps_per_s"] / y["env_steps_per_s"], 2)
                                                  for x, y in zip(runs["tinker"], runs["rllib"])],
               "greedy_return_tinker_minus_rllib": gap,
               "return_not_worse_beyond_spread": bool(gap >= -worst_spread),
               "setup": {"tinker": "MultiAgentTrainer, one PPO group shared by all robots, in this process "
                                   "(torch 1 thread)",
                         "rllib": "PPOConfig new API stack, policy 'shared' for every robot, num_env_runners=0 "
                                  "(sampling in the driver), num_learners=0 (local learner), torch 1 thread, "
                                  "separate process with the RLlib venv (gymnasium 1.2.2)",
                         "timed": "training loop only (learn() / algo.train() calls); build and evaluation "
                                  "are not timed (build_s is recorded); tinker's compiled PPO update is built "
                                  "once per TINKER_NATIVE_CACHE (about 20 s, before these runs) and loaded from it",
                         "tinker_native_cache": os.environ.get("TINKER_NATIVE_CACHE"),
                         "differs": ["RLlib stops at the first train() past the budget (env_steps may exceed it)",
                                     "RLlib's default weight init vs tinker's orthogonal init",
                                     "RLlib normalizes advantages over the train batch, tinker per minibatch",
                                     "Adam eps: RLlib 1e-8 (its default), tinker 1e-5",
                                     "vf clipping off on both (RLlib vf_clip_param=1e9)"]}}
    print(f"env steps/s tinker/RLlib = {ratio} (goal >= 2); greedy return tinker {t['greedy_return_mean']} "
          f"+- {t['greedy_return_std_over_seeds']} vs RLlib {r['greedy_return_mean']} "
          f"+- {r['greedy_return_std_over_seeds']}")
    result = {**header(name, a.quick, info, cmd), "figures": figures,
              "goals": {"env_steps_per_s_ratio_tinker_over_rllib": ">= 2",
                        "greedy_return_tinker_minus_rllib": ">= -(larger std over seeds)"}}
    write_result(name, a.quick, result)
    return 0


def main() -> int:
    ap = arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--swarm", type=Path, help="checkpoint of a SwarmFormation run (RUN/final)")
    ap.add_argument("--beacon", type=Path, help="checkpoint of a BeaconRelay run (RUN/final)")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--rllib", action="store_true", help="tinker vs RLlib multi-agent PPO (needs benchmarks/rllib_venv.sh)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="--rllib: training seeds")
    ap.add_argument("--total-env-steps", type=int, default=0, help="--rllib: override the env-step budget")
    ap.add_argument("--robots", type=int, default=0,
                    help="--rllib: robots in SwarmFormation (default 4); another count writes multi_agent_rllib_<N>robots.json")
    a = ap.parse_args()
    if a.rllib:
        return versus_rllib(a)
    episodes = 10 if a.quick else a.episodes
    commit, dirty = git_state()
    info = machine(("torch", "pybullet", "pettingzoo"), load_key="load_avg_start")
    cmd = "python benchmarks/multi_agent.py " + " ".join(sys.argv[1:])
    figures: dict = {}
    t0 = time.perf_counter()
    if a.swarm:
        figures["swarm_formation"] = swarm(a.swarm, episodes)
        copy_curve(a.swarm, "swarm")
    if a.beacon:
        figures["beacon_relay"] = beacon(a.beacon, episodes)
        copy_curve(a.beacon, "beacon")
    figures["eval_wall_s"] = round(time.perf_counter() - t0, 1)
    result = {**header("multi_agent", a.quick, info, cmd), "commit": commit, "dirty": dirty, "figures": figures,
              "goals": {"swarm_formation.ppo_shared.success_rate": ">= 0.9 (within 2 h of training on 2 cores)",
                        "beacon_relay.together.success_rate": "clearly above both *_alone rows"},
              "missing": [
                          "20-agent cycle latency p50/p99 on ROS 2"]}
    print(json.dumps(figures, indent=1))
    write_result("multi_agent", a.quick, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
