"""Every ``tinker`` subcommand has a --help that explains it, and ``tinker`` alone lists them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

COMMANDS = ["demo", "train", "eval", "export", "doctor", "deploy", "learner", "bringup", "record", "replay", "view",
            "flow", "goal"]


def test_top_level_help_lists_every_command():
    p = subprocess.run([sys.executable, "-m", "tinker_cli", "--help"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0
    for c in COMMANDS:
        assert c in p.stdout, c


def test_each_command_has_help_with_examples_whose_files_exist():
    """A file of this repository an example names (a config, a bundle, a dynamics variant) is there to run it on."""
    for c in COMMANDS:
        p = subprocess.run([sys.executable, "-m", "tinker_cli", c, "--help"], capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, (c, p.stderr[-500:])
        assert "usage: tinker " + c in p.stdout, c
        assert len(p.stdout) > 300, f"tinker {c} --help says too little"
        named = set(re.findall(r"\b(?:configs|pretrained|sim/config|safety/config)/[\w./*-]*[\w*]", p.stdout))
        missing = sorted(n for n in named if not any(REPO.glob(n)))  # a pattern (configs/agents_*.yaml): one at least
        assert not missing, f"tinker {c} --help names files that are not in the repository: {missing}"
