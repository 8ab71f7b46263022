"""Helpers every script in benchmarks/ shares: the machine description, the result header, the
``--quick`` argument and the result-file writer (see /work/shared/BENCHMARKS.md for the format).

Scripts run as ``python benchmarks/NAME.py``, so this directory is first on ``sys.path`` and they
import it as ``from _common import ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo, else what ``platform`` knows."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return cpu


def package_version(dist: str) -> str | None:
    """Installed version of distribution ``dist`` (without importing it), or None."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def machine(packages: Sequence[str] = ("torch",), *, gpu: str | None = None,
            extra: Mapping[str, Any] | None = None, load_key: str | None = None) -> dict[str, Any]:
    """The ``machine`` block of a result: cpu, cores, python, a version per package, gpu, then ``extra``
    and, when ``load_key`` is given, the 1-minute load average (rounded to 2 places) under that key."""
    out: dict[str, Any] = {"cpu": cpu_name(), "cores": os.cpu_count(), "python": platform.python_version()}
    out.update({p: package_version(p) for p in packages})
    out["gpu"] = gpu
    out.update(extra or {})
    if load_key:
        out[load_key] = round(os.getloadavg()[0], 2)
    return out


def utc_now() -> str:
    """Now in UTC as ``YYYY-MM-DDTHH:MM:SSZ`` (the ``when`` of a result)."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def git_state() -> tuple[str | None, bool | None]:
    """The commit the benchmark runs at (short hash) and whether tracked files differ from it; None outside git."""
    def git(*args: str) -> str | None:
        try:
            p = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    commit = git("rev-parse", "--short", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, None if status is None else bool(status)


def header(name: str, quick: bool, machine_info: Mapping[str, Any], command: str | None = None) -> dict[str, Any]:
    """The first keys of a result: benchmark, when, commit, dirty, machine, command (default ``python
    benchmarks/NAME.py [--quick]``). Spread it into the result dict: ``{**header(...), "figures": ..., "goals": ...}``."""
    if command is None:
        command = f"python benchmarks/{name}.py" + (" --quick" if quick else "")
    commit, dirty = git_state()
    return {"benchmark": name, "when": utc_now(), "commit": commit, "dirty": dirty, "machine": dict(machine_info),
            "command": command}


def arg_parser(description: str, quick_help: str = "fewer repetitions (about a minute)",
               **kwargs: Any) -> argparse.ArgumentParser:
    """An ArgumentParser with the ``--quick`` flag every benchmark has; ``kwargs`` go to ArgumentParser."""
    ap = argparse.ArgumentParser(description=description, **kwargs)
    ap.add_argument("--quick", action="store_true", help=quick_help)
    return ap


def result_path(name: str, quick: bool, suffix: str = ".json") -> Path:
    """benchmarks/results/NAME.json, or NAME.quick.json for a ``--quick`` run (``suffix`` for other files)."""
    return RESULTS / f"{name}{'.quick' if quick else ''}{suffix}"


def write_result(name: str, quick: bool, result: Mapping[str, Any]) -> Path:
    """Write ``result`` as indented JSON to :func:`result_path` atomically (temp file, then rename)."""
    out = result_path(name, quick)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, out)
    return out
