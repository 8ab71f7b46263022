"""``tinker doctor``: what this machine can run (platform, versions, execution providers, known problems)."""

from __future__ import annotations

import argparse
import json
from typing import Any

ORDER = 90


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", help="platform, versions, execution providers and known incompatibilities",
                       description="Print platform, machine, byte order, the versions of python, numpy, "
                                   "onnxruntime and (optional) torch, onnx, protobuf and rclpy, the onnxruntime "
                                   "execution providers, and flag known incompatibilities.")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--strict", action="store_true", help="exit 1 when any incompatibility is flagged")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from tinker_deploy.doctor import collect

    report = collect()
    print(json.dumps(asdict(report), indent=2) if args.json else report.format())
    return 1 if (args.strict and report.flags) else 0
