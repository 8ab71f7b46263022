"""Specs: the declared shape, dtype and bounds of every value that crosses a module edge.

A `Spec` describes one array; a `DictSpec` describes a nested mapping of them (multimodal
observations such as ``{"image": uint8[64,64,3], "joints": float32[7]}``). Shapes never include the
batch dimension; `check(value, batched=True)` accepts one leading batch axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Union

import numpy as np

from tinker_core.errors import SpecError, ValidationError

Bound = Union[float, tuple, None]


def _bound_array(b: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    if b is None:
        return None
    a = np.asarray(b, dtype=np.float64)
    return np.broadcast_to(a, shape).copy() if a.shape != shape else a


def describe_value(value: Any) -> str:
    """``float64[6]``-style description of what actually came."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype}[{','.join(map(str, value.shape))}]"
    if isinstance(value, Mapping):
        return "dict{" + ", ".join(f"{k!r}" for k in value) + "}"
    if isinstance(value, (bool, np.bool_)):
        return "bool scalar"
    if isinstance(value, (int, float, np.number)):
        return f"{type(value).__name__} scalar"
    if value is None:
        return "None"
    return type(value).__name__


@dataclass(frozen=True, eq=False)
class Spec:
    """One array: shape (without batch), numpy dtype name, optional elementwise bounds.

    ``low``/``high`` may be scalars or arrays broadcastable to ``shape``; ``None`` means unbounded.
    """

    shape: tuple[int, ...]
    dtype: str = "float32"
    low: Bound | np.ndarray = None
    high: Bound | np.ndarray = None
    unit: str = ""

    def __post_init__(self) -> None:
        shape = tuple(int(s) for s in self.shape)
        if any(s < 0 for s in shape):
            raise SpecError(f"Spec shape must be non-negative, got {shape}")
        object.__setattr__(self, "shape", shape)
        try:
            object.__setattr__(self, "dtype", np.dtype(self.dtype).name)
        except TypeError as e:
            raise SpecError(f"Spec dtype {self.dtype!r} is not a numpy dtype") from e
        object.__setattr__(self, "low", _bound_array(self.low, shape))
        object.__setattr__(self, "high", _bound_array(self.high, shape))
        if self.low is not None and self.high is not None and np.any(self.low > self.high):
            raise SpecError(f"Spec low > high somewhere: low={self.low}, high={self.high}")

    # -- description -------------------------------------------------------------------------
    def describe(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"

    def __repr__(self) -> str:
        b = ""
        if self.low is not None or self.high is not None:
            lo = None if self.low is None else float(np.min(self.low))
            hi = None if self.high is None else float(np.max(self.high))
            b = f" in [{lo}, {hi}]"
        return f"Spec({self.describe()}{b})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Spec):
            return NotImplemented
        return (
            self.shape == other.shape
            and self.dtype == other.dtype
            and _bounds_equal(self.low, other.low)
            and _bounds_equal(self.high, other.high)
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    # -- data ---------------------------------------------------------------------------------
    def zeros(self, batch: int | None = None) -> np.ndarray:
        shape = self.shape if batch is None else (batch, *self.shape)
        z = np.zeros(shape, dtype=self.dtype)
        if self.low is not None:
            z = np.maximum(z, self.low).astype(self.dtype)
        if self.high is not None:
            z = np.minimum(z, self.high).astype(self.dtype)
        return z

    def sample(self, rng: np.random.Generator, batch: int | None = None) -> np.ndarray:
        shape = self.shape if batch is None else (batch, *self.shape)
        lo = -1.0 if self.low is None else np.maximum(self.low, -1e3)
        hi = 1.0 if self.high is None else np.minimum(self.high, 1e3)
        if np.issubdtype(np.dtype(self.dtype), np.integer):
            return rng.integers(np.floor(lo), np.floor(hi) + 1, size=shape).astype(self.dtype)
        if np.dtype(self.dtype) == np.bool_:
            return rng.integers(0, 2, size=shape).astype(bool)
        return rng.uniform(lo, hi, size=shape).astype(self.dtype)

    def check(self, value: Any, where: str = "value", batched: bool = False, bounds: bool = True) -> None:
        """Raise `ValidationError` unless ``value`` matches shape, dtype, finiteness and bounds."""
        if not isinstance(value, np.ndarray):
            raise ValidationError(where, self.describe(), describe_value(value), "not a numpy array")
        shape = value.shape[1:] if batched else value.shape
        if batched and value.ndim == 0:
            raise ValidationError(where, f"batch of {self.describe()}", describe_value(value))
        if value.dtype.name != self.dtype or shape != self.shape:
            exp = f"batch of {self.describe()}" if batched else self.describe()
            raise ValidationError(where, exp, describe_value(value))
        if value.dtype.kind == "f" and not np.isfinite(value).all():
            bad = "NaN" if np.isnan(value).any() else "inf"
            idx = np.argwhere(~np.isfinite(value))[0].tolist()
            raise ValidationError(where, f"finite {self.describe()}", f"{bad} at index {idx}")
        if bounds and self.low is not None and np.any(value < self.low):
            idx = np.argwhere(value < np.broadcast_to(self.low, value.shape))[0]
            raise ValidationError(
                where, f"values >= {float(np.broadcast_to(self.low, value.shape)[tuple(idx)]):g}",
                f"{float(value[tuple(idx)]):g} at index {idx.tolist()}", "below lower bound")
        if bounds and self.high is not None and np.any(value > self.high):
            idx = np.argwhere(value > np.broadcast_to(self.high, value.shape))[0]
            raise ValidationError(
                where, f"values <= {float(np.broadcast_to(self.high, value.shape)[tuple(idx)]):g}",
                f"{float(value[tuple(idx)]):g} at index {idx.tolist()}", "above upper bound")

    def incompatibility(self, consumer: "AnySpec") -> str | None:
        """Why data of this (producer) spec cannot feed ``consumer``; ``None`` if it can."""
        if not isinstance(consumer, Spec):
            return f"expected {describe_spec(consumer)}, got {self.describe()}"
        if self.shape != consumer.shape or self.dtype != consumer.dtype:
            return f"expected {consumer.describe()}, got {self.describe()}"
        if consumer.low is not None:
            if self.low is None or np.any(self.low < consumer.low):
                return f"expected values >= {consumer.low.min():g}, producer may emit lower ({_fmt(self.low)})"
        if consumer.high is not None:
            if self.high is None or np.any(self.high > consumer.high):
                return f"expected values <= {consumer.high.max():g}, producer may emit higher ({_fmt(self.high)})"
        return None

    # -- serialization ------------------------------------------------------------------------
    def to_dict(self) -> dict:
        d: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype}
        if self.low is not None:
            d["low"] = self.low.tolist()
        if self.high is not None:
            d["high"] = self.high.tolist()
        if self.unit:
            d["unit"] = self.unit
        return d


def _fmt(b: np.ndarray | None) -> str:
    return "unbounded" if b is None else f"{b.min():g}..{b.max():g}"


def _bounds_equal(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=0, atol=1e-6))


