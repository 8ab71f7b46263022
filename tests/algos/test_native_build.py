"""The compiled steps' build directory survives a killed build (torch's plain lock file left behind)."""

from __future__ import annotations

import subprocess
import sys

from tinker_core.algos import native


def test_a_lock_file_left_by_a_killed_build_is_removed(tmp_path):
    (tmp_path / "lock").write_text("")
    with native._build_lock(tmp_path):
        assert not (tmp_path / "lock").exists()


def test_the_build_lock_is_released_when_its_holder_dies(tmp_path):
    holder = ("import os, sys; from pathlib import Path; from tinker_core.algos import native\n"
              "with native._build_lock(Path(sys.argv[1])):\n    os._exit(0)\n")
    subprocess.run([sys.executable, "-c", holder, str(tmp_path)], check=True, timeout=120)
    (tmp_path / "lock").write_text("")  # what a killed torch build leaves
    with native._build_lock(tmp_path):  # would block forever if the dead holder still held it
        assert not (tmp_path / "lock").exists()


def test_sources_are_named_by_their_real_paths():
    """The build's commands name the sources, and torch rebuilds when a command changes: a package reached
    through a symlink (a .shim) in one process and directly in another must not name them differently."""
    assert all(p == p.resolve() and p.exists() for p in native.SOURCES + native.HEADERS)
