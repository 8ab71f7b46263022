"""``tinker deploy``: checks on a model bundle before it goes to a robot (verify, check-arm)."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 35

EPILOG = """\
examples:
  tinker deploy verify policy                   hashes, manifest, onnxruntime vs the recorded torch actions
  tinker deploy verify policy --joints lbr_iiwa_joint_1,...,lbr_iiwa_joint_7
  tinker deploy check-arm policy [other ...]    run it with aarch64 python + onnxruntime under qemu
  tinker deploy check-arm policy --write-manifest   record the verified onnxruntime version in the bundle

check-arm needs qemu-aarch64-static (Debian: apt-get install qemu-user-static; or .ci/setup-arm.sh) and,
the first time, network access: it builds an aarch64 sysroot from Debian arm64 packages and fetches the
aarch64 wheels into ~/.cache/tinker/arm. Emulated timings are not performance figures.
"""


def register(sub: Any) -> None:
    p = sub.add_parser("deploy", help="verify a bundle; prove it runs on aarch64 (check-arm)",
                       description="Checks on a model bundle before deployment.", epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ds = p.add_subparsers(dest="deploy_cmd", metavar="{verify,check-arm}")
    v = ds.add_parser("verify", help="verify hashes, manifest and onnxruntime parity of a bundle",
                      description="Load the bundle as the runtime does (sha256 of every file, manifest), run "
                                  "onnxruntime on its recorded observations against the torch reference actions, "
                                  "and report the batch-1 latency after warm-up.")
    v.add_argument("bundle", help="bundle directory (or X.onnx for directory X/)")
    v.add_argument("--joints", help="comma-separated joint names the robot has; refuse on a mismatch")
    v.add_argument("--tolerance", type=float, default=1e-5, help="max abs diff vs the reference (default 1e-5)")
    v.add_argument("--int8", action="store_true", help="verify the int8 model (reported, not held to --tolerance)")
    a = ds.add_parser("check-arm", help="run the bundle under aarch64 emulation and compare with x86",
                      description="Run the bundle with the real aarch64 builds of python, numpy and onnxruntime "
                                  "under qemu-aarch64-static and compare its actions on the recorded observations "
                                  "with this machine's (fails above --tolerance); checks the manifest, byte order "
                                  "and opset on the aarch64 side.", epilog=EPILOG,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("bundle", nargs="+", help="bundle directories (or X.onnx for directory X/); one emulated run")
    a.add_argument("--ort-version", default=None, help="aarch64 onnxruntime to verify with (default: the pinned one)")
    a.add_argument("--tolerance", type=float, default=1e-5, help="max abs diff aarch64 vs x86 (default 1e-5)")
    a.add_argument("--write-manifest", action="store_true",
                   help="record the verified onnxruntime version in the manifest's ort_versions_verified")
    p.set_defaults(func=run, _parser=p)


def run(args: argparse.Namespace) -> int:
    if args.deploy_cmd == "verify":
        return _verify(args)
    if args.deploy_cmd == "check-arm":
        return _check_arm(args)
    args._parser.print_help()
    return 2


def _verify(args: argparse.Namespace) -> int:
    import numpy as np

    from tinker_deploy.bundle import ExpectedIO
    from tinker_deploy.runtime import OnnxPolicy

    expect = ExpectedIO(joint_names=[j.strip() for j in args.joints.split(",")]) if args.joints else None
    policy = OnnxPolicy.from_bundle(args.bundle, expect=expect, quantized=args.int8)
    m = policy.manifest
    obs, ref = policy.bundle.recorded()
    got = policy.forward(obs)
    diff = float(np.max(np.abs(got.astype(np.float64) - ref["action"])))
    lat = policy.warmup(200)
    print(f"bundle {policy.bundle.path}: hashes ok, manifest format {m.format_version}, opset {m.opset}, "
          f"policy v{m.policy_version} (sha256 {policy.sha256[:16]}...)")
    print(f"  obs {m.obs_spec.describe()} -> action {m.action_spec.describe()}; joints {m.joint_names}")
    print(f"  onnxruntime vs recorded torch actions: max abs diff {diff:.3g} on {len(got)} obs")
    print(f"  batch-1 latency after warm-up: p50 {lat['p50_us']:.1f} us, p99 {lat['p99_us']:.1f} us, "
          f"max {lat['max_us']:.1f} us")
    print(f"  verified onnxruntime versions: {m.ort_versions_verified}")
    if not args.int8 and diff > args.tolerance:
        print(f"FAILED: differs from the reference by {diff:.3g} > {args.tolerance:g}")
        return 1
    return 0


def _check_arm(args: argparse.Namespace) -> int:
    from tinker_deploy.arm import ARM_ORT_VERSION, check_arm_many

    reports = check_arm_many(args.bundle, ort_version=args.ort_version or ARM_ORT_VERSION, tolerance=args.tolerance,
                             write_manifest=args.write_manifest)
    for r in reports:
        print(r.format())
    return 0 if all(r.ok for r in reports) else 1
