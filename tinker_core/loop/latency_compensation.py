"""`LatencyCompensation`: act on where the arm will be when a command lands, not where it was measured (no ROS).

On a robot with ``steps`` control periods of command latency, a command reaches the motors ``steps`` periods after
the state it answers, and the commands sent before it are still on their way. A policy trained with little lag
(ArmSort: 0..1 period) then acts on a pose the arm is leaving: it overshoots, and its suction grips or lets go
where the arm is not yet. The compensation is a Smith predictor on the joint command stream, three parts that
belong together:

- **the observation** (`LatencyCompensation.__call__`, on the actor's input in the state's layout): the arm's terms
  are those of the pose the newest command in flight brings the arm to, its joint target: ``joint_pos`` is that
  target, ``ee_pos`` its forward kinematics, and each ``<x>_minus_ee`` is recomputed from them (``joint_vel`` and
  everything else stay as measured). The target is the command the motors were last sent, after the SafetyWrapper
  (a driver's commanded setpoint, as ros2_control's controllers report it as their reference): what the policy
  asked for is not what the arm was told where the wrapper limited it. An object the tool carries
  (``suction_active``: the cup holds one; the object nearest the measured hand, within `CARRY_RADIUS_M`) goes with
  the hand: its ``<x>_pos`` moves as the hand does, and its ``<x>_bin_minus_obj`` (the goal less the object) with
  it. Whatever records the actor's input (the learner's transitions) records what it acted on;
- **the action** (`predicted_pose`): the chain's delta is taken from that same pose, not from the measured one;
- **the task's extra actions** (`DelayedActions`: ArmSort's suction): held back ``steps`` periods, so that they land
  with the joint command they were chosen with.

A target is kept within ``steps * max_step`` rad of the measured pose on each joint (what the commands in flight can
still move the arm), so a held, stopped or slowed arm never leaves the prediction far from where the arm is.
``steps = 0`` is no compensation: everything passes as it is.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, Sequence

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.edges import joint_vector
from tinker_core.loop.observation import OBS_BOUND, ObservationAssembly
from tinker_core.loop.resting_hold import HELD_RADIUS_M

MAX_STEPS = 20
"""the largest latency compensated, control periods (1 s at 50 ms: beyond it a policy should not be run at all)"""

CARRY_RADIUS_M = HELD_RADIUS_M
"""while the suction holds, the object nearest the measured hand within this is the carried one (the resting hold's
``held_radius``). Measured with it (far_latency_sort, 4 periods, 100 episodes): the camera sorter 172/200 objects
(seeds 1000-1099) without moving the carried object, 195/200 with; the state sorter 185/200 and 194/200 (2000-2099)"""


def check_steps(steps: object, where: str = "latency_compensation") -> int:
    """``steps`` as a number of control periods, 0..`MAX_STEPS`; raises ConfigError naming ``where``."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or not 0 <= int(steps) <= MAX_STEPS:
        raise ConfigError(f"{where}: expected a whole number of control periods 0..{MAX_STEPS} (0: off), got "
                          f"{steps!r}")
    return int(steps)


def predicted_pose(last_target: np.ndarray | None, q: np.ndarray, steps: int, max_step: float) -> np.ndarray:
    """Where the arm goes once the commands in flight have landed: the newest joint target ``last_target`` (None:
    none sent yet, the measured ``q``), within ``steps * max_step`` rad of ``q`` on each joint."""
    q = np.asarray(q, dtype=np.float64)
    if last_target is None or steps == 0:
        return q
    reach = steps * float(max_step)
    return np.clip(np.asarray(last_target, dtype=np.float64), q - reach, q + reach)


class NewestCommand:
    """The newest safe command heard (by the stamp of the state it answers), of ``dof`` joint targets; ``since(t)``
    gives it only if it answers a state at or after ``t`` (an episode's first state: an older one was for the arm
    before its reset). ``where`` names the stage in the error for a command that is no joint vector."""

    def __init__(self, dof: int, where: str):
        self.dof, self.where = int(dof), where
        self.stamp_ns, self.q = -1, None

    def note(self, stamp_ns: int, q: np.ndarray) -> None:
        q = joint_vector(q, self.dof, f"{self.where}.command", "finite joint targets (rad)")
        if int(stamp_ns) >= self.stamp_ns:
            self.stamp_ns, self.q = int(stamp_ns), q

    def since(self, start_ns: int) -> np.ndarray | None:
        return self.q if self.q is not None and self.stamp_ns >= start_ns else None


