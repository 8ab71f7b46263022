"""`LoopStage`: one stage of the robot loop as every runtime hosts it (no ROS).

A stage maps each edge into it (`tinker_core.loop.graph.ROBOT_LOOP`) to a handler that takes that edge's value
(`tinker_core.loop.edges`), and sends what it makes through ``emit(port, value)``, which its host sets: a bus in
one process (`tinker.in_process.LocalBus`), publishers in a ROS 2 node (`tinker.runtime.NodeRuntime.serve`). A
handler returns the value that closed a cycle (its ``stamp_ns`` and ``cycle`` go to the host's trace) or None. An
input a stage must not use raises `tinker_core.errors.ValidationError`: the host refuses it (`refuse`) and the
loop goes on, that cycle held downstream.
"""

from __future__ import annotations

from typing import Any, Callable

from tinker_core.errors import PipelineError
from tinker_core.loop.input_ages import RecentFaults


def _unwired(port: str, value: Any) -> None:
    raise PipelineError(f"a loop stage emitted {port!r} before its host wired its outputs (LoopStage.emit)")


class LoopStage:
    """Base of the loop's stages: ``name`` (the graph's stage), `inputs`, ``emit`` and the refused inputs."""

    name = ""

    def __init__(self) -> None:
        self.emit: Callable[[str, Any], None] = _unwired
        self.refusals = RecentFaults()

    def emit_batch(self, items: list[tuple[str, Any]], before: Callable[[], None] | None = None) -> None:
        """Emit several values of one cycle, ``before`` called just before the first goes out. A node's host
        writes every message first, then publishes them back to back (the first publish may wake a subscriber
        that preempts this process)."""
        if before is not None:
            before()
        for port, value in items:
            self.emit(port, value)

    def inputs(self) -> dict[str, Callable[[Any], Any]]:
        """Edge port -> handler of that edge's value."""
        raise NotImplementedError

    def refuse(self, err: Exception, port: str = "") -> None:
        """An input this stage could not use (the host logs it): a WARN while such inputs go on. ``port``: the edge
        it came on ('' where it did not come as a message of one)."""
        self.refusals.note(str(err))

    # --- its life, which each runtime drives: a lifecycle node's transitions (`tinker.lifecycle`), the in-process
    # loop's start (`tinker.in_process`); a stage that only maps inputs to outputs needs none of them -------------
    def configured(self) -> None:
        """Its inputs and outputs are in place."""

    def configure_failed(self, why: str) -> None:
        """Configure failed (``why``: for the stage's diagnostics); it can be retried."""

    def activate(self) -> None:
        """Start acting on its inputs."""

    def deactivate(self) -> None:
        """Stop acting; it can be activated again."""

    def release(self) -> None:
        """Let go of what configure loaded (cleanup, shutdown, a failed configure)."""
