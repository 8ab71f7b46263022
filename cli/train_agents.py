"""``tinker train --config AGENTS.yaml``: the multi-agent branch of ``tinker train``.

A config with an ``agents:`` section is an agents file (see tinker_core.multiagent.agents_file); it
trains every agent of its PettingZoo Parallel env with `MultiAgentTrainer`. tinker's own env ids
(``tinker/SwarmFormation-v0``, ``tinker/BeaconRelay-v0``) are registered by importing ``tinker_sim.multi``
here (the CLI is the composition root); others are named ``module:attr``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Mapping


def run_agents(args: argparse.Namespace, data: Mapping[str, Any]) -> int:
    """Train from an agents file; the run directory gets metrics.jsonl, checkpoints/, final/,
    learning_curve.png, summary.json and the agents file it ran."""
    import tinker_sim.multi  # noqa: F401  (registers tinker's multi-agent env ids)
    from tinker_core.errors import ConfigError
    from tinker_core.multiagent.agents_file import AgentsConfig, dump_agents_file
    from tinker_core.multiagent.trainer import MultiAgentTrainer

    for flag in ("algo", "expert"):
        if getattr(args, flag, None):
            raise ConfigError(f"--{flag}: an agents file names each agent's policy; drop --{flag}")
    if getattr(args, "resume", None):
        trainer = MultiAgentTrainer.load(args.resume)
        out = Path(args.out) if args.out else Path(args.resume).parent.parent
    else:
        raw = dict(data)
        if args.env:
            raw["env"] = args.env
        if args.seed is not None:
            raw["seed"] = args.seed
        if args.total_timesteps:
            raw["total_timesteps"] = args.total_timesteps
        config = AgentsConfig.from_dict(raw, str(args.config))
        trainer = MultiAgentTrainer(None, config)
        out = Path(args.out) if args.out else Path("runs") / f"agents_{time.strftime('%Y%m%d_%H%M%S')}"
        out.mkdir(parents=True, exist_ok=True)
        dump_agents_file(config, out / "agents.yaml")
    total = int(args.total_timesteps or trainer.config.total_timesteps)
    if args.resume:
        total = max(0, total - trainer.num_timesteps)
    end = time.perf_counter() + 60.0 * args.max_minutes if args.max_minutes else None
    start = trainer.num_timesteps
    t0 = time.perf_counter()
    if total:
        trainer.learn(total, out_dir=out, checkpoint_every=args.checkpoint_every, progress=not args.no_progress,
                      callback=(lambda tr, info: time.perf_counter() < end) if end else None)
    wall = time.perf_counter() - t0
    steps_this_run = trainer.num_timesteps - start
    rets = [r for _, r in trainer.curve[-20:]]
    summary = {"env": trainer.env_id, "timesteps": trainer.num_timesteps, "episodes": trainer.num_episodes,
               "timesteps_this_run": steps_this_run, "wall_s": round(wall, 1), "mean_return_last20": float(sum(rets) / len(rets)) if rets else None,
               "groups": {g.name: {"policy": g.entry.policy, "members": len(g.members), "updates": g.algo.num_updates}
                          for g in trainer.groups.values()},
               "checkpoint": str(out / "final")}
    if trainer.successes:
        last = trainer.successes[-50:]
        summary["success_rate_last50"] = sum(last) / len(last)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    trainer.close()
    return 0
