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

Not here yet (issue 24): tinker against RLlib's multi-agent PPO on the same PettingZoo env, and the
20-agent loop's cycle latency on ROS 2. Writes benchmarks/results/multi_agent.json (``--quick``: fewer
episodes, multi_agent.quick.json) and copies each run's learning curve to docs/multi_agent/.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np

from _common import ROOT, arg_parser, git_state, header, machine, write_result

sys.path.insert(0, str(ROOT))

import tinker_sim.multi  # noqa: E402  (registers the env ids)
from tinker_core.multiagent.trainer import MultiAgentTrainer  # noqa: E402

DOCS = ROOT / "docs" / "multi_agent"
SEED0 = 1000


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


def main() -> int:
    ap = arg_parser(__doc__.splitlines()[0])
    ap.add_argument("--swarm", type=Path, help="checkpoint of a SwarmFormation run (RUN/final)")
    ap.add_argument("--beacon", type=Path, help="checkpoint of a BeaconRelay run (RUN/final)")
    ap.add_argument("--episodes", type=int, default=100)
    a = ap.parse_args()
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
              "missing": ["RLlib multi-agent PPO on the same PettingZoo env (steps/s ratio, final return)",
                          "20-agent cycle latency p50/p99 on ROS 2"]}
    print(json.dumps(figures, indent=1))
    write_result("multi_agent", a.quick, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
