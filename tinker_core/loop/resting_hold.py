"""`RestingHold`: each located object's position averaged over the frames it has rested for (no ROS, no torch).

The sorter's objects move only when the arm carries them (or knocks them), so `EstimateHold`'s rule (one mean
over the episode) does not fit them; each frame's own estimate, though, is a centimetre or two off and moves
from frame to frame, and the arm follows the noise. Here each object ``<p>`` (an image term ``<p>_pos`` with its
``<p>_minus_ee``) has its own mean, over the frames since it last came to rest:

- held (the suction is on and it is within ``held_radius`` of the end effector, as the features say): no mean,
  the frame's own estimate, and the mean starts again once it is let go;
- seen more than ``jump_m`` from its mean (pushed, dropped, falling into a bin): the mean starts again there.

The held ``<p>_pos`` replaces the frame's, and the terms that follow from it are recomputed from it:
``<p>_minus_ee`` (with this cycle's measured ``ee_pos``) and ``<p>_bin_minus_obj`` (a fixed goal less the
position). Any other term (kind, sorted) is the frame's. The features keep the state's layout (the located
state: `tinker_core.nn.located_objects.LocatedObjects`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.observation import OBS_BOUND, ObservationAssembly


HELD_RADIUS_M = 0.12
"""an object whose centre is this close to the end effector, with the suction on, is held: ArmSort's cup holds
an object's centre 8.7 cm below the end-effector point, and resting objects are at least 9 cm apart"""


class RestingHold:
    """``hold(features, episode, image=None, hand=None)``: the features with each object's position held while it
    rests (see the module docstring); the image and hand are not used (the `EstimateHold` call, for one loop)."""

    def __init__(self, terms: Sequence[Any], image_terms: Sequence[str], held_radius: float = HELD_RADIUS_M,
                 jump_m: float = 0.05, bound: float = OBS_BOUND):
        asm = ObservationAssembly(terms)
        self.asm, self.slots = asm, asm.slots
        unknown = sorted(set(image_terms) - set(self.slots))
        if unknown:
            raise ConfigError(f"resting hold: image terms {unknown} are not observation terms {asm.names}")
        self.objects = [n[: -len("_pos")] for n in image_terms
                        if n.endswith("_pos") and n[: -len("_pos")] + "_minus_ee" in image_terms]
        missing = [n for n in ("ee_pos", "suction_active") if n not in self.slots]
        if not self.objects or missing:
            raise ConfigError(f"resting hold: expected objects located from the image (<p>_pos and <p>_minus_ee "
                              f"image terms) and the measured ee_pos and suction_active; image terms "
                              f"{list(image_terms)}" + (f", no {missing} in the observation" if missing else ""))
        if not (held_radius > 0 and jump_m > 0):
            raise ConfigError(f"resting hold: held_radius and jump_m must be > 0 m, got {held_radius}, {jump_m}")
        self.size, self.bound = asm.size, float(bound)
        self.held_radius, self.jump_m = float(held_radius), float(jump_m)
        self.episode: str | None = None
        self.sums: dict[str, np.ndarray] = {}
        """raw positions summed over the frames each object has rested for"""
        self.counts: dict[str, int] = {}

    @property
    def held(self) -> dict[str, np.ndarray]:
        """Each resting object's held position (raw, m)."""
        return {p: self.sums[p] / self.counts[p] for p in self.sums if self.counts.get(p)}

    summary = "each object's estimate held while it rests"
    """what the hold does, for a log line"""
    camera_offset = correction = None
    """a resting hold does not calibrate the camera (no hand model): `EstimateHold`'s readings, always None"""

    def continue_from(self, other: "RestingHold") -> None:
        """Keep ``other``'s episode and means (a reloaded model goes on with the same estimates)."""
        self.episode, self.sums, self.counts = other.episode, dict(other.sums), dict(other.counts)

    def __call__(self, features: np.ndarray, episode: str, image: Any = None, hand: Any = None) -> np.ndarray:
        if features.shape != (self.size,):
            raise ValidationError("resting_hold.features", f"{self.size} values in the state's layout",
                                  f"shape {list(features.shape)}")
        if episode != self.episode:
            self.episode, self.sums, self.counts = episode, {}, {}
        out = features.copy()
        ee = self.asm.raw_term(features, "ee_pos")
        suction = float(self.asm.raw_term(features, "suction_active")[0]) > 0.5
        for p in self.objects:
            pos = self.asm.raw_term(features, p + "_pos")
            if suction and float(np.linalg.norm(pos - ee)) < self.held_radius:
                self.sums.pop(p, None)
                self.counts.pop(p, None)
                continue
            n = self.counts.get(p, 0)
            if n and float(np.linalg.norm(pos - self.sums[p] / n)) > self.jump_m:
                n = 0
            self.sums[p] = pos + (self.sums[p] if n else 0.0)
            self.counts[p] = n + 1
            mean = self.sums[p] / self.counts[p]
            self.asm.write_term(out, p + "_pos", mean, self.bound)
            self.asm.write_term(out, p + "_minus_ee", mean - ee, self.bound)
            if p + "_bin_minus_obj" in self.slots:
                to_bin = self.asm.raw_term(features, p + "_bin_minus_obj") + pos - mean
                self.asm.write_term(out, p + "_bin_minus_obj", to_bin, self.bound)
        return out
