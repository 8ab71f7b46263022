"""A model bundle on disk: a directory with ``manifest.json``, ONNX files and recorded observations.

Layout::

    policy/                     <- the bundle (``tinker export CKPT -o policy.onnx`` writes this directory)
      manifest.json
      policy.onnx               obs -> action (the whole deployable graph)
      perception.onnx           obs -> features   (when the policy has both parts)
      actor.onnx                features -> action (when the policy has both parts)
      policy.int8.onnx          optional, int8 quantization of policy.onnx (static for a CNN)
      recorded_obs.npz          observations + the torch reference actions (parity, ARM check, hot reload)

The path rule: a bundle path ending in ``.onnx`` means the directory of the same name without the
suffix (``-o out/policy.onnx`` -> ``out/policy/``); `load_bundle` also accepts the path of any ``.onnx``
file inside a bundle. The directory is written atomically (tmp directory beside it, fsync, rename),
and every file is checked against its sha256 in the manifest when loaded.

No torch and no onnx here: the edge install loads bundles with numpy and onnxruntime only.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from tinker_core.errors import BundleError
from tinker_core.spec import AnySpec, DictSpec

from tinker_deploy.manifest import Manifest

MANIFEST = "manifest.json"
RECORDED = "recorded_obs.npz"


@dataclass
class ExpectedIO:
    """What the consumer of a bundle (a node, the evaluation) expects; ``None`` fields are not checked."""

    obs_spec: AnySpec | None = None
    """the observation the consumer will feed"""
    action_spec: AnySpec | None = None
    """the action the consumer will read"""
    joint_names: list[str] | None = None
    """the robot's joints; the bundle must name the same set (order may differ: nodes map by name)"""
    deploy_settings_sha256: str | None = None
    """digest of the consumer's control period, action chain and obs history (`deploy_settings_sha256`)"""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def resolve_bundle_dir(path: str | os.PathLike) -> Path:
    """The bundle directory for ``path`` (a directory, a ``.onnx`` inside one, or ``X.onnx`` -> ``X/``)."""
    p = Path(path)
    if p.is_dir():
        return p
    if p.suffix == ".onnx":
        if p.is_file() and (p.parent / MANIFEST).is_file():
            return p.parent
        if p.with_suffix("").is_dir():
            return p.with_suffix("")
    raise BundleError(f"{p}: no bundle here (expected a directory with {MANIFEST}, or X.onnx naming directory X/)")


def bundle_dir_for_output(out: str | os.PathLike) -> Path:
    """Where ``tinker export -o OUT`` writes: ``OUT`` without ``.onnx`` if it has that suffix, else ``OUT``."""
    p = Path(out)
    return p.with_suffix("") if p.suffix == ".onnx" else p


# -- recorded observations ---------------------------------------------------------------------
def pack_recorded(obs: np.ndarray | Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray]) -> bytes:
    """npz bytes: ``obs`` (flat) or ``obs.<field>`` (dict obs), plus reference outputs (``action``...)."""
    arrays: dict[str, np.ndarray] = {}
    if isinstance(obs, Mapping):
        arrays.update({f"obs.{k}": np.ascontiguousarray(v) for k, v in obs.items()})
    else:
        arrays["obs"] = np.ascontiguousarray(obs)
    arrays.update({k: np.ascontiguousarray(v) for k, v in reference.items()})
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def unpack_recorded(path: Path, obs_spec: AnySpec) -> tuple[np.ndarray | dict[str, np.ndarray], dict[str, np.ndarray]]:
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except Exception as e:  # zipfile/ValueError for damaged files
        raise BundleError(f"{path}: recorded observations are unreadable ({e})") from e
    if isinstance(obs_spec, DictSpec):
        missing = [k for k in obs_spec.keys() if f"obs.{k}" not in data]
        if missing:
            raise BundleError(f"{path}: recorded observations lack fields {missing}")
        obs: np.ndarray | dict = {k: data.pop(f"obs.{k}") for k in obs_spec.keys()}
    else:
        if "obs" not in data:
            raise BundleError(f"{path}: recorded observations lack 'obs'")
        obs = data.pop("obs")
    return obs, data


