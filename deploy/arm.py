"""`check_arm`: prove on this x86 machine that a bundle runs on aarch64 with the same outputs.

The real aarch64 builds of Python (Debian's python3.11), numpy and onnxruntime run under
``qemu-aarch64-static``: an aarch64 sysroot is unpacked from Debian arm64 packages (``apt-get
download`` + ``dpkg-deb -x``), the aarch64 wheels come from ``pip download --platform
manylinux_2_28_aarch64``, and both are cached once under ``~/.cache/tinker/arm`` (``TINKER_CACHE``
overrides ``~/.cache/tinker``). The emulated run loads the bundle with the edge runtime
(`tinker_deploy.arm_probe`), and its actions on the recorded observations are compared with this machine's.

onnxruntime is pinned to `ARM_ORT_VERSION`: releases 1.28 and newer crash at import under qemu 7.2
(an emulator limit, not a statement about ARM hardware). Emulated timings are not performance figures.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from tinker_core.errors import BundleError, TinkerError
from tinker_core.module import atomic_write_bytes

from tinker_deploy.bundle import MANIFEST, load_bundle

ARM_ORT_VERSION = "1.26.0"
"""the onnxruntime release verified under emulation"""
PYYAML_VERSION = "6.0.3"
SYSROOT_PACKAGES = (
    "libc6", "libgcc-s1", "libstdc++6", "zlib1g", "libexpat1", "libffi8", "libssl3", "libbz2-1.0", "liblzma5",
    "libpython3.11-minimal", "libpython3.11-stdlib", "python3.11-minimal", "python3.11",
)
WHEEL_PLATFORM = "manylinux_2_28_aarch64"
INSTALL_HINT = ("install the emulator: `sudo apt-get install qemu-user-static` on Debian/Ubuntu "
                "(or run .ci/setup-arm.sh, which also adds the arm64 dpkg architecture)")


class ArmCheckUnavailable(TinkerError):
    """The ARM check cannot run here (no emulator, no network for the first download); says what to install."""


def cache_root() -> Path:
    return Path(os.environ.get("TINKER_CACHE", Path.home() / ".cache" / "tinker")) / "arm"


def find_qemu() -> str:
    q = shutil.which("qemu-aarch64-static")
    if q is None:
        raise ArmCheckUnavailable(f"qemu-aarch64-static is not on PATH: {INSTALL_HINT}")
    return q


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _sh(cmd: list[str], where: str, cwd: Path | None = None, timeout: float = 900) -> str:
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise ArmCheckUnavailable(f"{where}: {cmd[0]} not found ({e})") from e
    except subprocess.TimeoutExpired as e:
        raise ArmCheckUnavailable(f"{where}: `{' '.join(cmd[:3])} ...` timed out after {timeout:.0f} s") from e
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        raise ArmCheckUnavailable(f"{where}: `{' '.join(cmd[:4])} ...` failed: {' | '.join(tail)}")
    return p.stdout


def ensure_sysroot(root: Path, log: Callable[[str], None]) -> Path:
    """The aarch64 sysroot with Debian's python3.11, made once."""
    sysroot = root / "sysroot"
    if (sysroot / ".complete").is_file():
        return sysroot
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        raise ArmCheckUnavailable("building the aarch64 sysroot needs apt-get and dpkg-deb (Debian/Ubuntu)")
    foreign = _sh(["dpkg", "--print-foreign-architectures"], "dpkg").split()
    if "arm64" not in foreign:
        raise ArmCheckUnavailable("dpkg has no arm64 architecture, so apt-get cannot fetch arm64 packages: run "
                                  "`sudo dpkg --add-architecture arm64 && sudo apt-get update` (or .ci/setup-arm.sh)")
    with tempfile.TemporaryDirectory(prefix="tinker-arm-") as d:
        debs, tree = Path(d) / "debs", Path(d) / "sysroot"
        debs.mkdir()
        log(f"arm: downloading {len(SYSROOT_PACKAGES)} Debian arm64 packages for the sysroot (once) ...")
        _sh(["apt-get", "download", *[f"{p}:arm64" for p in SYSROOT_PACKAGES]],
            "apt-get download (no network? run `apt-get update` first)", cwd=debs)
        files = sorted(debs.glob("*.deb"))
        for i, deb in enumerate(files, 1):
            log(f"arm: unpacking {deb.name} ({i}/{len(files)})")
            _sh(["dpkg-deb", "-x", str(deb), str(tree)], "dpkg-deb -x")
        if not (tree / "usr/bin/python3.11").exists():
            raise ArmCheckUnavailable("the arm64 packages did not contain usr/bin/python3.11")
        (tree / ".complete").write_text(json.dumps({"packages": [f.name for f in files]}))
        if sysroot.exists():
            shutil.rmtree(sysroot)
        shutil.move(str(tree), sysroot)
    log(f"arm: sysroot ready at {sysroot}")
    return sysroot


