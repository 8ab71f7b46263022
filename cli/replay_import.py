"""``tinker replay import RUN.mcap``: a recorded ROS 2 run -> the learner's replay format.

Cycles become transitions by `tinker_core.loop.cycle_join.transitions`, the rule the live experience
bridge joins by: the learner gets the same transitions from a recording as it got live."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 45


def register(sub: Any) -> None:
    p = sub.add_parser("replay", help="replay data tools (import a recorded run)",
                       description="Replay data for offline fine-tuning: turn what the robot recorded into the "
                                   "learner's replay format.",
                       epilog="examples:\n"
                              "  tinker record run1.mcap --duration 60          record every control cycle\n"
                              "  tinker replay import run1.mcap -o run1.replay  transitions for the learner\n"
                              "  mcap info run1.mcap                            the file opens in standard MCAP tools",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    rsub = p.add_subparsers(dest="replay_command", metavar="ACTION")
    imp = rsub.add_parser("import", help="convert a recorded MCAP run into a replay buffer directory",
                          description="Read the cycle records of RUN.mcap (written by 'tinker record' or the "
                                      "experience_bridge's 'record' parameter) with the standard mcap reader, make "
                                      "transitions (features, raw action, next reward/done, next features; held "
                                      "cycles skipped, a stop's cycle costing --estop-reward; a person's episode "
                                      "labels applied as live) and save them as a tinker_core.replay.ReplayBuffer.")
    imp.add_argument("mcap", metavar="RUN.mcap")
    imp.add_argument("--estop-reward", type=float, default=None, metavar="R",
                     help="cost (<= 0) of the transition whose command the safety guard stopped (default: the "
                          "experience_bridge's estop_reward in the launch YAML)")
    imp.add_argument("-o", "--out", metavar="DIR", help="replay directory (default: RUN.replay next to the file)")
    imp.set_defaults(func=run)
    p.set_defaults(func=lambda a: (p.print_help(), 0)[1])


def run(args: argparse.Namespace) -> int:
    import warnings
    from pathlib import Path

    from tinker.recording import read_cycles, read_labels
    from tinker_core.errors import ConfigError
    from tinker_core.loop.cycle_join import transitions
    from tinker_core.loop.episode_label import apply_labels
    from tinker_core.replay import ReplayBuffer

    src = Path(args.mcap)
    if not src.is_file():
        raise ConfigError(f"replay import: file not found: {src}")
    cost = args.estop_reward
    if cost is None:
        from tinker.bringup import default_params_file, node_parameters

        cost = float(node_parameters(default_params_file(), "experience_bridge")["estop_reward"])
    if not cost <= 0.0:
        raise ConfigError(f"replay import: --estop-reward must be <= 0 (a cost), got {cost}")
    with warnings.catch_warnings(record=True) as cut:  # a recording its recorder never closed: said once, plainly
        warnings.simplefilter("always")
        records = list(read_cycles(src))
        labels = read_labels(src)
    for w in cut[:1]:
        print(f"tinker replay import: {w.message}")
    # the experience bridge's joining rule, then the person's labels as the bridge applied them live
    ts = apply_labels(transitions(records, estop_reward=cost), labels,
                      {int(r["cycle"]): int(r["episode"]) for r in records})
    if not ts:
        raise ConfigError(f"replay import: {src} holds {len(records)} cycle(s) but no complete transition "
                          f"(every cycle held, or the run was shorter than two cycles)")
    out = Path(args.out) if args.out else src.with_suffix(".replay")
    buf = ReplayBuffer(capacity=len(ts))
    buf.extend(ts)
    buf.save(out)
    print(f"tinker replay import: {len(records)} cycles, {len(labels)} episode label(s) -> {len(ts)} transitions "
          f"in {out}")
    return 0
