"""The ``tinker`` command: the composition root.

Each subcommand lives in its own module in this package and exposes::

    ORDER: int                      # position in --help
    def register(sub) -> None       # add its parser to the argparse subparsers, set_defaults(func=run)
    def run(args) -> int            # do the work (heavy imports go here, lazily)

This folder (cli/, installed as tinker_cli) is the composition root: it may import every layer; heavy modules
are imported only inside ``run``.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from tinker_core.errors import TinkerError

EPILOG = """\
typical session:
  tinker demo                      pretrained policy -> ROS 2 loop on the simulated arm -> online fine-tuning
  tinker train --config configs/sac_arm_reach.yaml
  tinker export runs/arm_reach/final -o policy.onnx
  tinker eval --env tinker/ArmReach-v0 --dynamics dyn.yaml --episodes 50
  tinker doctor                    what this machine can run

Run 'tinker COMMAND --help' for the details of each command.
"""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tinker",
        description="tinker: train robot policies in randomized simulation, deploy them through ROS 2, "
                    "fine-tune them online, safely.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", metavar="COMMAND")
    mods = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "register"):
            mods.append(mod)
    for mod in sorted(mods, key=lambda m: (getattr(m, "ORDER", 100), m.__name__)):
        mod.register(sub)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if not getattr(args, "func", None):
        ap.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except TinkerError as e:
        print(f"tinker {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tinker {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