@dataclass(frozen=True, eq=False)
class DictSpec:
    """A nested mapping of specs, for multimodal or structured values (order is kept)."""

    fields: Mapping[str, "AnySpec"] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", dict(self.fields))
        for k, v in self.fields.items():
            if not isinstance(v, (Spec, DictSpec)):
                raise SpecError(f"DictSpec field {k!r} must be a Spec or DictSpec, got {type(v).__name__}")

    def __getitem__(self, key: str) -> "AnySpec":
        return self.fields[key]

    def __iter__(self):
        return iter(self.fields)

    def items(self):
        return self.fields.items()

    def keys(self):
        return self.fields.keys()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DictSpec):
            return NotImplemented
        return list(self.fields) == list(other.fields) and all(self.fields[k] == other.fields[k] for k in self.fields)

    def __hash__(self) -> int:
        return hash(tuple(self.fields))

    def describe(self) -> str:
        return "{" + ", ".join(f"{k!r}: {v.describe()}" for k, v in self.fields.items()) + "}"

    def __repr__(self) -> str:
        return f"DictSpec({self.describe()})"

    @property
    def nbytes(self) -> int:
        return sum(v.nbytes for v in self.fields.values())

    def zeros(self, batch: int | None = None) -> dict:
        return {k: v.zeros(batch) for k, v in self.fields.items()}

    def sample(self, rng: np.random.Generator, batch: int | None = None) -> dict:
        return {k: v.sample(rng, batch) for k, v in self.fields.items()}

    def check(self, value: Any, where: str = "value", batched: bool = False, bounds: bool = True) -> None:
        if not isinstance(value, Mapping):
            raise ValidationError(where, self.describe(), describe_value(value), "not a mapping")
        missing = [k for k in self.fields if k not in value]
        extra = [k for k in value if k not in self.fields]
        if missing or extra:
            raise ValidationError(where, f"keys {list(self.fields)}", f"keys {list(value)}",
                                  f"missing {missing}, extra {extra}")
        for k, s in self.fields.items():
            s.check(value[k], f"{where}[{k!r}]", batched=batched, bounds=bounds)

    def incompatibility(self, consumer: "AnySpec") -> str | None:
        if not isinstance(consumer, DictSpec):
            return f"expected {describe_spec(consumer)}, got {self.describe()}"
        missing = [k for k in consumer.fields if k not in self.fields]
        if missing:
            return f"consumer needs keys {missing} that the producer does not emit"
        for k, s in consumer.fields.items():
            why = self.fields[k].incompatibility(s)
            if why:
                return f"[{k!r}]: {why}"
        return None

    def to_dict(self) -> dict:
        return {"fields": {k: v.to_dict() for k, v in self.fields.items()}}


AnySpec = Union[Spec, DictSpec]


def describe_spec(spec: AnySpec | None) -> str:
    return "nothing" if spec is None else spec.describe()


def spec_from_dict(d: Mapping) -> AnySpec:
    """Inverse of ``to_dict`` for both kinds."""
    if "fields" in d:
        return DictSpec({k: spec_from_dict(v) for k, v in d["fields"].items()})
    try:
        return Spec(tuple(d["shape"]), d["dtype"], d.get("low"), d.get("high"), d.get("unit", ""))
    except KeyError as e:
        raise SpecError(f"spec dict is missing {e.args[0]!r}: {dict(d)}") from None


def spec_from_space(space: Any) -> AnySpec:
    """Build a spec from a gymnasium space (Box, Discrete, Dict)."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        return DictSpec({k: spec_from_space(s) for k, s in space.spaces.items()})
    if isinstance(space, gym.spaces.Box):
        low = np.where(np.isfinite(space.low), space.low, np.nan)
        high = np.where(np.isfinite(space.high), space.high, np.nan)
        lo = None if np.isnan(low).all() else np.where(np.isnan(low), -np.inf, low)
        hi = None if np.isnan(high).all() else np.where(np.isnan(high), np.inf, high)
        return Spec(space.shape, space.dtype.name, lo, hi)
    if isinstance(space, gym.spaces.Discrete):
        return Spec((), space.dtype.name, int(space.start), int(space.start + space.n - 1))
    raise SpecError(f"no spec for gymnasium space {space!r}; supported: Box, Discrete, Dict")
