"""The validator: checks every pipeline edge at connect time and, when enabled, every value at run time.

Connect-time errors are `SpecError`; run-time errors are `ValidationError` and read like
``policy.obs['joints']: expected float32[7], got float64[6]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tinker_core.errors import SpecError
from tinker_core.spec import AnySpec, describe_spec


@dataclass(frozen=True)
class Edge:
    """A directed connection: ``producer.output -> consumer.input``."""

    producer: str
    consumer: str
    port: str
    """the consumer's input name, used in messages"""
    name: str = field(init=False, compare=False, repr=False)
    """``producer->consumer`` (computed once: it is read on every step)"""
    where: str = field(init=False, compare=False, repr=False)
    """``consumer.port``, the prefix of every validation message on this edge"""

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", f"{self.producer}->{self.consumer}")
        object.__setattr__(self, "where", f"{self.consumer}.{self.port}")


class Validator:
    """Spec checks for edges. ``enabled`` switches run-time checks only; connect-time checks always run."""

    def __init__(self, enabled: bool = True, check_bounds: bool = True):
        self.enabled = enabled
        self.check_bounds = check_bounds

    @staticmethod
    def check_edge(edge: Edge, produced: AnySpec | None, consumed: AnySpec | None) -> None:
        if consumed is None:
            return
        if produced is None:
            raise SpecError(f"{edge.where}: expects {describe_spec(consumed)}, "
                            f"but {edge.producer} declares no output spec (edge {edge.name})")
        why = produced.incompatibility(consumed)  # type: ignore[union-attr]
        if why:
            raise SpecError(f"{edge.where}: {why} (edge {edge.name})")

    def check_value(self, edge: Edge, spec: AnySpec | None, value: Any, batched: bool = False,
                    where: str | None = None) -> None:
        """Raise `ValidationError` (named ``where``, default the edge's consumer port) unless ``value`` fits."""
        if self.enabled and spec is not None:
            spec.check(value, where or edge.where, batched=batched, bounds=self.check_bounds)