def ensure_site(root: Path, ort_version: str, numpy_version: str, log: Callable[[str], None]) -> Path:
    """The aarch64 wheels of numpy, onnxruntime and pyyaml unpacked into one directory, made once per pin."""
    site = root / f"site-numpy{numpy_version}-ort{ort_version}"
    if (site / ".complete").is_file():
        return site
    with tempfile.TemporaryDirectory(prefix="tinker-arm-") as d:
        wheels, tree = Path(d) / "wheels", Path(d) / "site"
        log(f"arm: downloading aarch64 wheels numpy=={numpy_version} onnxruntime=={ort_version} "
            f"pyyaml=={PYYAML_VERSION} (once) ...")
        _sh([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--platform", WHEEL_PLATFORM,
             "--python-version", "3.11", "--implementation", "cp", "-d", str(wheels),
             f"numpy=={numpy_version}", f"onnxruntime=={ort_version}", f"pyyaml=={PYYAML_VERSION}"],
            "pip download of the aarch64 wheels (no network?)")
        import zipfile

        for whl in sorted(wheels.glob("*.whl")):
            log(f"arm: unpacking {whl.name}")
            with zipfile.ZipFile(whl) as z:
                z.extractall(tree)
        (tree / ".complete").write_text(json.dumps({"wheels": sorted(w.name for w in wheels.glob("*.whl"))}))
        if site.exists():
            shutil.rmtree(site)
        shutil.move(str(tree), site)
    log(f"arm: wheels ready at {site}")
    return site


def _source_tree(dst: Path) -> Path:
    """Copies of tinker's pure-python packages needed by the probe (never the host's compiled ones)."""
    import tinker_core
    import tinker_deploy

    for pkg in (tinker_core, tinker_deploy):  # under their import names (the folder of deploy/ is 'deploy')
        shutil.copytree(Path(pkg.__file__).parent, dst / pkg.__name__,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    return dst


@dataclass
class ArmReport:
    """Outcome of one ARM check; ``ok`` only if the emulated run loaded, checked and matched."""

    bundle: str
    ok: bool
    reason: str = ""
    max_abs_diff_vs_x86: float | None = None
    max_abs_diff_vs_reference: float | None = None
    tolerance: float = 1e-5
    emulated: dict = field(default_factory=dict)
    """what the aarch64 side reported (versions, machine, byte order, emulated timings)"""

    def format(self) -> str:
        e = self.emulated
        lines = [f"ARM check of {self.bundle}: {'PASSED' if self.ok else 'FAILED'}"]
        if e:
            lines.append(f"  aarch64 side: machine {e.get('machine')}, byte order {e.get('byte_order')}, python "
                         f"{e.get('python')}, numpy {e.get('numpy')}, onnxruntime {e.get('onnxruntime')} (pinned)")
        if self.max_abs_diff_vs_x86 is not None:
            lines.append(f"  max abs diff aarch64 vs x86 onnxruntime: {self.max_abs_diff_vs_x86:.3g} "
                         f"(tolerance {self.tolerance:g}) on {e.get('n_obs')} recorded obs")
        if self.max_abs_diff_vs_reference is not None:
            lines.append(f"  max abs diff aarch64 vs the bundle's torch reference: {self.max_abs_diff_vs_reference:.3g}")
        if "emulated_inference_s" in e:
            lines.append(f"  emulated timings (qemu, NOT performance figures): import {e.get('import_s')} s, "
                         f"inference of all obs {e.get('emulated_inference_s')} s, "
                         f"whole run {e.get('wall_s_all_bundles')} s")
        if self.reason:
            lines.append(f"  reason: {self.reason}")
        return "\n".join(lines)


def check_arm(bundle_path: str | os.PathLike, *, ort_version: str = ARM_ORT_VERSION, tolerance: float = 1e-5,
              write_manifest: bool = False, timeout: float = 900, log: Callable[[str], None] = print) -> ArmReport:
    """Run one bundle under aarch64 emulation and compare with x86; see `check_arm_many`."""
    return check_arm_many([bundle_path], ort_version=ort_version, tolerance=tolerance, write_manifest=write_manifest,
                          timeout=timeout, log=log)[0]


def check_arm_many(bundle_paths: list[str | os.PathLike], *, ort_version: str = ARM_ORT_VERSION,
                   tolerance: float = 1e-5, write_manifest: bool = False, timeout: float = 900,
                   log: Callable[[str], None] = print) -> list[ArmReport]:
    """Run bundles under aarch64 emulation (one emulated python for all) and compare each with x86.

    Raises `ArmCheckUnavailable` when the check cannot run here; returns a failed `ArmReport` (with
    the reason) for each bundle that does not pass.
    """
    from tinker_deploy.runtime import OnnxPolicy

    reports: list[ArmReport | None] = []
    todo: list[tuple[int, object, np.ndarray]] = []
    for path in bundle_paths:
        try:
            bundle = load_bundle(path)
        except BundleError as e:
            reports.append(ArmReport(str(path), False, f"the bundle fails verification on x86 already: {e}",
                                     tolerance=tolerance))
            continue
        todo.append((len(reports), bundle, OnnxPolicy(bundle).forward(bundle.recorded()[0])))
        reports.append(None)
    if not todo:
        return reports  # type: ignore[return-value]
    qemu = find_qemu()
    root = cache_root()
    with _locked(root / ".lock"):
        sysroot = ensure_sysroot(root, log)
        site = ensure_site(root, ort_version, np.__version__, log)
    with tempfile.TemporaryDirectory(prefix="tinker-armcheck-") as d:
        src = _source_tree(Path(d) / "src")
        outs = [Path(d) / f"arm_actions_{i}.npz" for i, _, _ in todo]
        args = [x for (_, b, _), o in zip(todo, outs) for x in (str(b.path.resolve()), str(o))]
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{site}:{src}", "PYTHONNOUSERSITE": "1",
               "PYTHONDONTWRITEBYTECODE": "1", "HOME": d, "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1"}
        names = ", ".join(b.path.name for _, b, _ in todo)
        log(f"arm: running {names} under qemu-aarch64 (python3.11, onnxruntime {ort_version}) ...")
        t0 = time.perf_counter()
        try:
            p = subprocess.run([qemu, "-L", str(sysroot), str(sysroot / "usr/bin/python3.11"), "-m", "tinker_deploy.arm_probe",
                                *args], env=env, capture_output=True, text=True, timeout=timeout)
            lines = [json.loads(ln.split(" ", 1)[1]) for ln in p.stdout.splitlines()
                     if ln.startswith("TINKER_ARM_REPORT ")]
            why = " | ".join((p.stderr or p.stdout).strip().splitlines()[-4:])
            why = f"the emulated python exited {p.returncode} without a report: {why}"
        except subprocess.TimeoutExpired:
            lines, why = [], f"the emulated run did not finish within {timeout:.0f} s"
        wall = round(time.perf_counter() - t0, 1)
        if len(lines) == 1 and "bundle" not in lines[0]:  # the probe failed before any bundle
            why, lines = f"on aarch64: {lines[0].get('error')}", []
        for k, (i, bundle, x86) in enumerate(todo):
            emu = lines[k] if k < len(lines) else None
            if emu is None:
                reports[i] = ArmReport(str(bundle.path), False, why, tolerance=tolerance)
                continue
            emu["wall_s_all_bundles"] = wall
            reports[i] = _compare(bundle, x86, emu, outs[k], tolerance)
    for r in reports:
        if r is not None and r.ok and write_manifest:
            record_verified(Path(r.bundle), "aarch64", r.emulated["onnxruntime"])
            log(f"arm: recorded onnxruntime {r.emulated['onnxruntime']} on aarch64 in {Path(r.bundle) / MANIFEST}")
    return reports  # type: ignore[return-value]


