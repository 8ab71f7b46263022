"""Specs: the declared shape, dtype and bounds of every value that crosses a module edge.

A `Spec` describes one array; a `DictSpec` describes a nested mapping of them (multimodal
observations such as ``{"image": uint8[64,64,3], "joints": float32[7]}``). Shapes never include the
batch dimension; `check(value, batched=True)` accepts one leading batch axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Union

import numpy as np

from tinker_core.errors import SpecError, ValidationError

Bound = Union[float, tuple, None]


_add_reduce = np.add.reduce
_isfinite = math.isfinite


def _inward(b: np.ndarray, dt: np.dtype, direction: int) -> Any:
    """``b`` in dtype ``dt``, nudged toward the inside of the box where the cast rounded outward."""
    c = b.astype(dt)
    out = c < b if direction > 0 else c > b
    if out.any():
        c = np.where(out, np.nextafter(c, np.array(direction * np.inf, dt)), c).astype(dt)
    return c.flat[0] if c.size and (c == c.flat[0]).all() else c


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


ROUNDING = 1e-4
"""how far beyond a float bound, as a share of the bounds' range (at least 1), a value counts as rounding
(`Spec.clip_rounding`)"""


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
        try:
            object.__setattr__(self, "low", _bound_array(self.low, shape))
            object.__setattr__(self, "high", _bound_array(self.high, shape))
        except ValueError as e:
            raise SpecError(f"Spec bounds do not fit shape {shape}: {e}") from None
        if self.low is not None and np.isnan(self.low).any() or self.high is not None and np.isnan(self.high).any():
            raise SpecError("Spec bounds must not be NaN (use None or +-inf for unbounded)")
        if self.low is not None and self.high is not None and np.any(self.low > self.high):
            raise SpecError(f"Spec low > high somewhere: low={self.low}, high={self.high}")
        # Cached for the hot path (`check`): the dtype object, its kind, and one-comparison bounds.
        dt = np.dtype(self.dtype)
        object.__setattr__(self, "_dt", dt)
        object.__setattr__(self, "_float", dt.kind in "fc")
        lo, hi = self.low, self.high
        object.__setattr__(self, "_lo", None if lo is None else (float(lo.flat[0]) if lo.size and (lo == lo.flat[0]).all() else lo))
        object.__setattr__(self, "_hi", None if hi is None else (float(hi.flat[0]) if hi.size and (hi == hi.flat[0]).all() else hi))
        # With finite bounds on both sides, one comparison also rejects NaN and inf. The bounds are
        # cast to the spec's dtype, rounded inward, so that passing it implies passing the exact check.
        box = (dt.kind == "f" and lo is not None and hi is not None
               and bool(np.isfinite(lo).all() and np.isfinite(hi).all()))
        object.__setattr__(self, "_box", (_inward(lo, dt, +1), _inward(hi, dt, -1)) if box else None)
        # Small 1-D float arrays are checked in plain Python: cheaper than several numpy calls.
        small = dt.kind == "f" and len(shape) == 1 and shape[0] <= 32
        object.__setattr__(self, "_small", small)
        if small:
            lo_l = [-math.inf] * shape[0] if lo is None else lo.tolist()
            hi_l = [math.inf] * shape[0] if hi is None else hi.tolist()
            object.__setattr__(self, "_pybounds", list(zip(lo_l, hi_l)) if lo is not None or hi is not None else None)

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
    def clip_rounding(self, value: np.ndarray) -> np.ndarray:
        """``value`` with what lies beyond a float bound by rounding only (within `ROUNDING` of the bounds' range,
        e.g. a float32 scaled tanh's -1.0000001 for -1) set to that bound; anything further out is left for `check`
        to refuse. ``value`` itself when nothing is beyond."""
        if self._box is None or not isinstance(value, np.ndarray):
            return value
        if self._small and value.ndim == 1:  # the hot path (an exported policy's one action): plain Python
            for x, (lo_x, hi_x) in zip(value.tolist(), self._pybounds):
                if x < lo_x or x > hi_x:
                    break
            else:
                return value
        lo, hi = self.low, self.high
        if not ((value < lo).any() or (value > hi).any()):
            return value
        slack = ROUNDING * np.maximum(hi - lo, 1.0)
        rounding = ((value < lo) & (value >= lo - slack)) | ((value > hi) & (value <= hi + slack))
        return np.where(rounding, np.clip(value, lo, hi), value).astype(value.dtype)

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
        """Raise `ValidationError` unless ``value`` matches shape, dtype, finiteness and bounds.

        The passing path is a handful of attribute reads and at most two numpy reductions; the
        exact failure (which index, which value) is worked out only once something is wrong.
        """
        if type(value) is not np.ndarray and not isinstance(value, np.ndarray):
            raise ValidationError(where, self.describe(), describe_value(value), "not a numpy array")
        shape = value.shape
        if batched:
            if not shape:
                raise ValidationError(where, f"batch of {self.describe()}", describe_value(value))
            shape = shape[1:]
        if value.dtype is not self._dt and value.dtype != self._dt or shape != self.shape:
            exp = f"batch of {self.describe()}" if batched else self.describe()
            raise ValidationError(where, exp, describe_value(value))
        if self._small and not batched:
            vals = value.tolist()
            pb = self._pybounds if bounds else None
            if pb is None or not self._box:
                if not _isfinite(sum(vals)):  # NaN and inf propagate through the sum
                    self._check_finite(value, where)
            if pb is not None:
                for x, (lo, hi) in zip(vals, pb):
                    if not lo <= x <= hi:  # NaN fails too
                        self._check_finite(value, where)
                        self._check_bounds(value, where)
            return
        if not self._float:
            if bounds and (self._lo is not None or self._hi is not None):
                self._check_bounds(value, where)
            return
        if bounds and self._box is not None:
            lo, hi = self._box
            if not ((value >= lo) & (value <= hi)).all():  # NaN fails both comparisons
                self._check_finite(value, where)
                self._check_bounds(value, where)
            return
        if not _isfinite(_add_reduce(value, axis=None)):  # one reduction; NaN and inf propagate
            self._check_finite(value, where)
        if bounds and (self._lo is not None or self._hi is not None):
            self._check_bounds(value, where)

    def _check_finite(self, value: np.ndarray, where: str) -> None:
        bad = ~np.isfinite(value)
        if bad.any():
            idx = np.argwhere(bad)[0]
            what = "NaN" if np.isnan(value[tuple(idx)]) else "inf"
            raise ValidationError(where, f"finite {self.describe()}", f"{what} at index {idx.tolist()}")

    def _check_bounds(self, value: np.ndarray, where: str) -> None:
        if self.low is not None and np.any(value < self._lo):
            low = np.broadcast_to(self.low, value.shape)
            idx = tuple(np.argwhere(value < low)[0])
            raise ValidationError(where, f"values >= {float(low[idx]):g}",
                                  f"{float(value[idx]):g} at index {list(map(int, idx))}", "below lower bound")
        if self.high is not None and np.any(value > self._hi):
            high = np.broadcast_to(self.high, value.shape)
            idx = tuple(np.argwhere(value > high)[0])
            raise ValidationError(where, f"values <= {float(high[idx]):g}",
                                  f"{float(value[idx]):g} at index {list(map(int, idx))}", "above upper bound")

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
        extra = [k for k in self.fields if k not in consumer.fields]
        if extra:  # run-time checks refuse undeclared keys, so connect time must too
            return f"producer emits keys {extra} that the consumer does not declare"
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
    """Inverse of ``to_dict`` for `Spec`, `DictSpec` and `TransitionSpec` (``{"obs", "action"}``)."""
    if not isinstance(d, Mapping):
        raise SpecError(f"spec dict must be a mapping, got {type(d).__name__}")
    if "obs" in d and "action" in d and "shape" not in d:
        from tinker_core.transition import TransitionSpec

        return TransitionSpec.from_dict(d)  # type: ignore[return-value]
    if "fields" in d:
        return DictSpec({k: spec_from_dict(v) for k, v in d["fields"].items()})
    try:
        return Spec(tuple(d["shape"]), d["dtype"], d.get("low"), d.get("high"), d.get("unit", ""))
    except KeyError as e:
        raise SpecError(f"spec dict is missing {e.args[0]!r}: {dict(d)}") from None
    except (TypeError, ValueError) as e:
        raise SpecError(f"spec dict is invalid ({e}): {dict(d)}") from None


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
