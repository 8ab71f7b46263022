"""The compiled steps' extension (sac_native.cpp, ppo_native.cpp, dqn_native.cpp): built, cached and loaded once per machine.

The extension is built with the compiler torch's extensions use (``make setup`` does it; otherwise
the first step that needs it, about a minute) and cached under ``$TINKER_NATIVE_CACHE`` (default
``~/.cache/tinker/native``), keyed by the sources (and where they are), torch, Python and the CPU (it is built with
-march=native). Without a compiler, or with ``TINKER_NATIVE=0``, the algorithms run their Python
steps instead (same results, slower) and this says so once.

The SAC step's products go through torch's BLAS or through oneDNN (also inside torch), whichever ran
a 256x256x256 product faster when this machine's build first loaded (on the AMD EPYC, Zen 5, this was
developed on, oneDNN's products ran 2.2x as fast as MKL's, which runs at AVX2 speed there). The
choice is kept with the build, so every run on the machine computes the same way (a resumed run
continues bit for bit); ``TINKER_SAC_GEMM=blas`` or ``=onednn`` overrides it.

    python -c "from tinker_core.algos.native import main; main()"   # build now, say where
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import platform
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

import torch

from tinker_core.errors import ConfigError

log = logging.getLogger("tinker.train")

# real paths: the build's commands name them, and torch rebuilds when a command changes, so a package reached
# through a symlink in one process and directly in another would otherwise rebuild (about a minute) each time
_HERE = Path(__file__).resolve().parent
SOURCES = [_HERE / f"{n}_native.cpp" for n in ("sac", "ppo", "dqn")]
HEADERS = [_HERE / "native_kernels.h"]
_lock = threading.Lock()
_state: dict[str, Any] = {}


def _cpu_id() -> str:
    """What the compiled code depends on (it is built for this CPU: -march=native)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        keep = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))][:2]
    except OSError:
        keep = []
    return "|".join([platform.machine(), *keep])


def build_dir() -> Path:
    """Where this build of the sources, torch, Python and CPU lives. The sources' paths are part of the key: the
    build file names them, so two checkouts sharing one build would rebuild it in turn (16 s inside a learner's first
    update, measured, while its transitions queued)."""
    key = hashlib.sha256("\n".join([*(f"{s.resolve()}\n{s.read_text()}" for s in SOURCES + HEADERS),
                                    torch.__version__, sys.version, _cpu_id()]).encode())
    root = Path(os.environ.get("TINKER_NATIVE_CACHE", Path.home() / ".cache" / "tinker" / "native"))
    return root / key.hexdigest()[:16]


def load() -> bool:
    """Build (first time on this machine) and load the extension; False, with the reason logged
    once, when it cannot be had."""
    with _lock:
        if "ok" in _state:
            return _state["ok"]
        if os.environ.get("TINKER_NATIVE", "1") == "0":
            _state["ok"], _state["why"] = False, "TINKER_NATIVE=0"
            return False
        try:
            from torch.utils import cpp_extension

            d = build_dir()
            d.mkdir(parents=True, exist_ok=True)
            if not any(d.glob("*.so")):
                log.info("building the compiled steps for this machine (once, about a minute) in %s", d)
            venv_bin = str(Path(sys.executable).parent)  # where a venv installs ninja
            if venv_bin not in os.environ.get("PATH", "").split(os.pathsep):
                os.environ["PATH"] = venv_bin + os.pathsep + os.environ.get("PATH", "")
            with _build_lock(d):
                cpp_extension.load(name="tinker_native", sources=[str(s) for s in SOURCES], build_directory=str(d),
                                   extra_cflags=["-O3", "-march=native", "-fopenmp-simd"], is_python_module=False,
                                   verbose=False)
            _choose_gemm(d)  # sets _state["gemm"] (use_gemm)
            _state["ok"] = True
        except Exception as e:  # no compiler, no ninja, a failed build: the Python steps do the same
            _state["ok"], _state["why"] = False, f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"
            log.warning("compiled steps unavailable (%s); using the Python steps (same results, slower)",
                        _state["why"])
        return _state["ok"]


@contextlib.contextmanager
def _build_lock(d: Path) -> Iterator[None]:
    """One tinker process at a time builds or loads in ``d``, under a lock the OS drops when its holder dies.

    torch's own build lock is a plain file (``d/lock``) that a killed build leaves behind, and every later
    build then waits for it forever. Under this lock no other tinker process is building here, so such a
    file is stale and is removed.
    """
    with open(d / "build.flock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            stale = d / "lock"
            if stale.exists():
                log.warning("removing %s, left by a build that was killed", stale)
                stale.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


_slow_paths: set[tuple[str, str]] = set()


def note_update_path(algo: str, path: str, why: str) -> None:
    """Say once per process and reason that ``algo``'s update runs outside the compiled step (its other paths
    are 3-6x slower at the same sizes), so a configuration that turns the fast path off never goes unnoticed.
    Benchmarks record the path too (``Algorithm.update_path``)."""
    if path != "compiled" and (algo, why) not in _slow_paths:
        _slow_paths.add((algo, why))
        log.warning("%s: the update runs on the %s path, not the compiled step: %s", algo, path, why)


GEMMS = ("blas", "onednn")


def _choose_gemm(d: Path) -> str:
    """Select the products' library: ``$TINKER_SAC_GEMM``, else the one measured faster on this machine
    (measured once, ~20 ms, and kept in the build directory ``d``)."""
    ops = torch.ops.tinker_sac
    kept = d / "gemm.txt"
    choice = os.environ.get("TINKER_SAC_GEMM", "")
    if choice and choice not in GEMMS:
        log.warning("TINKER_SAC_GEMM=%s is not one of %s; measuring instead", choice, ", ".join(GEMMS))
        choice = ""
    if not choice:
        try:
            choice = kept.read_text().strip()
        except OSError:
            choice = ""
    if choice not in GEMMS:
        blas, dnn = ops.time_gemm(0, 10, 3), ops.time_gemm(1, 10, 3)
        choice = "onednn" if 0 < dnn < 0.9 * blas else "blas"  # near a tie, torch's default
        log.info("SAC step products: %s (a 256x256x256 product: BLAS %.0f us, oneDNN %s)", choice, blas,
                 f"{dnn:.0f} us" if dnn > 0 else "unavailable")
        tmp = kept.with_suffix(f".{os.getpid()}.tmp")
        try:
            tmp.write_text(choice + "\n")
            os.replace(tmp, kept)
        except OSError as e:  # a read-only cache: measured again next time, which may choose differently
            log.warning("could not keep the SAC step's product library in %s (%s)", kept, e)
    return use_gemm(choice)


def use_gemm(name: str) -> str:
    """Route the compiled step's products through ``name`` ("blas" or "onednn") from now on, in this
    process; returns the one in effect ("blas" where oneDNN cannot be found). Needs `load`."""
    if name not in GEMMS:
        raise ConfigError(f"use_gemm: expected one of {GEMMS}, got {name!r}")
    _state["gemm"] = GEMMS[int(torch.ops.tinker_sac.set_gemm(int(name == "onednn")))]
    return _state["gemm"]


def gemm() -> str | None:
    """The library the compiled step's products go through (None until it is loaded)."""
    return _state.get("gemm")


def unavailable_reason() -> str | None:
    """Why `load` returned False (None when it has not been called or succeeded)."""
    return _state.get("why")


def main() -> int:
    """Build (or find) the extension and say where it is; 1 when it cannot be built."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ok = load()
    print(f"compiled steps: {f'ready in {build_dir()}, SAC products through {gemm()}' if ok else 'unavailable: ' + str(unavailable_reason())}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
