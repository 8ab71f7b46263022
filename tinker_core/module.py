"""`ModuleBase`: the base of every tinker module (perception, policy, learner, safety, env adapter).

A module has a dataclass ``config``, declares ``input_spec`` / ``output_spec``, maps one input to one
output in ``forward``, and saves to / loads from a versioned safetensors file. The file carries the
module class, its config and its specs as JSON metadata, and a sha256 digest of the tensors, so a
file written for another spec or modified after saving is refused with a `CheckpointError`. Nothing
is ever unpickled.

A complete, tested template with learned state lives in ``docs/custom_module.md``. In short::

    @dataclass
    class ScaleConfig:
        factor: float = 2.0          # multiply every feature by this

    class Scale(ModuleBase[ScaleConfig]):
        config_class = ScaleConfig
        input_name, output_name = "features", "features"

        def __init__(self, spec: Spec, config: ScaleConfig | None = None):
            super().__init__(config)
            self.input_spec = self.output_spec = spec

        def forward(self, x):
            return (x * self.config.factor).astype(x.dtype)

Torch modules subclass `TorchModule` (see `tinker_core.torch_module`), which stores their
``state_dict`` the same way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Callable, ClassVar, Generic, Mapping, TypeVar

import numpy as np

from tinker_core.errors import CheckpointError, ConfigError, SpecError
from tinker_core.spec import AnySpec, Spec, describe_spec, spec_from_dict

FORMAT = "tinker.module"
FORMAT_VERSION = 1

C = TypeVar("C")


@dataclasses.dataclass
class EmptyConfig:
    """A module with nothing to configure."""


def config_to_dict(config: Any) -> dict:
    if config is None:
        return {}
    if dataclasses.is_dataclass(config):
        return json.loads(json.dumps(dataclasses.asdict(config), default=_json_default))
    if isinstance(config, Mapping):
        return dict(config)
    raise ConfigError(f"config must be a dataclass, got {type(config).__name__}")


def config_from_dict(cls: type, d: Mapping[str, Any], where: str = "config") -> Any:
    """Build dataclass ``cls`` from a mapping; unknown keys are an error that names them."""
    if not dataclasses.is_dataclass(cls):
        raise ConfigError(f"{where}: {getattr(cls, '__name__', cls)!s} is not a dataclass")
    if not isinstance(d, Mapping):
        raise ConfigError(f"{where}: expected a mapping for {cls.__name__}, got {type(d).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown} for {cls.__name__}; known: {sorted(names)}")
    try:
        return cls(**d)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{where}: {e}") from e


def _json_default(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"cannot serialize {type(o).__name__}")


def tensors_digest(tensors: Mapping[str, np.ndarray]) -> str:
    """sha256 over names, dtypes, shapes and bytes of every tensor, in name order."""
    h = hashlib.sha256()
    for k in sorted(tensors):
        a = np.ascontiguousarray(tensors[k])
        h.update(k.encode())
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def file_digest(meta: Mapping[str, Any], tensors: Mapping[str, np.ndarray]) -> str:
    """sha256 over the tensors and the canonical JSON of the metadata (without the digest itself),
    so neither the weights nor the recorded config/specs can be changed unnoticed."""
    body = {k: v for k, v in meta.items() if k != "sha256"}
    h = hashlib.sha256(tensors_digest(tensors).encode())
    h.update(json.dumps(body, sort_keys=True, separators=(",", ":"), default=_json_default).encode())
    return h.hexdigest()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` so that ``path`` is either the old file or the whole new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}.{threading.get_ident()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


class ModuleBase(Generic[C]):
    """Base of every module: config, specs, ``forward``, ``save``/``load``."""

    config_class: ClassVar[type] = EmptyConfig
    #: names used in validation messages: ``policy.obs['joints']: expected ...``
    input_name: ClassVar[str] = "input"
    output_name: ClassVar[str] = "output"

    input_spec: AnySpec | None = None
    output_spec: AnySpec | None = None

    def __init__(self, config: C | None = None):
        self.config: C = config if config is not None else self.config_class()  # type: ignore[assignment]
        self.name: str = type(self).__name__.lower()

    # -- behaviour ----------------------------------------------------------------------------
    def forward(self, x: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def __call__(self, x: Any) -> Any:
        return self.forward(x)

    def reset(self) -> None:
        """Clear per-episode state (recurrent memory, history); stateless modules do nothing."""

    # -- state --------------------------------------------------------------------------------
    def get_state(self) -> dict[str, np.ndarray]:
        """Arrays that make up this module's learned state (empty for stateless modules)."""
        return {}

    def set_state(self, state: Mapping[str, np.ndarray]) -> None:
        if state:
            raise CheckpointError(f"{type(self).__name__} has no state but the file holds {sorted(state)}")

    def metadata(self) -> dict:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "class": f"{type(self).__module__}.{type(self).__qualname__}",
            "config": config_to_dict(self.config),
            "input_spec": None if self.input_spec is None else self.input_spec.to_dict(),
            "output_spec": None if self.output_spec is None else self.output_spec.to_dict(),
        }

    def save(self, path: str | os.PathLike, extra: Mapping[str, Any] | None = None) -> Path:
        """Write state, config and specs to one safetensors file, atomically."""
        from safetensors.numpy import save as st_save

        tensors = {k: np.ascontiguousarray(v) for k, v in self.get_state().items()}
        meta = self.metadata()
        meta["extra"] = dict(extra or {})
        meta = json.loads(json.dumps(meta, default=_json_default))  # what the file will hold, exactly
        meta["sha256"] = file_digest(meta, tensors)
        blob = st_save(tensors, metadata={"tinker": json.dumps(meta, default=_json_default)})
        atomic_write_bytes(path, blob)
        return Path(path)

    @staticmethod
    def read_file(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
        """Read and verify a module file: returns (metadata, tensors). Raises `CheckpointError`."""
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise CheckpointError(f"{path}: no such module file")
        try:
            with safe_open(str(path), framework="numpy") as f:
                raw = (f.metadata() or {}).get("tinker")
                tensors = {k: f.get_tensor(k) for k in f.keys()}
        except Exception as e:  # safetensors raises several types for damaged files
            raise CheckpointError(f"{path}: not a readable tinker module file ({e})") from e
        if raw is None:
            raise CheckpointError(f"{path}: safetensors file without tinker metadata")
        try:
            meta = json.loads(raw)
        except json.JSONDecodeError as e:
            raise CheckpointError(f"{path}: tinker metadata is not valid JSON ({e})") from None
        if not isinstance(meta, dict):
            raise CheckpointError(f"{path}: tinker metadata is a {type(meta).__name__}, expected an object")
        if meta.get("format") != FORMAT:
            raise CheckpointError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
        version = meta.get("format_version")
        if not isinstance(version, int) or version < 1:
            raise CheckpointError(f"{path}: format_version {version!r} is not a positive integer")
        if version > FORMAT_VERSION:
            raise CheckpointError(
                f"{path}: format version {version} is newer than this tinker ({FORMAT_VERSION})")
        if file_digest(meta, tensors) != meta.get("sha256"):
            raise CheckpointError(f"{path}: content does not match the recorded sha256: the file was modified")
        return meta, tensors

    def load(self, path: str | os.PathLike) -> "ModuleBase":
        """Load state saved by ``save`` into this module; refuses a file for another spec or class."""
        meta, tensors = self.read_file(path)
        mine = self.metadata()
        if meta.get("class") != mine["class"]:
            raise CheckpointError(f"{path}: written by {meta.get('class')}, cannot load into {mine['class']}")
        for key in ("input_spec", "output_spec"):
            theirs = meta.get(key)
            try:
                t_spec = None if theirs is None else spec_from_dict(theirs)
            except SpecError as e:
                raise CheckpointError(f"{path}: {key} in the file is not a valid spec ({e})") from None
            m_spec = getattr(self, key)
            if (t_spec is None) != (m_spec is None) or (t_spec is not None and t_spec != m_spec):
                raise CheckpointError(f"{path}: {key} mismatch: this module expects {describe_spec(m_spec)}, "
                                      f"the file was saved for {describe_spec(t_spec)}")
        self.set_state(tensors)
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}(in={self.input_spec!r}, out={self.output_spec!r})"


class FunctionModule(ModuleBase):
    """A function as a module (a scripted controller, ``algo.predict``, a bundle's policy timed by the CLI), so that
    the pipeline checks what goes in and out of it like any other: the specs it is given, its output made the
    output spec's dtype (as the env would take it), and the function's own ``reset()`` (if any) at episode ends."""

    input_name = "obs"
    output_name = "action"

    def __init__(self, fn: Callable[[Any], Any], input_spec: AnySpec | None, output_spec: AnySpec | None,
                 name: str = "function"):
        super().__init__()
        self.fn, self.name = fn, name
        self.input_spec, self.output_spec = input_spec, output_spec
        self._dtype = output_spec.dtype if isinstance(output_spec, Spec) else None

    def forward(self, x: Any) -> Any:
        out = self.fn(x)
        return out if self._dtype is None else np.asarray(out, dtype=self._dtype)

    def reset(self) -> None:
        reset = getattr(self.fn, "reset", None)
        if callable(reset):
            reset()
