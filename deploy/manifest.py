"""The bundle manifest: everything a deployed policy must agree on with its training run, as JSON.

A manifest names every model file with its sha256 and I/O, the observation and action specs, every
observation and action term (size, unit, scale, offset, frame, history) and the joint names, the
action chain and control period of the training run (hashed into ``deploy_settings_sha256`` so the
deployed settings cannot drift from training), the opset and the onnxruntime versions the bundle was
verified on, and the versions and byte order of the machine that exported it.

This module imports neither torch nor onnx: it is part of the edge install (numpy, pyyaml, onnxruntime).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from tinker_core.errors import BundleError, SpecError
from tinker_core.spec import AnySpec, DictSpec, Spec, spec_from_dict

FORMAT = "tinker.bundle"
FORMAT_VERSION = 1
OPSET = 17
"""The one opset tinker exports with (loads on onnxruntime >= 1.12)."""

#: Highest ONNX opset (default domain) each onnxruntime release can load, from onnxruntime's
#: compatibility table (docs/Versioning.md) up to 1.20; later lines are entered conservatively (they
#: load at least that). A bundle of opset N needs a release whose entry is >= N; tinker's opset 17
#: loads on every line from 1.12 on.
ORT_MAX_OPSET: dict[str, int] = {
    "1.10": 15, "1.11": 16, "1.12": 17, "1.13": 17, "1.14": 18, "1.15": 19, "1.16": 19, "1.17": 20,
    "1.18": 21, "1.19": 21, "1.20": 21, "1.21": 22, "1.22": 22, "1.23": 23, "1.24": 23, "1.25": 23,
    "1.26": 23, "1.27": 23, "1.28": 23, "1.29": 23, "1.30": 23, "1.31": 23,
}


def _minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def ort_versions_for_opset(opset: int) -> list[str]:
    """onnxruntime release lines (``"1.12"``...) that can load a model of ``opset``."""
    return [v for v, m in ORT_MAX_OPSET.items() if m >= opset]


def check_opset_supported(opset: int, ort_version: str) -> None:
    """Raise `BundleError` if onnxruntime ``ort_version`` cannot load opset ``opset``."""
    minor = _minor(ort_version)
    known = ORT_MAX_OPSET.get(minor)
    if known is None:
        newest = max(ORT_MAX_OPSET, key=lambda v: tuple(map(int, v.split("."))))
        if tuple(map(int, minor.split("."))) > tuple(map(int, newest.split("."))):
            return  # newer than the table: onnxruntime keeps loading old opsets
        raise BundleError(f"onnxruntime {ort_version} is older than every release in the opset table "
                          f"({', '.join(ORT_MAX_OPSET)}); opset {opset} needs one of {ort_versions_for_opset(opset)}")
    if known < opset:
        raise BundleError(f"opset {opset} cannot be loaded by onnxruntime {ort_version} (it loads up to opset {known}); "
                          f"use onnxruntime {ort_versions_for_opset(opset)[0]} or newer")


@dataclass
class Term:
    """One named observation or action term, in the order the network sees it."""

    name: str
    """what it is, e.g. ``joint_pos`` or the joint name for an action"""
    size: int
    """number of scalars this term contributes (per history step)"""
    unit: str = ""
    """physical unit before scaling, e.g. ``rad``, ``rad/s``, ``m``"""
    scale: float | list[float] = 1.0
    """network value = (raw - offset) * scale; one number or one per element"""
    offset: float | list[float] = 0.0
    """subtracted before scaling; one number or one per element"""
    frame: str = ""
    """coordinate frame for spatial terms (``base_link``, ``world``); empty if none"""
    history: int = 1
    """number of past steps stacked (1 = current step only)"""

    def __post_init__(self) -> None:
        if not self.name:
            raise BundleError("term name must be a non-empty string")
        if int(self.size) < 0 or int(self.history) < 1:
            raise BundleError(f"term {self.name!r}: size must be >= 0 and history >= 1, "
                              f"got size={self.size}, history={self.history}")
        self.size, self.history = int(self.size), int(self.history)
        for k in ("scale", "offset"):
            v = getattr(self, k)
            if isinstance(v, (list, tuple)):
                if len(v) != self.size:
                    raise BundleError(f"term {self.name!r}: {k} has {len(v)} values for size {self.size}")
                setattr(self, k, [float(x) for x in v])
            else:
                setattr(self, k, float(v))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Term":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise BundleError(f"term {d.get('name')!r}: unknown key(s) {unknown}; known: {sorted(names)}")
        return cls(**d)


def _as_dict(x: Any) -> dict:
    if x is None:
        return {}
    if dataclasses.is_dataclass(x):
        return dataclasses.asdict(x)
    return dict(x)


def deploy_settings_sha256(control_period: float | None, action_chain: Any, obs_terms: Any = ()) -> str:
    """Digest of the deploy-time settings that must equal training's: control period, action chain
    (an `ActionChainConfig` or its dict) and the observation history of every term."""
    terms = [t if isinstance(t, Term) else Term.from_dict(t) for t in (obs_terms or ())]
    doc = {
        "control_period": None if control_period is None else float(control_period),
        "action_chain": _as_dict(action_chain),
        "obs_history": {t.name: t.history for t in terms},
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


@dataclass
class ModelEntry:
    """One ONNX file in the bundle."""

    file: str
    """file name inside the bundle directory"""
    sha256: str
    """digest of the file's bytes; the loader refuses the bundle if it differs"""
    inputs: list[dict] = field(default_factory=list)
    """``[{"name", "spec"}]`` in graph order (spec as `Spec.to_dict`)"""
    outputs: list[dict] = field(default_factory=list)
    """``[{"name", "spec"}]`` in graph order"""
    accuracy: dict = field(default_factory=dict)
    """for derived models (int8): error against fp32 on the recorded observations"""


