"""``tinker train``: train PPO, SAC, DQN, IMPALA, hierarchical PPO (HPPO) or BC (imitation of an expert) on a gymnasium or tinker env."""

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
  tinker train --config configs/hppo_planar_sort.yaml --out runs/sort  (hierarchical PPO, curriculum 1 -> 6 objects)

The config YAML holds 'algo', 'env', 'env_kwargs', 'env_import', 'env_wrappers', 'total_timesteps'
and a section named after the algorithm with its hyperparameters (see configs/), or 'rlzoo': an RL Zoo
entry pasted as it is written (see configs/rlzoo/). An optional 'curriculum' section (CurriculumConfig:
param, levels, promote_at, demote_at, window) moves an env setting through its levels on the measured
success rate, e.g. param: success_distance, levels: [0.15, 0.1, 0.05] on tinker/ArmReach-v0; the
changes are in the run's curriculum.json. An 'agents' file trains several agents (see configs/agents_*.yaml).
Command-line flags override the file. The run
directory gets TensorBoard logs (tb/), metrics.jsonl, checkpoints/, final/ and learning_curve.png.
  env: any registered gymnasium id, 'package:Id-v0' (imports package first) or 'package.module:EnvClass'
  env_import: [package, ...]      modules to import first (packages that register their ids)
  env_wrappers:                   gymnasium wrappers, innermost first, with their arguments
    - gymnasium.wrappers.TimeLimit: {max_episode_steps: 100}
    - gymnasium.wrappers.ClipAction
  --rlzoo hyperparams/ppo.yml --env MountainCarContinuous-v0   reads that env's entry of an RL Zoo file
