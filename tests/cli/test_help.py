"""Every ``tinker`` subcommand has a --help that explains it, and ``tinker`` alone lists them."""

from __future__ import annotations

import subprocess
import sys

COMMANDS = ["demo", "train", "eval", "export", "doctor", "deploy", "learner", "bringup", "record", "replay", "view",
            "flow", "goal"]


def test_top_level_help_lists_every_command():
    p = subprocess.run([sys.executable, "-m", "tinker_cli", "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0
    for c in COMMANDS:
        assert c in p.stdout, c


def test_each_command_has_help_with_examples():
    for c in COMMANDS:
        p = subprocess.run([sys.executable, "-m", "tinker_cli", c, "--help"], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, (c, p.stderr[-500:])
        assert "usage: tinker " + c in p.stdout, c
        assert len(p.stdout) > 300, f"tinker {c} --help says too little"
