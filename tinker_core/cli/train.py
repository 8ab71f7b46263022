"""``tinker train``: train PPO, SAC, DQN or BC (imitation of an expert) on a gymnasium or tinker env."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ORDER = 20

EPILOG = """\
examples:
  tinker train --algo ppo --env Pendulum-v1
  tinker train --config configs/sac_pendulum.yaml --total-timesteps 20000 --seed 1 --out runs/sac_pendulum
  tinker train --config configs/sac_arm_reach.yaml --out runs/arm_reach
  tinker train --resume runs/arm_reach/checkpoints/step_20000 --out runs/arm_reach
  tinker train --config configs/bc_arm_sort.yaml --out runs/arm_sort      (behaviour cloning + DAgger)

The config YAML holds 'algo', 'env', 'env_kwargs', 'total_timesteps' and a section named after the
algorithm with its hyperparameters (see configs/). An optional 'curriculum' section (CurriculumConfig:
param, levels, promote_at, demote_at, window) moves an env setting through its levels on the measured
success rate, e.g. param: success_distance, levels: [0.15, 0.1, 0.05] on tinker/ArmReach-v0; the
changes are in the run's curriculum.json. Command-line flags override the file. The run
directory gets TensorBoard logs (tb/), metrics.jsonl, checkpoints/, final/ and learning_curve.png.
BC imitates an expert: 'expert' (or --expert) names it as module:Class, built once per env as
Class(env) and called as obs -> action (default for tinker/ArmSort-v0 and ArmReach-v0: the scripted
controllers in sim/scripted.py). BC stops when its episode schedule is done; total_timesteps caps it.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a policy (PPO, SAC, DQN, BC)",
                       description="Train a policy with PPO, SAC, DQN or BC (behaviour cloning + DAgger from an "
                                   "expert); log to TensorBoard; checkpoint; plot.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algo", choices=["ppo", "sac", "dqn", "bc", "impala"], help="algorithm (default: from --config)")
    p.add_argument("--env", help="gymnasium id, e.g. Pendulum-v1 or tinker/ArmReach-v0 (default: from --config)")
    p.add_argument("--config", help="YAML with algo, env, env_kwargs, total_timesteps and the algorithm's section")
    p.add_argument("--expert", help="BC only: the expert as module:Class (default: from --config, else the "
                                    "env's scripted controller)")
    p.add_argument("--total-timesteps", type=int, help="env steps to train (default: from --config, else 100000)")
    p.add_argument("--seed", type=int, help="random seed (overrides the config)")
    p.add_argument("--device", help="auto, cpu or cuda (overrides the config)")
    p.add_argument("--out", help="run directory (default: runs/ALGO_ENV_TIME)")
    p.add_argument("--checkpoint-every", type=int, default=0, help="env steps between checkpoints (0: final only)")
    p.add_argument("--resume", help="checkpoint directory to continue from (same schedule, same total)")
    p.add_argument("--max-minutes", type=float, default=0.0,
                   help="stop (with a final checkpoint) after this much wall time, 0: no limit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import logging

    import gymnasium as gym

    from tinker_core.algos import ALGOS, load_algorithm
    from tinker_core.config import load_config, read_yaml
    from tinker_core.errors import ConfigError

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    data = read_yaml(args.config) if args.config else {}
    unknown = sorted(set(data) - {"algo", "env", "env_kwargs", "total_timesteps", "expert", "curriculum", *ALGOS})
    if unknown:
        raise ConfigError(f"{args.config}: unknown top-level key(s) {unknown}; expected algo, env, env_kwargs, "
                          "total_timesteps, expert (BC), curriculum and a section named after the algorithm")
    curriculum = _curriculum(data.get("curriculum"))
    env_id = args.env or data.get("env")
    if env_id and env_id.startswith("tinker/"):
        import sim  # noqa: F401  (registers the tinker/ ids; the CLI is the composition root)

    total = args.total_timesteps or data.get("total_timesteps") or 100_000
    if args.resume:
        algo = load_algorithm(args.resume, device=args.device)
        if algo.algo_name == "bc":
            algo.set_expert(_expert_factory(args.expert or data.get("expert"), algo.env_id))
        out = Path(args.out) if args.out else Path(args.resume).parent.parent
        t0 = time.perf_counter()
        algo.learn(max(total, algo._learn_target), progress=not args.no_progress, out_dir=out,
                   checkpoint_every=args.checkpoint_every, resume=True,
                   callback=_callbacks(_time_limit(args.max_minutes), _bound(curriculum, algo)))
        return _report(algo, out, t0, curriculum)

    name = args.algo or data.get("algo")
    if name not in ALGOS:
        raise ConfigError(f"--algo: expected one of {sorted(ALGOS)}, got {name!r}")
    if not env_id:
        raise ConfigError("--env: no environment given (on the command line or as 'env' in --config)")
    cls = ALGOS[name]
    section = dict(data.get(name) or {})
    if args.seed is not None:
        section["seed"] = args.seed
    if args.device:
        section["device"] = args.device
    config = load_config(cls.config_class, section)
    env_kwargs = dict(data.get("env_kwargs") or {})
    try:
        gym.spec(env_id)
    except gym.error.Error as e:
        raise ConfigError(f"--env: {e}") from None
    out = Path(args.out) if args.out else Path("runs") / f"{name}_{env_id.replace('/', '_')}_{time.strftime('%Y%m%d_%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"algo": name, "env": env_id, "env_kwargs": env_kwargs,
                                                 "total_timesteps": total, name: section,
                                                 **({"expert": args.expert or data.get("expert")}
                                                    if name == "bc" else {})}, indent=1))
    algo = cls(env_id, config, env_kwargs=env_kwargs)
    if name == "bc":
        algo.set_expert(_expert_factory(args.expert or data.get("expert"), env_id))
    t0 = time.perf_counter()
    algo.learn(int(total), progress=not args.no_progress, out_dir=out, checkpoint_every=args.checkpoint_every,
               callback=_callbacks(_time_limit(args.max_minutes), _bound(curriculum, algo)))
    return _report(algo, out, t0, curriculum)