@dataclass
class Manifest:
    """Contents of ``manifest.json``. JSON only; nothing is pickled."""

    models: dict[str, ModelEntry]
    """``policy`` (obs -> action) always; ``perception`` and ``actor`` when the policy has both parts;
    ``policy_int8`` when exported with quantization"""
    obs_spec: AnySpec
    action_spec: AnySpec
    feature_spec: AnySpec | None = None
    format: str = FORMAT
    format_version: int = FORMAT_VERSION
    created: str = ""
    """UTC time of export, ISO 8601"""
    opset: int = OPSET
    ort_versions_verified: dict[str, list[str]] = field(default_factory=dict)
    """machine (``x86_64``, ``aarch64``) -> onnxruntime versions the bundle ran on with parity checked"""
    obs_terms: list[Term] = field(default_factory=list)
    action_terms: list[Term] = field(default_factory=list)
    image_terms: list[str] = field(default_factory=list)
    """observation terms the perception model computes from the camera image (e.g. a located target): the
    model ignores their slots in its state input, and the robot loop never fills them from a task input"""
    image_terms_static: bool = True
    """whether what the image terms locate stays put within an episode (the reach target), so that their estimate
    may be held over the episode's frames; False where it moves (the sorter's objects, carried): per frame"""
    located_geometry: dict | None = None
    """the geometry a sorter's perception was exported with (`tinker_core.loop.resting_geometry.RestingGeometry`:
    the nominal camera's projections, the resting height, the bins' inner half-width), with which a hand model's
    measured camera offset corrects the objects it places; None: none"""
    joint_names: list[str] = field(default_factory=list)
    control_period: float | None = None
    """seconds between two policy steps in training"""
    action_chain: dict = field(default_factory=dict)
    """the `tinker_core.action_chain.ActionChainConfig` of the training run, as a dict"""
    deploy_settings_sha256: str = ""
    normalization: dict = field(default_factory=dict)
    """observation normalization statistics (already folded into the graph; kept for inspection)"""
    training_step: int = 0
    policy_version: int = 0
    env_id: str = ""
    env: dict = field(default_factory=dict)
    """how to make the training env again (`tinker_core.envs.EnvConfig.to_dict`: id, kwargs, env_import,
    wrappers); empty when the env was not made from a recorded id"""
    parity: dict = field(default_factory=dict)
    """torch vs onnxruntime at export: ``{"max_abs_diff", "tolerance", "n_obs"}``"""
    data_files: dict[str, dict] = field(default_factory=dict)
    """other files of the bundle (``recorded_obs``) as ``{name: {"file", "sha256"}}``"""
    versions: dict[str, str] = field(default_factory=dict)
    byte_order: str = sys.byteorder
    platform: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.format != FORMAT:
            raise BundleError(f"manifest format is {self.format!r}, expected {FORMAT!r}")
        if int(self.format_version) > FORMAT_VERSION:
            raise BundleError(f"manifest format version {self.format_version} is newer than this tinker "
                              f"reads ({FORMAT_VERSION}); upgrade tinker on this machine")
        if "policy" not in self.models:
            raise BundleError(f"manifest lists models {sorted(self.models)} but no 'policy'")
        if self.byte_order not in ("little", "big"):
            raise BundleError(f"manifest byte_order must be 'little' or 'big', got {self.byte_order!r}")
        self.obs_terms = [t if isinstance(t, Term) else Term.from_dict(t) for t in self.obs_terms]
        self.action_terms = [t if isinstance(t, Term) else Term.from_dict(t) for t in self.action_terms]
        self.joint_names = [str(j) for j in self.joint_names]
        self.image_terms = [str(n) for n in self.image_terms]
        unknown = sorted(set(self.image_terms) - {t.name for t in self.obs_terms})
        if unknown:
            raise BundleError(f"manifest image_terms {unknown} are not observation terms "
                              f"(obs_terms: {[t.name for t in self.obs_terms]})")
        if len(set(self.joint_names)) != len(self.joint_names):
            raise BundleError(f"manifest joint_names has duplicates: {self.joint_names}")

    # -- derived ------------------------------------------------------------------------------
    def expected_settings_sha256(self) -> str:
        """What ``deploy_settings_sha256`` must be for this manifest's own settings."""
        return deploy_settings_sha256(self.control_period, self.action_chain, self.obs_terms)

    # -- JSON ---------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["models"] = {k: dataclasses.asdict(v) for k, v in self.models.items()}
        for m in d["models"].values():
            for io in m["inputs"] + m["outputs"]:
                io["spec"] = compact_spec_dict(io["spec"])
        for k in ("obs_spec", "action_spec", "feature_spec"):
            d[k] = None if d[k] is None else compact_spec_dict(d[k].to_dict())
        d["obs_terms"] = [dataclasses.asdict(t) for t in self.obs_terms]
        d["action_terms"] = [dataclasses.asdict(t) for t in self.action_terms]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Manifest":
        d = dict(d)
        if d.get("format") != FORMAT:
            raise BundleError(f"not a tinker bundle manifest: format is {d.get('format')!r}, expected {FORMAT!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise BundleError(f"manifest has unknown key(s) {unknown} (written by a newer tinker?)")
        missing = [k for k in ("models", "obs_spec", "action_spec") if k not in d]
        if missing:
            raise BundleError(f"manifest is missing {missing}")
        try:
            d["models"] = {k: ModelEntry(**v) for k, v in d["models"].items()}
            for k in ("obs_spec", "action_spec", "feature_spec"):
                if d.get(k) is not None:
                    d[k] = spec_from_dict(d[k])
        except (TypeError, SpecError) as e:
            raise BundleError(f"manifest is malformed: {e}") from e
        return cls(**d)

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "manifest.json") -> "Manifest":
        try:
            d = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise BundleError(f"{where}: not valid JSON ({e}); the bundle is damaged or half-written") from e
        if not isinstance(d, dict):
            raise BundleError(f"{where}: expected a JSON object, got {type(d).__name__}")
        return cls.from_dict(d)


