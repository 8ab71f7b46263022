"""``tinker export CHECKPOINT -o policy.onnx``: a trained checkpoint -> a verified model bundle."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 30

EPILOG = """\
output path rule:
  -o out/policy.onnx  writes the bundle DIRECTORY out/policy/ (the suffix is dropped), holding
                      manifest.json, policy.onnx (obs -> action), perception.onnx + actor.onnx (when the
                      policy has both parts), recorded_obs.npz and, with --int8, policy.int8.onnx.
  -o out/policy       writes the same directory.
  Everything that reads bundles accepts the directory or any .onnx path inside it (or out/policy.onnx).

checks (any failure writes nothing):
  data-dependent control flow in forward() (Python `if` on a tensor) is refused in plain words;
  onnx.checker (full check); opset 17 against the onnxruntime releases that load it; torch vs
  onnxruntime on the recorded observations (max abs diff printed, --tolerance, default 1e-5).

examples:
  tinker export runs/arm_reach/final -o policy.onnx
  tinker export runs/arm_reach/final -o bundles/v3.onnx --int8 --policy-version 3
  tinker deploy verify bundles/v3 && tinker deploy check-arm bundles/v3

hierarchical policies (algo hppo): -o out/sorter writes out/sorter/ with one bundle per level
  (high/: obs -> option, low/: obs + one-hot option -> action, termination/ when learned) and
  hierarchy.json; tinker_deploy.hierarchy_runtime.HierarchicalOnnxPolicy runs them (no --int8 yet).
"""


def register(sub: Any) -> None:
    p = sub.add_parser("export", help="export a checkpoint as an ONNX model bundle (with parity checks)",
                       description="Export the deployable part of a trained policy (perception + actor, "
                                   "observation normalization folded in, deterministic action) to ONNX opset 17 "
                                   "with a dynamic batch axis, check it, and write a model bundle.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="checkpoint directory written by algo.save()")
    p.add_argument("-o", "--output", required=True, help="bundle path: X.onnx -> directory X/ (see below)")
    p.add_argument("--tolerance", type=float, default=1e-5, help="max abs diff torch vs onnxruntime (default 1e-5)")
    p.add_argument("--int8", action="store_true", help="also write policy.int8.onnx with an accuracy report")
    p.add_argument("--policy-version", type=int, default=0, help="version number stored in the manifest")
    p.add_argument("--recorded-obs", help="npz of observations for the parity check (key 'obs' or 'obs.<field>'); "
                                          "default: recorded by running the policy in its training env")
    p.add_argument("--record-steps", type=int, default=256,
                   help="observations to record in the env when --recorded-obs is not given (default 256; "
                        "0 = generate them within the observation spec instead)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tinker_core.errors import TinkerError

    try:
        import tinker_sim  # noqa: F401  (registers the tinker/ env ids the checkpoint may name)
    except ImportError:
        pass
    try:
        from tinker_core.algos import load_algorithm
    except ImportError as e:
        raise TinkerError(f"the training install is needed to export (pip install 'tinker-rl[train]'): {e}") from e
    from tinker_deploy.bundle import unpack_recorded
    from tinker_deploy.export import export_bundle, record_observations

    algo = load_algorithm(args.checkpoint, device="cpu")
    if hasattr(algo, "deployable_levels"):  # a hierarchical policy: one bundle per level
        return _export_hierarchy(algo, args)
    meta = algo.export_metadata()
    parts = algo.deployable_parts()
    recorded = None
    if args.recorded_obs:
        from pathlib import Path

        from tinker_core.spec import spec_from_dict

        recorded, _ = unpack_recorded(Path(args.recorded_obs), spec_from_dict(meta["obs_spec"]))
    elif args.record_steps > 0 and meta.get("env_id"):
        import gymnasium as gym

        try:  # the recorded env, with its imports and wrappers, when the checkpoint has it
            env = algo.env_config.make() if algo.env_config is not None else gym.make(meta["env_id"])
        except Exception as e:  # an env that cannot be made here: fall back to generated observations
            print(f"cannot make env {meta['env_id']!r} to record observations ({e}); generating them instead")
        else:
            try:
                recorded = record_observations(env, parts, args.record_steps)
                print(f"recorded {args.record_steps} observations of the policy in {meta['env_id']}")
            finally:
                env.close()
    out = export_bundle(parts, meta, args.output, recorded_obs=recorded, tolerance=args.tolerance,
                        policy_version=args.policy_version, quantize=args.int8)
    print(f"exported {args.checkpoint} -> {out}")
    return 0


def _export_hierarchy(algo: Any, args: argparse.Namespace) -> int:
    """Each level of a hierarchical policy (HPPO) as its own bundle, with hierarchy.json (tinker_deploy.hierarchy)."""
    import numpy as np

    from tinker_core.errors import ConfigError
    from tinker_deploy.hierarchy import export_hierarchy

    if args.int8:
        raise ConfigError("--int8: not available for hierarchical policies yet (export without it)")
    recorded = None
    if args.recorded_obs:
        recorded = np.load(args.recorded_obs)["obs"]
    elif args.record_steps > 0 and algo.env_config is not None:
        env = algo.env_config.make()
        try:
            obs, _ = env.reset(seed=0)
            algo.policy.deterministic = True
            algo.policy.reset()
            rows = []
            for _ in range(args.record_steps):
                rows.append(np.asarray(obs, np.float32))
                obs, _, te, tr, _ = env.step(algo.policy(obs))
                if te or tr:
                    obs, _ = env.reset()
                    algo.policy.reset()
            recorded = np.stack(rows)
            print(f"recorded {args.record_steps} observations of the policy in {algo.env_id}")
        finally:
            env.close()
    out = export_hierarchy(algo.deployable_levels(), algo.hierarchy_metadata(), algo.export_metadata(), args.output,
                           recorded_obs=recorded, tolerance=args.tolerance, policy_version=args.policy_version)
    print(f"exported {args.checkpoint} -> {out}")
    return 0
