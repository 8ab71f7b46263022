"""`GoalHold`: a reach policy ends its skill at the goal and the arm holds the pose it reached (no ROS).

A reach policy is trained on episodes that end at success (`tinker_sim.tasks.base.Task.terminate_on_success`): it
never learnt to stay. On a robot that is not reset after a reach (a person sends goals; the launch YAML's
``episode_cycles: 0``) it keeps acting at the goal, and the shipped one drifted off from 4 of 20 targets, 3 of them
more than 10 cm (`docs/sim2real/goal_hold.md`). As a navigation or motion stack stops at its goal tolerance, the
loop here ends the skill where the task's own success rule says it is done, and holds:

- once the end effector is within ``success_distance`` of the target (the features' ``ee_pos`` and ``target_pos``
  terms: what perception gives the policy, measured or predicted, never the simulator's truth), the actor acts as
  long as it gets closer; at the first cycle it does not, the policy sends the closest pose it measured there,
  every cycle, instead of the actor's step;
- it acts again when the target moves by more than ``success_distance`` (a new goal), or the end effector is
  pushed more than ``release`` times ``success_distance`` away from it, and at each new episode.

The hold's raw action is the one whose mapping step gives the held pose (`tinker_core.action_chain.ActionChain.
invert`), so the action the learner records is the one the robot ran, as for a person's takeover.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tinker_core.errors import ConfigError
from tinker_core.loop.observation import ObservationAssembly

AT_GOAL = ("hold", "act")
"""what a reach policy does once the task's success rule says the goal is reached: hold the pose, or keep acting"""


def check_at_goal(value: object, where: str = "policy.at_goal") -> str:
    """``value`` as an ``at_goal`` setting; ConfigError naming the choices."""
    if value not in AT_GOAL:
        raise ConfigError(f"{where}: expected one of {list(AT_GOAL)}, got {value!r}")
    return str(value)


class GoalHold:
    """Whether this cycle holds (see the module docstring). ``obs_terms``: the features' layout (name, size, scale,
    offset: a bundle's ``obs_terms``); ``success_distance``: the task's (m); ``release``: a hold ends beyond this
    many success distances from the target."""

    def __init__(self, obs_terms: Sequence[Any], success_distance: float, release: float = 2.0):
        self.asm = asm = ObservationAssembly(list(obs_terms))  # the features' layout: raw terms read back
        missing = [n for n in ("ee_pos", "target_pos") if n not in asm.slots]
        if missing:
            raise ConfigError(f"policy.at_goal: the features have no {missing} (terms: {asm.names}); a hold at the "
                              f"goal reads the end effector and the target from them")
        if any(np.any(asm.scale[asm.slots[n]] == 0) for n in ("ee_pos", "target_pos")):
            raise ConfigError("policy.at_goal: a term with scale 0 cannot be read back")
        if not success_distance > 0 or not release >= 1:
            raise ConfigError(f"policy.at_goal: expected success_distance > 0 and release >= 1, got "
                              f"{success_distance!r} and {release!r}")
        self.size = asm.size
        self.success_distance, self.release = float(success_distance), float(release)
        self.pose: np.ndarray | None = None
        """the pose held (None: the actor acts)"""
        self._goal = np.zeros(3)
        self._best: tuple[float, np.ndarray, np.ndarray] | None = None  # within the distance: (d, pose, target)
        self.holds = 0
        """holds begun (each time the goal was reached)"""

    def reset(self) -> None:
        """A new episode: the actor acts."""
        self.pose = self._best = None

    def step(self, features: np.ndarray, q: np.ndarray) -> np.ndarray | None:
        """The pose to hold this cycle, or None where the actor acts; ``q``: this cycle's measured pose."""
        f = np.asarray(features).reshape(-1)
        if f.shape[0] != self.size:
            return None  # not this layout (the actor refuses it, naming what came)
        ee, target = self.asm.raw_term(f, "ee_pos"), self.asm.raw_term(f, "target_pos")
        d = float(np.linalg.norm(target - ee))
        if self.pose is not None:
            moved = float(np.linalg.norm(target - self._goal)) > self.success_distance
            if moved or d > self.release * self.success_distance:
                self.pose = None
            return self.pose
        best = self._best
        if best is not None and float(np.linalg.norm(target - best[2])) > self.success_distance:
            best = self._best = None  # another goal while approaching this one
        if d < self.success_distance and (best is None or d < best[0]):
            self._best = (d, np.array(q, dtype=np.float64), target)  # still getting closer: the actor acts
        elif best is not None:  # no closer than before: hold the closest pose reached
            self.pose, self._goal, self._best = best[1], best[2], None
            self.holds += 1
        return self.pose
