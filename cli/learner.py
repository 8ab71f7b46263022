"""``tinker learner``: run the learner process, steer it live (``ctl``), or start rollout workers.

This module is the learner's composition root: only here do sim (the envs) and deploy (the bundle
exporter) come in, lazily, inside ``run``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from typing import Any

ORDER = 40

EPILOG = """\
examples:
  tinker learner --config configs/learner.yaml             run the learner (CUDA when available)
  tinker learner ctl set lr=3e-4                           change the learning rate of the running learner
  tinker learner ctl pause | resume | checkpoint | publish | status | join | stop
  tinker learner workers --learner tcp://127.0.0.1:5557 --config configs/workers.yaml --steps 20000
                                                           rollout workers for the learner answering there

The learner's YAML file holds a 'learner:' section (LearnerConfig fields); the workers' a 'workers:' section
(DistributedConfig fields): they ask the running learner (--learner) which env to step and where to send.
A restart with the same checkpoint_dir resumes algorithm, replay and counters.
A bundle is published only after the evaluation gate in simulation passes; the robot side keeps its
SafetyWrapper in the loop, so nothing the learner does can bypass it.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("learner", help="the training process fed over ZeroMQ; ctl steers it live",
                       description="Run the learner: receive transitions over ZeroMQ, train, checkpoint, "
                                   "publish gated weight bundles.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file with a 'learner:' section (LearnerConfig fields)")
    p.add_argument("--checkpoint-dir", help="override learner.checkpoint_dir")
    p.add_argument("--device", help="override learner.device: auto, cpu or cuda[:N]")
    p.add_argument("--max-updates", type=int, default=None, help="stop after this many gradient updates")
    p.add_argument("--max-seconds", type=float, default=None, help="stop after this many seconds")
    ls = p.add_subparsers(dest="learner_cmd", metavar="{ctl,workers}")
    c = ls.add_parser("ctl", help="send a control command to a running learner",
                      description="Control a running learner over its control socket.")
    c.add_argument("--endpoint", help="control endpoint (default: learner.control_endpoint of --config, "
                                      "else tcp://127.0.0.1:5557)")
    c.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the answer")
    c.add_argument("cmd", choices=["set", "pause", "resume", "checkpoint", "publish", "status", "join", "stop"])
    c.add_argument("values", nargs="*", help="for set: NAME=VALUE ... (e.g. lr=3e-4 batch_size=128)")
    c.add_argument("--config", dest="ctl_config", help=argparse.SUPPRESS)
    w = ls.add_parser("workers", help="run rollout workers that feed a running learner",
                      description="Rollout workers (local threads or Ray actors) collecting in simulation for a "
                                  "running learner: the one at --learner (it says which env to step and where to "
                                  "send), else the one --config's 'learner:' section describes. Their own settings: "
                                  "--config's 'workers:' section (DistributedConfig fields) and the flags below.")
    w.add_argument("--config", dest="workers_config", metavar="FILE",
                   help="YAML with a 'workers:' section (and, without --learner, the learner's 'learner:' section)")
    w.add_argument("--learner", metavar="ENDPOINT", default=None,
                   help="the running learner's control endpoint (e.g. tcp://10.0.0.5:5557); the workers ask it for "
                        "the env and the endpoints to feed (ctl join), so --config needs no 'learner:' section")
    w.add_argument("--backend", choices=["local", "ray"], default=None)
    w.add_argument("--num-workers", type=int, default=None)
    w.add_argument("--steps", type=int, default=10_000, help="env steps over all workers")
    w.add_argument("--ray-address", default=None, help="Ray cluster address (default: a local Ray)")
    p.set_defaults(func=run)


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _load(args: argparse.Namespace):
    from tinker_core.config import load_config, read_yaml
    from tinker_core.learner import LearnerConfig

    cfg_path = (getattr(args, "config", None) or getattr(args, "ctl_config", None)
                or getattr(args, "workers_config", None))
    data = read_yaml(cfg_path) if cfg_path else {}
    section = data.get("learner", data if "workers" not in data else {})
    cfg = load_config(LearnerConfig, dict(section or {}))
    return cfg, data


def make_env(env_id: str, env_kwargs: dict | None = None) -> Any:
    """Build a gymnasium env; ``tinker/`` ids register the sim package first (picklable for Ray via partial)."""
    import gymnasium as gym

    if env_id.startswith("tinker/"):
        import tinker_sim  # noqa: F401  (registers the tinker/ ids)
    return gym.make(env_id, **(env_kwargs or {}))