SCRIPTED_EXPERTS = {"tinker/ArmReach-v0": "sim.scripted:ScriptedReachController",
                    "tinker/ArmSort-v0": "sim.scripted:ScriptedSortController"}
"""the default BC expert per env id (module:Class, built as Class(env))"""


def _expert_factory(spec: str | None, env_id: str | None):
    """``module:Class`` -> a factory ``env -> expert`` (imported here: the CLI is the composition root)."""
    import importlib

    from tinker_core.errors import ConfigError

    spec = spec or SCRIPTED_EXPERTS.get(env_id or "")
    if not spec:
        raise ConfigError(f"expert: BC needs an expert for {env_id!r}; give 'expert: module:Class' in the config or "
                          f"--expert (scripted defaults exist for {sorted(SCRIPTED_EXPERTS)})")
    module, _, attr = spec.partition(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError, ValueError) as e:
        raise ConfigError(f"expert: expected module:Class that can be imported, got {spec!r} ({e})") from None
    return cls


def _curriculum(section):
    """The config's 'curriculum' section as a `Curriculum` (None without one)."""
    if section is None:
        return None
    from tinker_core.config import load_config
    from tinker_core.curriculum import Curriculum, CurriculumConfig

    return Curriculum(load_config(CurriculumConfig, section))


def _bound(curriculum, algo):
    """The curriculum bound to the algorithm's envs (the first level applies before the first step)."""
    if curriculum is not None:
        curriculum.bind(algo)
    return curriculum


def _callbacks(*cbs):
    """One ``learn`` callback calling each given one; stops when any returns False."""
    cbs = [cb for cb in cbs if cb is not None]
    if not cbs:
        return None
    return lambda algo, info: all([cb(algo, info) is not False for cb in cbs])


def _time_limit(minutes: float):
    if not minutes:
        return None
    end = time.perf_counter() + 60.0 * minutes
    return lambda algo, info: time.perf_counter() < end


def _report(algo, out: Path, t0: float, curriculum=None) -> int:
    import numpy as np

    wall = time.perf_counter() - t0
    rets = [r for _, r in algo.episode_history[-20:]]
    summary = {"algo": algo.algo_name, "env": algo.env_id, "timesteps": algo.num_timesteps, "wall_s": round(wall, 1),
               "mean_return_last20": float(np.mean(rets)) if rets else None, "checkpoint": str(out / "final")}
    if algo.success_history:
        summary["success_rate_last50"] = float(np.mean(algo.success_history[-50:]))
    if algo.algo_name == "bc":
        summary.update(episodes_labelled=algo.episodes_labelled, expert_calls=algo.expert_calls, rounds=algo.round_log)
    if curriculum is not None:
        summary["curriculum"] = {"param": curriculum.config.param, "level": curriculum.level,
                                 "value": curriculum.value, "changes": len(curriculum.history)}
        (out / "curriculum.json").write_text(json.dumps({"config": curriculum.config.__dict__,
                                                         "history": curriculum.history}, indent=1))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 0