class DelayedActions:
    """The task's extra actions (after the joints), each let out ``steps`` calls after it came in; until then the
    ``idle`` value (ArmSort's suction: off)."""

    def __init__(self, steps: int, size: int, idle: float = -1.0):
        self.steps, self.size, self.idle = check_steps(steps), int(size), float(idle)
        self._queue: deque[np.ndarray] = deque()
        self.reset()

    def reset(self) -> None:
        """A new episode: nothing is in flight."""
        self._queue = deque(np.full(self.size, self.idle) for _ in range(self.steps))
        self._sent = np.full(self.size, self.idle)

    def resize(self, steps: int) -> None:
        """From now on let each action out ``steps`` calls after it came in (a measured latency, mid-episode).
        Longer: the last action sent goes out again for the added calls (the suction keeps its state), and each in
        flight that many calls later; shorter: the oldest in flight are dropped (the newer catch up with the joints)."""
        steps = check_steps(steps)
        while len(self._queue) < steps:
            self._queue.appendleft(self._sent.copy())
        while len(self._queue) > steps:
            self._queue.popleft()
        self.steps = steps

    def __call__(self, extra: np.ndarray) -> np.ndarray:
        extra = np.asarray(extra, dtype=np.float64).reshape(-1)
        if extra.shape != (self.size,):
            raise ValidationError("latency_compensation.extra_action", f"{self.size} values", f"{extra.shape[0]}")
        if self.steps:
            self._queue.append(extra.copy())
            extra = self._queue.popleft()
        self._sent = extra
        return extra