def compact_spec_dict(d: Mapping[str, Any]) -> dict:
    """A spec dict whose uniform ``low``/``high`` lists are written as one number (same spec, short JSON)."""
    if "fields" in d:
        return {"fields": {k: compact_spec_dict(v) for k, v in d["fields"].items()}}
    out = dict(d)
    for k in ("low", "high"):
        v = out.get(k)
        if isinstance(v, list):
            flat = [x for x in _flatten(v)]
            if flat and all(x == flat[0] for x in flat):
                out[k] = flat[0]
    return out


def _flatten(v: Any):
    if isinstance(v, list):
        for x in v:
            yield from _flatten(x)
    else:
        yield v


HAND_SPEC = Spec(shape=(3,), dtype="float32")
"""the ``hand`` model's output: the end effector the camera sees, base frame, m"""


def hand_input_spec(obs_spec: AnySpec) -> DictSpec:
    """The ``hand`` model reads the image only."""
    return DictSpec({"image": obs_spec["image"]})


def spec_input_names(spec: AnySpec, flat_name: str = "obs") -> list[str]:
    """ONNX input names for a spec: ``[flat_name]`` for a `Spec`, the field names for a `DictSpec`."""
    if isinstance(spec, DictSpec):
        for k, v in spec.items():
            if not isinstance(v, Spec):
                raise BundleError(f"nested DictSpec field {k!r} cannot be an ONNX input; flatten it one level")
        return list(spec.keys())
    return [flat_name]