def make_gate_env(env_id: str, env_kwargs: dict | None = None) -> Any:
    """The evaluation gate's env: for ``tinker/`` ids the SafetyWrapper filters every command, as on the
    robot, so the gate sees the candidate's e-stops; other ids are built plain."""
    if not env_id.startswith("tinker/"):
        return make_env(env_id, env_kwargs)
    from tinker_cli._compose import make_env as make_safe_env

    return make_safe_env(env_id, safety=True, **(env_kwargs or {}))


def make_algo(name: str, env_id: str, env_kwargs: dict | None, algo_kwargs: dict | None, device: str, seed: int) -> Any:
    """An algorithm built from the env's specs only (the learner trains from replay, not from its own env)."""
    from tinker_core import algos
    from tinker_core.errors import ConfigError
    from tinker_core.spec import spec_from_space

    classes = {"sac": getattr(algos, "SAC", None), "ppo": getattr(algos, "PPO", None), "dqn": getattr(algos, "DQN", None)}
    cls = classes.get(name.lower())
    if cls is None:
        raise ConfigError(f"learner.algo: expected one of {sorted(k for k, v in classes.items() if v)}, got {name!r}")
    env = make_env(env_id, env_kwargs)
    try:
        specs = (spec_from_space(env.observation_space), spec_from_space(env.action_space))
    finally:
        env.close()
    kw = {"seed": seed, "device": device}
    if "buffer_size" in {f.name for f in dataclasses.fields(cls.config_class)}:
        kw["buffer_size"] = 1000  # the learner samples its own replay; the algorithm's stays unused
    config = cls.config_class(**{**kw, **(algo_kwargs or {})})
    return cls(specs, config)


PARITY_TOLERANCE = 1e-4
"""Largest difference between onnxruntime's and torch's outputs a published bundle may have (actions in [-1, 1];
the manifest records the measured one). Above float32 rounding of a fine-tuned actor, which reached 1.4e-05 on the
robot's own observations in the sorter's loop (2026-12-06), where export's default 1e-05 refused the candidate;
far below what a wrong export gives."""


def bundle_publisher(bundle_dir: str, algo: Any, version: int, recorded_obs: Any = None,
                     perception_bundle: str | None = None):
    """Export ``algo`` as deploy bundle ``bundle_dir/vNNNNNN`` (ONNX + manifest); returns its path. ``recorded_obs``:
    observations the export checks onnxruntime against torch on (and keeps in the bundle; None: drawn within the
    spec). With ``perception_bundle``, that bundle's perception goes in front of the exported actor
    (`tinker_deploy.splice`), checked on drawn features."""
    import tempfile
    from pathlib import Path

    from tinker_deploy.export import export_bundle

    out = Path(bundle_dir) / f"v{version:06d}"
    if not perception_bundle:
        return Path(export_bundle(algo.deployable_parts(), algo.export_metadata(), out, policy_version=version,
                                  recorded_obs=recorded_obs, tolerance=PARITY_TOLERANCE))
    from tinker_deploy.splice import splice_perception

    with tempfile.TemporaryDirectory(prefix="tinker-actor-") as tmp:
        actor = export_bundle(algo.deployable_parts(), algo.export_metadata(), Path(tmp) / "actor", policy_version=version)
        return Path(splice_perception(perception_bundle, actor, out, policy_version=version))


def build_learner(cfg: Any):
    from tinker_core.learner import Learner, resolve_device

    device = resolve_device(cfg.device)
    algo_factory = functools.partial(make_algo, cfg.algo, cfg.env_id, cfg.env_kwargs, cfg.algo_kwargs, device, cfg.seed)
    gate_env_factory = functools.partial(make_gate_env, cfg.env_id, cfg.env_kwargs)
    publisher = functools.partial(bundle_publisher, cfg.bundle_dir, perception_bundle=cfg.perception_bundle)
    return Learner(cfg, algo_factory, publisher, gate_env_factory)


