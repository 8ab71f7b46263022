"""`ObservationAssembly`: the observation vector from named raw terms, the one implementation.

Each term is a named slice ``value = (raw - offset) * scale`` (the ``obs_terms`` of the environment and
of a bundle's manifest), and the vector is clipped to the observation bounds. The simulated environment
(`tinker_sim.arm_env.ArmEnv`) and the perception node build their observation with it, so what the policy sees
on the robot is what it saw in training, clip included.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tinker_core.errors import ConfigError, ValidationError

OBS_BOUND = 10.0
"""scaled observation terms are clipped to [-OBS_BOUND, OBS_BOUND] (every term is scaled to about unit range)"""


def _field(t: Any, key: str) -> Any:
    return t[key] if isinstance(t, Mapping) else getattr(t, key)


class ObservationAssembly:
    """Raw terms in, the scaled and clipped float32 vector out.

    ``terms``: the term records in order (dicts as `tinker_sim.tasks.term` makes them, or manifest ``Term``s), each
    with ``name``, ``size``, ``offset`` and ``scale`` (a number or one per element). ``low``/``high``: the
    bounds (a number, one per element, or None for none on that side).
    """

    def __init__(self, terms: Sequence[Any], low: Any = -OBS_BOUND, high: Any = OBS_BOUND):
        self.names = [str(_field(t, "name")) for t in terms]
        if len(set(self.names)) != len(self.names):
            raise ConfigError(f"observation terms: duplicate names in {self.names}")
        self.sizes = [int(_field(t, "size")) for t in terms]
        self.size = sum(self.sizes)
        self.offset = np.concatenate([np.broadcast_to(np.asarray(_field(t, "offset"), np.float64), (n,))
                                      for t, n in zip(terms, self.sizes)]) if terms else np.zeros(0)
        self.scale = np.concatenate([np.broadcast_to(np.asarray(_field(t, "scale"), np.float64), (n,))
                                     for t, n in zip(terms, self.sizes)]) if terms else np.zeros(0)
        starts = np.cumsum([0] + self.sizes)
        self.slots = {n: slice(int(a), int(a + k)) for n, a, k in zip(self.names, starts, self.sizes)}
        """term name -> its slice of the vector"""
        self.low = None if low is None else np.broadcast_to(np.asarray(low, np.float64), (self.size,)).copy()
        self.high = None if high is None else np.broadcast_to(np.asarray(high, np.float64), (self.size,)).copy()

    @classmethod
    def from_spec(cls, terms: Sequence[Any], spec: Any) -> "ObservationAssembly":
        """The assembly for a state ``Spec`` (its ``low``/``high`` are the bounds; its shape must match)."""
        asm = cls(terms, getattr(spec, "low", None), getattr(spec, "high", None))
        if spec is not None and tuple(spec.shape) != (asm.size,):
            raise ConfigError(f"observation terms {asm.names} add up to {asm.size} values but the state spec "
                              f"is {tuple(spec.shape)}")
        return asm

    def scaled(self, raw: np.ndarray) -> np.ndarray:
        """The observation of the raw vector (all terms, in order): scaled, clipped, float32."""
        x = raw - self.offset  # a new array: the in-place steps below never touch ``raw``
        x *= self.scale
        if self.low is not None:  # maximum/minimum in place: a third of np.clip's cost on vectors this short
            np.maximum(x, self.low, out=x)
        if self.high is not None:
            np.minimum(x, self.high, out=x)
        return x.astype(np.float32)

    def raw_term(self, vector: np.ndarray, name: str) -> np.ndarray:
        """Term ``name`` of a scaled vector, unscaled: ``value / scale + offset`` (float64)."""
        s = self.slots[name]
        return vector[s].astype(np.float64) / self.scale[s] + self.offset[s]

    def write_term(self, vector: np.ndarray, name: str, raw: np.ndarray, bound: float = OBS_BOUND) -> None:
        """Put term ``name`` of ``vector`` (in place) to ``raw`` scaled, clipped to +-``bound``."""
        s = self.slots[name]
        vector[s] = np.clip((raw - self.offset[s]) * self.scale[s], -bound, bound)

    def from_sources(self, sources: Mapping[str, np.ndarray]) -> np.ndarray:
        """The observation of raw terms by name (1-D arrays); a missing term or a wrong size is named."""
        try:
            parts = [sources[n] for n in self.names]
            if [len(v) for v in parts] == self.sizes:  # the per-cycle path: one concatenate, one scale and clip
                return self.scaled(np.concatenate(parts) if parts else np.zeros(0))
        except (KeyError, TypeError):
            pass
        for name, n in zip(self.names, self.sizes):  # say which term is wrong
            v = sources.get(name)
            if v is None:
                raise ValidationError(f"obs.{name}", f"{n} values", "no value", "no source gave this term")
            got = np.asarray(v, dtype=np.float64).reshape(-1).shape[0]
            if got != n or np.ndim(v) != 1:
                raise ValidationError(f"obs.{name}", f"{n} values", f"{got} values" + ("" if np.ndim(v) == 1 else
                                                                                         f" in {np.ndim(v)} dims"))
        raise ValidationError("obs", f"1-D terms {self.names}", "values that do not concatenate")