# -- the bundle --------------------------------------------------------------------------------
@dataclass
class Bundle:
    """A verified bundle: its directory and manifest. Model files were hashed when it was loaded."""

    path: Path
    manifest: Manifest

    def model_path(self, part: str = "policy") -> Path:
        if part not in self.manifest.models:
            raise BundleError(f"{self.path}: bundle has no model {part!r}; it has {sorted(self.manifest.models)}")
        return self.path / self.manifest.models[part].file

    def sha256(self, part: str = "policy") -> str:
        return self.manifest.models[part].sha256

    def recorded(self) -> tuple[np.ndarray | dict[str, np.ndarray], dict[str, np.ndarray]]:
        """(observations, reference outputs such as ``action`` computed by torch at export)."""
        entry = self.manifest.data_files.get("recorded_obs")
        if entry is None:
            raise BundleError(f"{self.path}: bundle has no recorded observations")
        return unpack_recorded(self.path / entry["file"], self.manifest.obs_spec)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def write_bundle(out: str | os.PathLike, manifest: Manifest, files: Mapping[str, bytes]) -> Path:
    """Write ``files`` and ``manifest.json`` as bundle directory ``out``, atomically.

    The sha256 of every model and data file in the manifest is computed here from ``files``; a manifest
    entry without a file is an error. An existing bundle at ``out`` is replaced by a rename, so a
    reader sees the old or the new bundle, never a mix (between the two renames the path is briefly absent).
    """
    out = bundle_dir_for_output(out)
    entries = [(n, m.file) for n, m in manifest.models.items()] + \
              [(n, d["file"]) for n, d in manifest.data_files.items()]
    for name, fname in entries:
        if fname not in files:
            raise BundleError(f"manifest entry {name!r} names {fname!r} but no such file was given")
    for name, m in manifest.models.items():
        m.sha256 = hashlib.sha256(files[m.file]).hexdigest()
    for d in manifest.data_files.values():
        d["sha256"] = hashlib.sha256(files[d["file"]]).hexdigest()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        for fname, data in {**files, MANIFEST: manifest.to_json().encode()}.items():
            if "/" in fname or fname.startswith("."):
                raise BundleError(f"bundle file name {fname!r} must be a plain name")
            with open(tmp / fname, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        _fsync_dir(tmp)
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(out, old)
        os.replace(tmp, out)
        _fsync_dir(out.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _verify_file(bundle: Path, name: str, fname: str, sha: str) -> None:
    p = bundle / fname
    if not p.is_file():
        raise BundleError(f"{bundle}: {name} file {fname!r} is missing (half-written bundle?)")
    got = sha256_file(p)
    if got != sha:
        raise BundleError(f"{bundle}: {fname} sha256 mismatch: manifest says {sha[:16]}..., file is {got[:16]}... "
                          f"({p.stat().st_size} bytes); the file was modified or truncated")


def check_expected(manifest: Manifest, expect: ExpectedIO, where: str = "bundle") -> None:
    """Raise `BundleError` listing every way ``manifest`` differs from ``expect``."""
    problems: list[str] = []
    if expect.obs_spec is not None and manifest.obs_spec != expect.obs_spec:
        problems.append(f"observation spec differs: bundle {manifest.obs_spec.describe()}, "
                        f"expected {expect.obs_spec.describe()}"
                        + ("" if manifest.obs_spec.describe() != expect.obs_spec.describe() else " (bounds differ)"))
    if expect.action_spec is not None and manifest.action_spec != expect.action_spec:
        problems.append(f"action spec differs: bundle {manifest.action_spec.describe()}, "
                        f"expected {expect.action_spec.describe()}"
                        + ("" if manifest.action_spec.describe() != expect.action_spec.describe() else " (bounds differ)"))
    if expect.joint_names is not None:
        exp, got = list(expect.joint_names), manifest.joint_names
        missing = [j for j in exp if j not in got]
        extra = [j for j in got if j not in exp]
        if missing or extra:
            problems.append(f"joint names differ: missing {missing}, extra {extra}")
    if expect.deploy_settings_sha256 is not None and manifest.deploy_settings_sha256 != expect.deploy_settings_sha256:
        problems.append(
            f"deploy settings differ from training (control period, action chain or obs history): bundle "
            f"{manifest.deploy_settings_sha256[:12]}..., this node {expect.deploy_settings_sha256[:12]}...; "
            f"training used control_period={manifest.control_period}, action_chain={manifest.action_chain}")
    if problems:
        raise BundleError(f"{where} does not match what is expected: " + "; ".join(problems))


def load_bundle(path: str | os.PathLike, expect: ExpectedIO | None = None) -> Bundle:
    """Read and verify a bundle: manifest format, sha256 of every file, its own settings digest, and
    ``expect`` when given. Raises `BundleError` saying what is wrong."""
    bdir = resolve_bundle_dir(path)
    mpath = bdir / MANIFEST
    if not mpath.is_file():
        raise BundleError(f"{bdir}: no {MANIFEST} (half-written or not a bundle)")
    manifest = Manifest.from_json(mpath.read_bytes(), where=str(mpath))
    for name, m in manifest.models.items():
        _verify_file(bdir, name, m.file, m.sha256)
    for name, d in manifest.data_files.items():
        _verify_file(bdir, name, d["file"], d["sha256"])
    own = manifest.expected_settings_sha256()
    if manifest.deploy_settings_sha256 and manifest.deploy_settings_sha256 != own:
        raise BundleError(f"{bdir}: deploy_settings_sha256 does not match the manifest's own control period, "
                          f"action chain and obs history: the manifest was edited by hand")
    if expect is not None:
        check_expected(manifest, expect, where=str(bdir))
    return Bundle(bdir, manifest)