def run(args: argparse.Namespace) -> int:
    sub = getattr(args, "learner_cmd", None)
    if sub == "ctl":
        return _ctl(args)
    cfg, data = _load(args)
    if sub == "workers":
        return _workers(args, cfg, data)
    if args.checkpoint_dir:
        cfg.checkpoint_dir = args.checkpoint_dir
    if args.device:
        cfg.device = args.device
    cfg.__post_init__()
    import signal

    if cfg.env_id.startswith("tinker/"):
        import tinker_sim  # noqa: F401  (an init/resume checkpoint names a tinker/ env id)
    learner = build_learner(cfg)
    signal.signal(signal.SIGTERM, lambda *_: learner.stop())
    signal.signal(signal.SIGINT, lambda *_: learner.stop())
    print(f"tinker learner: transitions {cfg.transitions_endpoint}, weights {cfg.weights_endpoint}, "
          f"params {cfg.params_endpoint}, control {cfg.control_endpoint}, device {learner.device}", flush=True)
    status = learner.run(max_updates=args.max_updates, max_seconds=args.max_seconds)
    print(json.dumps({k: status[k] for k in ("updates", "ingested", "acked", "version")}), flush=True)
    return 0


def _ctl(args: argparse.Namespace) -> int:
    from tinker_core.errors import ConfigError
    from tinker_core.transport import ControlClient

    endpoint = args.endpoint
    if endpoint is None:
        cfg, _ = _load(args)
        endpoint = cfg.control_endpoint
    req: dict[str, Any] = {"cmd": args.cmd, "timeout_s": args.timeout}
    if args.cmd == "set":
        values = {}
        for item in args.values:
            if "=" not in item:
                raise ConfigError(f"ctl set: expected NAME=VALUE, got {item!r}")
            k, v = item.split("=", 1)
            values[k.strip()] = _parse_value(v.strip())
        req["values"] = values
    cli = ControlClient(endpoint, timeout_ms=int(args.timeout * 1000) + 1000)
    try:
        rep = cli.request(req)
    finally:
        cli.close()
    print(json.dumps(rep, indent=1, default=str))
    return 0 if rep.get("ok") else 1


def _workers(args: argparse.Namespace, cfg: Any, data: dict) -> int:
    from tinker_core.config import load_config
    from tinker_core.learner import DistributedConfig, DistributedTrainer

    wc = load_config(DistributedConfig, dict(data.get("workers") or {}))
    if args.backend:
        wc.backend = args.backend
    if args.num_workers:
        wc.num_workers = args.num_workers
    if args.ray_address:
        wc.ray_address = args.ray_address
    wc.__post_init__()
    transitions, params, control = cfg.transitions_endpoint, cfg.params_endpoint, cfg.control_endpoint
    if args.learner:
        joined = _join(args.learner)
        cfg.env_id, cfg.env_kwargs, control = joined["env_id"], joined["env_kwargs"], args.learner
        transitions, params = (_reachable(joined[k], args.learner) for k in ("transitions_endpoint", "params_endpoint"))
    env_factory = functools.partial(make_env, cfg.env_id, cfg.env_kwargs)
    with DistributedTrainer(env_factory, transitions, params, control, config=wc) as tr:
        out = tr.run(args.steps)
    print(json.dumps({k: out[k] for k in ("rounds", "steps", "sent", "dropped", "param_versions")}))
    return 0 if out["dropped"] < out["steps"] else 1


def _join(endpoint: str, timeout_s: float = 30.0) -> dict:
    """The running learner's answer to ``join``: its env and the endpoints rollout workers feed."""
    from tinker_core.errors import TransportError
    from tinker_core.transport import ControlClient

    cli = ControlClient(endpoint, timeout_ms=int(timeout_s * 1000))
    try:
        rep = cli.request({"cmd": "join"})
    except TransportError as e:
        raise TransportError(f"--learner {endpoint}: no learner answered ({e}); start it first (tinker learner "
                             f"--config FILE) and give its control_endpoint") from None
    finally:
        cli.close()
    if not rep.get("ok"):
        raise TransportError(f"--learner {endpoint}: the learner refused to say what its workers feed: "
                             f"{rep.get('error')} (an older tinker learner?)")
    return rep


def _reachable(endpoint: str, via: str) -> str:
    """``endpoint`` as the learner bound it, with a wildcard host (``*``, ``0.0.0.0``) replaced by the host the
    workers reached the learner's control socket at."""
    scheme, _, rest = endpoint.partition("://")
    host, sep, port = rest.rpartition(":")
    if scheme != "tcp" or host not in ("*", "0.0.0.0", "[::]"):
        return endpoint
    via_host = via.partition("://")[2].rpartition(":")[0]
    return f"tcp://{via_host}{sep}{port}"


if __name__ == "__main__":
    from tinker_cli import main

    sys.exit(main(["learner", *sys.argv[1:]]))