def _compare(bundle, x86: np.ndarray, emu: dict, out: Path, tolerance: float) -> ArmReport:
    if not emu.get("ok"):
        return ArmReport(str(bundle.path), False, f"on aarch64: {emu.get('error')}", tolerance=tolerance, emulated=emu)
    with np.load(out, allow_pickle=False) as z:
        arm = z["action"]
    report = ArmReport(str(bundle.path), True, tolerance=tolerance, emulated=emu,
                       max_abs_diff_vs_reference=emu.get("max_abs_diff_vs_reference"))
    if arm.shape != x86.shape:
        report.ok, report.reason = False, f"aarch64 output shape {arm.shape} differs from x86 {x86.shape}"
        return report
    report.max_abs_diff_vs_x86 = float(np.max(np.abs(arm.astype(np.float64) - x86))) if arm.size else 0.0
    ref_tol = float(bundle.manifest.parity.get("tolerance", tolerance))
    if report.max_abs_diff_vs_x86 > tolerance:
        report.ok = False
        report.reason = (f"aarch64 output differs from x86 by {report.max_abs_diff_vs_x86:.3g} (max abs), "
                         f"above {tolerance:g}")
    elif report.max_abs_diff_vs_reference is not None and report.max_abs_diff_vs_reference > ref_tol:
        report.ok = False
        report.reason = (f"aarch64 output differs from the bundle's recorded reference actions by "
                         f"{report.max_abs_diff_vs_reference:.3g} (max abs), above the export tolerance {ref_tol:g}")
    return report


def record_verified(bundle_dir: Path, machine: str, ort_version: str) -> None:
    """Add ``ort_version`` to the manifest's table of versions verified on ``machine`` (atomically)."""
    bundle = load_bundle(bundle_dir)
    table = bundle.manifest.ort_versions_verified
    versions = table.setdefault(machine, [])
    if ort_version not in versions:
        versions.append(ort_version)
    atomic_write_bytes(bundle.path / MANIFEST, bundle.manifest.to_json().encode())
