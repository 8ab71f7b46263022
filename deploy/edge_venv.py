"""A clean virtual environment with only the ``edge`` install: numpy, pyyaml, onnxruntime and tinker.

Used by the test that proves the runtime works without torch and by ``benchmarks/edge.py``. The venv
(no system site-packages) is made once under ``~/.cache/tinker/edge-venv`` with the pins of
``pyproject.toml``'s base dependencies and ``edge`` extra; tinker itself is built as a wheel from the
source tree (its pure-python packages only) and installed with ``--no-deps`` on every call, so the
venv always runs the current code.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from tinker_core.errors import TinkerError

SOURCE_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tinker_core", "deploy", "cli")  # folders; setup.py installs them as tinker_*
"""what the edge wheel carries"""


def edge_pins(pyproject: Path = SOURCE_ROOT / "pyproject.toml") -> list[str]:
    """``name==version`` of the base dependencies plus the ``edge`` extra (minus tinker itself)."""
    import tomllib

    proj = tomllib.loads(pyproject.read_text())["project"]
    reqs = list(proj.get("dependencies", [])) + list(proj.get("optional-dependencies", {}).get("edge", []))
    return [r for r in reqs if not r.startswith("tinker-rl")]


def venv_dir() -> Path:
    return Path(os.environ.get("TINKER_CACHE", Path.home() / ".cache" / "tinker")) / "edge-venv"


def _run(cmd: list[str], where: str, timeout: float = 900, **kw) -> None:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    if p.returncode != 0:
        tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-4:])
        raise TinkerError(f"{where} failed: {tail}")


def ensure_edge_venv(log: Callable[[str], None] = print, reinstall_project: bool = True) -> Path:
    """The edge venv's python, with the current tinker source installed (``--no-deps``).

    Serialized with a file lock: concurrent test runs share the cached venv."""
    import fcntl

    lock = venv_dir().parent / ".edge-venv.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            return _ensure(log, reinstall_project)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _ensure(log: Callable[[str], None], reinstall_project: bool) -> Path:
    venv = venv_dir()
    py = venv / "bin" / "python"
    pins = edge_pins()
    stamp = venv / ".tinker-edge-pins.json"
    if not (py.exists() and stamp.is_file() and json.loads(stamp.read_text()) == pins):
        log(f"edge venv: creating {venv} with {' '.join(pins)} (once) ...")
        if venv.exists():
            shutil.rmtree(venv)
        _run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
        _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *pins], "pip install of the edge pins")
        stamp.write_text(json.dumps(pins))
    if reinstall_project:
        with tempfile.TemporaryDirectory(prefix="tinker-edge-src-") as d:
            src, dist = Path(d) / "src", Path(d) / "dist"
            src.mkdir()
            for f in ("pyproject.toml", "setup.py", "README.md"):
                shutil.copy(SOURCE_ROOT / f, src / f)
            for pkg in PACKAGES:
                shutil.copytree(SOURCE_ROOT / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            # build with this interpreter's setuptools (the edge venv has no build tools), install there
            _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist),
                  str(src)], "building the tinker wheel")
            wheel = next(dist.glob("*.whl"))
            _run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                  "--force-reinstall", str(wheel)], "pip install --no-deps of tinker into the edge venv")
    return py