Checkpoints and bundles record the env with its imports and wrappers: reloading rebuilds it.
BC imitates an expert: 'expert' (or --expert) names it as module:Class, built once per env as
Class(env) and called as obs -> action (default for tinker/ArmSort-v0 and ArmReach-v0: the scripted
controllers in sim/scripted.py). BC stops when its episode schedule is done; total_timesteps caps it.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a policy (PPO, SAC, DQN, IMPALA, HPPO, BC) or several agents",
                       description="Train a policy with PPO, SAC, DQN, IMPALA or BC (behaviour cloning + DAgger from "
                                   "an expert), or several agents from an agents file; log to TensorBoard; "
                                   "checkpoint; plot.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algo", choices=["ppo", "sac", "dqn", "bc", "impala", "hppo"], help="algorithm (default: from --config)")
    p.add_argument("--env", help="gymnasium id, e.g. Pendulum-v1, tinker/ArmReach-v0, panda_gym:PandaReach-v3 or "
                                  "package.module:EnvClass (default: from --config)")
    p.add_argument("--config", help="YAML with algo, env, env_kwargs, env_import, env_wrappers, total_timesteps and "
                                    "the algorithm's section (or an 'rlzoo' entry)")
    p.add_argument("--rlzoo", help="an RL Zoo hyperparameter file (hyperparams/ALGO.yml); the entry for --env is used")
    p.add_argument("--expert", help="BC only: the expert as module:Class (default: from --config, else the "
                                    "env's scripted controller)")
    p.add_argument("--total-timesteps", type=int, help="env steps to train (default: from --config or the RL Zoo entry's "
                                                                  "n_timesteps, else 100000)")
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

    from tinker_cli._compose import expert_factory
    from tinker_core.algos import ALGOS, load_algorithm
    from tinker_core.config import config_to_dict, load_config, read_yaml
    from tinker_core.envs import EnvConfig
    from tinker_core.errors import ConfigError
    from tinker_core.rlzoo import algo_of_file, from_rlzoo, read_rlzoo_file

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    data = read_yaml(args.config) if args.config else {}
    if "agents" in data or (args.resume and Path(args.resume, "multiagent.json").is_file()):  # multi-agent
        from tinker_cli.train_agents import run_agents
        return run_agents(args, data)
    unknown = sorted(set(data) - {*TOP_LEVEL, *ALGOS})
    if unknown:
        raise ConfigError(f"{args.config}: unknown top-level key(s) {unknown}; expected {', '.join(TOP_LEVEL)} "
                          "and a section named after the algorithm")
    curriculum = _curriculum(data.get("curriculum"))
    env_id = args.env or data.get("env")
    if args.resume and not env_id:
        env_id = _recorded_env_id(Path(args.resume))
    if env_id and env_id.startswith("tinker/"):
        import tinker_sim  # noqa: F401  (registers the tinker/ ids; the CLI is the composition root)

    if args.resume:
        algo = load_algorithm(args.resume, device=args.device)
        total = args.total_timesteps or data.get("total_timesteps") or 100_000
        if algo.algo_name == "bc":
            algo.set_expert(expert_factory(args.expert or data.get("expert"), algo.env_id))
        out = Path(args.out) if args.out else Path(args.resume).parent.parent
        t0 = time.perf_counter()
        algo.learn(max(total, algo._learn_target), progress=not args.no_progress, out_dir=out,
                   checkpoint_every=args.checkpoint_every, resume=True,
                   callback=_callbacks(_time_limit(args.max_minutes), _bound(curriculum, algo)))
        return _report(algo, out, t0, curriculum)

    name = args.algo or data.get("algo") or (algo_of_file(args.rlzoo) if args.rlzoo else None)
    if name not in ALGOS:
        raise ConfigError(f"--algo: expected one of {sorted(ALGOS)}, got {name!r}")
    if not env_id:
        raise ConfigError("--env: no environment given (on the command line or as 'env' in --config)")
    cls = ALGOS[name]
    section = dict(data.get(name) or {})
    env_wrappers = list(data.get("env_wrappers") or [])
    env_kwargs = dict(data.get("env_kwargs") or {})
    total = args.total_timesteps or data.get("total_timesteps")
    zoo_entry, zoo_where = None, None
    if args.rlzoo:
        zoo_entry, zoo_where = read_rlzoo_file(args.rlzoo, env_id), f"{args.rlzoo}:{env_id}"
    elif "rlzoo" in data:
        zoo_entry, zoo_where = data["rlzoo"] or {}, f"{args.config}:rlzoo"
        if isinstance(zoo_entry, dict) and list(zoo_entry) == [env_id]:
            zoo_entry = zoo_entry[env_id] or {}  # pasted with its env id line
    if zoo_entry is not None:
        if name not in ("ppo", "sac", "dqn"):
            raise ConfigError(f"{zoo_where}: RL Zoo entries are read for ppo, sac and dqn, not {name!r}")
        zoo = from_rlzoo(zoo_entry, name, cls.config_class, zoo_where)
        for note in zoo.notes:
            logging.getLogger("tinker.train").info(note)
        both = sorted(set(zoo.section) & set(section))
        if both:
            raise ConfigError(f"{args.config}: {both} set both in the rlzoo entry and in the {name!r} section; "
                              "keep one")
        section = {**zoo.section, **section}
        env_wrappers = env_wrappers + zoo.env_wrappers
        env_kwargs = {**zoo.env_kwargs, **env_kwargs}
        total = total or zoo.total_timesteps
    total = int(float(total or 100_000))
    if args.seed is not None:
        section["seed"] = args.seed
    if args.device:
        section["device"] = args.device
    config = load_config(cls.config_class, section)
    env = EnvConfig(env_id, env_kwargs, data.get("env_import") or [], env_wrappers)
    env.check()
    out = Path(args.out) if args.out else Path("runs") / f"{name}_{env_id.replace('/', '_').replace(':', '_')}_{time.strftime('%Y%m%d_%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"algo": name, "env": env_id, "env_kwargs": env.kwargs,
                                                 "env_import": env.env_import, "env_wrappers": env.wrappers,
                                                 "total_timesteps": total, name: config_to_dict(config),
                                                 **({"expert": args.expert or data.get("expert")}
                                                    if name == "bc" else {})}, indent=1, default=str))
    algo = cls(env, config)
    if name == "bc":
        algo.set_expert(expert_factory(args.expert or data.get("expert"), env_id))
    t0 = time.perf_counter()
    algo.learn(int(total), progress=not args.no_progress, out_dir=out, checkpoint_every=args.checkpoint_every,
               callback=_callbacks(_time_limit(args.max_minutes), _bound(curriculum, algo)))
    return _report(algo, out, t0, curriculum)


TOP_LEVEL = ("algo", "env", "env_kwargs", "env_import", "env_wrappers", "total_timesteps", "expert", "rlzoo",
             "curriculum")
"""the config file's own keys (besides one section per algorithm)"""


def _recorded_env_id(checkpoint: Path) -> str | None:
    """The env id a checkpoint records (read before loading it, to register tinker/ ids first)."""
    try:
        return json.loads((checkpoint / "meta.json").read_text()).get("env_id")
    except (OSError, ValueError):
        return None  # load_algorithm says what is wrong with the checkpoint


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
    flow = algo.flow
    if flow:
        from tinker_core.monitor import format_flow

        print("the training loop's edges (tinker_core.training.flow; algorithm->env: the env's step, env->algorithm: "
              "acting, storing and updating until the next actions; per vector step):")
        print(format_flow(flow))
    (out / "summary.json").write_text(json.dumps({**summary, "flow": flow}, indent=1))
    print(json.dumps(summary))
    return 0
