"""What each edge of the robot loop carries, as values every runtime passes between its stages (no ROS).

`tinker_core.loop.graph.ROBOT_LOOP` names the edges; this module says what one message of each is. A stage's
handlers take these values and emit them (`tinker_core.loop.stage.LoopStage`), so the same stage class runs in
one process on a bus (`tinker.in_process.InProcessLoop`) and in a ROS 2 node, where `tinker.wire` turns each
message into its value and back: the wire format of each topic stays declared in that one module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from tinker_core.errors import ValidationError

TASK_FIELDS = ("reward", "done", "success", "distance")
"""the values at the head of a task report, in this order; the task terms follow"""
GOAL_TERM = "target_pos"
"""the observation term a goal sets"""
COMMAND_TYPES = ("float64_array", "joint_trajectory")
"""how a ``command`` goes to a robot driver: forward_command_controller's joint positions in joint order, or
joint_trajectory_controller's one point by joint name (`tinker.wire` writes and reads both)"""


@dataclass(slots=True)
class RobotState:
    """``joint_states``: the measured pose and speeds in the receiver's joint order, stamped by the robot."""

    stamp_ns: int
    q: np.ndarray
    qd: np.ndarray
    cycle: int | None = None
    """the simulated robot's cycle counter (None from any other driver)"""
    episode: int | None = None
    """the simulated robot's episode counter (None from any other driver)"""


@dataclass(slots=True)
class Frame:
    """``image``: one rgb8 camera frame, stamped with the state it shows."""

    stamp_ns: int
    image: np.ndarray
    cycle: int = 0


@dataclass(slots=True)
class TaskReport:
    """``task``: the simulated robot's outcome of one state and its task terms by name."""

    stamp_ns: int
    cycle: int
    episode: str
    reward: float
    done: bool
    success: bool
    distance: float
    terms: dict[str, np.ndarray]
    vector: np.ndarray | None = None
    """the whole report as one vector (`TASK_FIELDS`, then the terms), where it came as one"""

    def objects(self) -> tuple[int, int] | None:
        """(objects in their right bin, objects present) of a sorting task's report, read from its terms
        ``obj{i}_sorted`` and ``obj{i}_kind`` (an empty slot has no kind); None for a task without objects."""
        got = total = 0
        i = 0
        while f"obj{i}_sorted" in self.terms:
            if float(np.sum(self.terms.get(f"obj{i}_kind", 1.0))) > 0.5:
                total += 1
                got += bool(float(self.terms[f"obj{i}_sorted"][0]) > 0.5)
            i += 1
        return (got, total) if i else None


def split_terms(values: np.ndarray, layout: Sequence[tuple[str, int]], where: str = "task") -> dict[str, np.ndarray]:
    """The task terms that follow `TASK_FIELDS` in ``values``, by name, laid out as ``layout`` says ((name, size)
    in order); ValidationError when the sizes do not add up to the values."""
    out, off = {}, len(TASK_FIELDS)
    for name, size in layout:
        out[name] = values[off: off + int(size)]
        off += int(size)
    if off != values.shape[0]:
        raise ValidationError(f"{where}.terms", f"{values.shape[0] - len(TASK_FIELDS)} values after the head",
                              f"terms of {off - len(TASK_FIELDS)}")
    return out


def joint_vector(values, n: int, where: str, what: str = "finite values") -> np.ndarray:
    """``values`` as a flat float vector of ``n`` finite values (one per joint); a ValidationError naming ``where``,
    ``n`` ``what`` and the values otherwise. What a stage checks of a joint vector it will act on."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.shape[0] != n or not np.isfinite(v).all():
        raise ValidationError(where, f"{n} {what}", f"{v.tolist()}")
    return v


def task_report(values: np.ndarray, layout: Sequence[tuple[str, int]], stamp_ns: int, cycle: int, episode: object,
                where: str = "task") -> TaskReport:
    """A `TaskReport` of a task vector (`TASK_FIELDS`, then the terms ``layout`` names)."""
    if values.shape[0] < len(TASK_FIELDS):
        raise ValidationError(where, f"at least {len(TASK_FIELDS)} values {TASK_FIELDS}", f"{values.shape[0]} values")
    terms = split_terms(values, layout, where) if layout else {}
    return TaskReport(int(stamp_ns), int(cycle), str(episode), float(values[0]), bool(values[1] > 0.5),
                      bool(values[2] > 0.5), float(values[3]), terms, values)


@dataclass(slots=True)
class Goal:
    """``goal``: a target position a real system sets (base frame, m)."""

    stamp_ns: int
    point: np.ndarray


@dataclass(slots=True)
class Features:
    """``features``: perception's output for one state, and the model that made it."""

    stamp_ns: int
    cycle: int
    episode: str
    features: np.ndarray
    perception_sha256: str = ""
    extra: dict[str, int] = field(default_factory=dict)
    """trace fields of the cycle (``frame_age_us``)"""
    latency_compensation: int | None = None
    """the command latency, control periods, these features were compensated for (None: perception compensates
    none); the policy steps its chain from the same prediction (`tinker_core.loop.latency_compensation`)"""


@dataclass(slots=True)
class Action:
    """``joint_target`` (the action chain's joint target) or ``raw_action`` (the actor's output) of one cycle."""

    stamp_ns: int
    cycle: int
    values: np.ndarray
    version: object = ""
    """the policy version of the bundle that made it"""
    stop: bool = False
    """the policy's last target when it stops: a hold at its measured pose"""


@dataclass(slots=True)
class SafeCommand:
    """``command``: the safe joint position command that answers state ``stamp_ns``, and the guard's outcome."""

    stamp_ns: int
    cycle: int
    q: np.ndarray
    status: str = ""
    """passed, clipped, rate_limited, held, estopped... (the SafetyWrapper's outcome, lower case)"""
    version: object = ""
    intervention: bool = False
    """made from a person's teleop target, not the policy's"""
    why: str = ""
    """why the guard changed or held it ('' = it did not)"""


@dataclass(slots=True)
class Intervened:
    """``intervened``: a cycle served from a person's target: ``[target..., measured pose...]``."""

    stamp_ns: int
    cycle: int
    values: np.ndarray


@dataclass(slots=True)
class EpisodeEnd:
    """``episode_end``: the success sensor saw the task done in the state stamped ``stamp_ns`` of ``episode``; that
    episode ends there (the simulated robot resets, as a real cell's reset routine would)."""

    stamp_ns: int
    episode: str


@dataclass(slots=True)
class CommandLatency:
    """``command_latency``: the robot's command latency the safety stage measured and now compensates (``latency_auto``;
    `tinker_core.loop.latency_auto`): control periods, and the fit that stood out (R² of the lag and of the next
    best)."""

    periods: int
    fit: float = 0.0
    runner_up: float = 0.0


@dataclass(slots=True)
class EstopState:
    """``estop_state``: whether the safety guard's e-stop is latched, and why ('' = clear)."""

    estopped: bool
    reason: str = ""