class LatencyCompensation:
    """``compensation(features, commanded)`` -> the features with the arm's terms at the pose the newest command in
    flight brings it to (see the module docstring). ``terms``: the actor input's observation terms (the state's
    layout); ``max_step``: the bundle's action chain's rate limit, rad per period; ``ee_fn``: forward kinematics
    (joint positions -> ``ee_pos``, base frame), needed where the terms have ``ee_pos``."""

    def __init__(self, terms: Sequence[Any], steps: int, max_step: float,
                 ee_fn: Callable[[np.ndarray], np.ndarray] | None = None, bound: float = OBS_BOUND,
                 follows: bool = False):
        self.steps, self.max_step, self.follows = check_steps(steps), float(max_step), bool(follows)
        if not self.max_step > 0:
            raise ConfigError(f"latency_compensation: max_step must be > 0 rad, got {max_step!r}")
        self.asm = ObservationAssembly(terms)
        some = self.steps or self.follows  # what a measured latency will need, checked now (``latency_auto``)
        if some and "joint_pos" not in self.asm.slots:
            raise ConfigError(f"latency_compensation: the actor's observation has no joint_pos term to put at the "
                              f"pose in flight (its terms: {self.asm.names})")
        joints = self.asm.slots.get("joint_pos", slice(0, 0))
        self.dof = joints.stop - joints.start
        if some and "ee_pos" in self.asm.slots and ee_fn is None:
            raise ConfigError("latency_compensation: the actor reads ee_pos, and no forward kinematics (the robot's "
                              "URDF) was given to place it at the pose in flight")
        self.ee_fn, self.bound = ee_fn, float(bound)
        self.recomputed = [n for n in self.asm.names
                           if n.endswith("_minus_ee") and n[: -len("_minus_ee")] + "_pos" in self.asm.slots]
        self.objects = [n[: -len("_minus_ee")] for n in self.recomputed]
        """the things located relative to the hand (``<x>_pos`` and ``<x>_minus_ee``): a target, objects"""
        self.carries = "suction_active" in self.asm.slots and "ee_pos" in self.asm.slots
        self.pose: np.ndarray | None = None
        """the last cycle's predicted pose (joint positions, rad)"""
        self.ahead_rad = 0.0
        """how far the last cycle's predicted pose was from the measured one, the largest joint's, rad (diagnostics)"""

    @classmethod
    def for_manifest(cls, manifest: Any, steps: int, urdf: str | None = None,
                     follows: bool = False) -> "LatencyCompensation":
        """The compensation of ``steps`` periods for a bundle: its actor input's terms (the manifest's, less the
        image), its action chain's rate limit, forward kinematics of ``urdf`` (None: the KUKA iiwa the simulated
        robot runs) for the manifest's joints. A chain that is not in delta mode is refused. ``follows``: the
        latency compensated changes to what is measured (`follow`)."""
        from tinker_core.action_chain import ActionChainConfig
        from tinker_core.loop.kinematics import ForwardKinematics

        chain = ActionChainConfig(**dict(manifest.action_chain or {}))
        if (check_steps(steps) or follows) and chain.mode != "delta":
            raise ConfigError(f"latency_compensation: the bundle's action chain is in {chain.mode!r} mode; the "
                              f"compensation takes a delta chain's steps from the pose in flight")
        fk = ForwardKinematics.from_urdf(urdf or None, list(manifest.joint_names or []) or None)
        terms = [t for t in manifest.obs_terms if _name(t) != "image"]
        return cls(terms, steps, chain.max_step, ee_fn=fk.ee_position, follows=follows)

    def follow(self, periods: int) -> None:
        """Compensate ``periods`` from the next cycle on (a measured latency, ``latency_auto``); refused where the
        compensation was built fixed."""
        if not self.follows:
            raise ConfigError("latency_compensation: this compensation is fixed (latency_auto is off); a measured "
                              "latency is not taken")
        self.steps = check_steps(periods, "command_latency.periods")

    def __call__(self, features: np.ndarray, commanded: np.ndarray | None) -> np.ndarray:
        """``commanded``: the newest joint target sent to the motors (after the SafetyWrapper; None: none yet)."""
        if not self.steps:
            self.pose, self.ahead_rad = None, 0.0
            return features
        if features.shape != (self.asm.size,):
            raise ValidationError("latency_compensation.features", f"{self.asm.size} values in the state's layout",
                                  f"shape {list(features.shape)}")
        if commanded is not None:
            commanded = joint_vector(commanded, self.dof, "latency_compensation.commanded", "finite joint targets (rad)")
        q = self.asm.raw_term(features, "joint_pos")
        self.pose = pose = predicted_pose(commanded, q, self.steps, self.max_step)
        self.ahead_rad = float(np.max(np.abs(pose - q))) if pose.size else 0.0
        out = features.copy()
        self.asm.write_term(out, "joint_pos", pose, self.bound)
        if "ee_pos" in self.asm.slots:
            ee = self.ee_fn(pose)
            self.asm.write_term(out, "ee_pos", ee, self.bound)
            positions = {p: self.asm.raw_term(features, p + "_pos") for p in self.objects}
            carried = self._carried(features, positions)
            if carried is not None:  # it goes where the hand goes
                moved = positions[carried] + ee - self.asm.raw_term(features, "ee_pos")
                self.asm.write_term(out, carried + "_pos", moved, self.bound)
                if carried + "_bin_minus_obj" in self.asm.slots:
                    goal = self.asm.raw_term(features, carried + "_bin_minus_obj") + positions[carried]
                    self.asm.write_term(out, carried + "_bin_minus_obj", goal - moved, self.bound)
                positions[carried] = moved
            for p, pos in positions.items():
                self.asm.write_term(out, p + "_minus_ee", pos - ee, self.bound)
        return out

    def _carried(self, features: np.ndarray, positions: dict[str, np.ndarray]) -> str | None:
        """The object the suction holds: the one nearest the measured hand within `CARRY_RADIUS_M` (None: none)."""
        if not self.carries or not positions or float(self.asm.raw_term(features, "suction_active")[0]) < 0.5:
            return None
        hand = self.asm.raw_term(features, "ee_pos")
        distance, nearest = min((float(np.linalg.norm(pos - hand)), p) for p, pos in positions.items())
        return nearest if distance < CARRY_RADIUS_M else None


def _name(term: Any) -> str:
    return term["name"] if isinstance(term, dict) else term.name
