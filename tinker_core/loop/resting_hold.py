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

With a hand model (``calibrate``) the camera's offset is measured on the hand it sees, while the suction is off
(`tinker_core.loop.camera_offset.CameraOffset`; a carried object hides the cup, and a trace of a moved camera,
seed 2000, showed the estimate drifting 20 cm over a long carry). Once it is beyond the deadband, every position
is corrected before anything else: a freely triangulated one by the offset, a resting one through the
perception's geometry (`tinker_core.loop.resting_geometry.RestingGeometry`); the hold, not the perception, then
decides which object is on the cup (`RestingHold._on_the_cup`), and ``sorted`` follows from the corrected
position (within its bin's inner half-width, not held).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.camera_offset import CALIBRATION_DEADBAND_M, CameraOffset, CameraReadings
from tinker_core.loop.observation import OBS_BOUND, ObservationAssembly
from tinker_core.loop.resting_geometry import RestingGeometry


HELD_RADIUS_M = 0.12
"""an object whose centre is this close to the end effector, with the suction on, is held: ArmSort's cup holds
an object's centre 8.7 cm below the end-effector point, and resting objects are at least 9 cm apart"""


class RestingHold(CameraReadings):
    """``hold(features, episode, image=None, hand=None)``: the features with each object's position held while it
    rests (see the module docstring); ``hand``: the end effector the camera sees (base frame, m) where the bundle
    has a hand model; the image is not used (the `EstimateHold` call, for one loop)."""

    def __init__(self, terms: Sequence[Any], image_terms: Sequence[str], held_radius: float = HELD_RADIUS_M,
                 jump_m: float = 0.05, bound: float = OBS_BOUND, geometry: RestingGeometry | None = None,
                 calibrate: bool = False, deadband_m: float = CALIBRATION_DEADBAND_M):
        """``geometry``: the perception's (the manifest's ``located_geometry``), needed to ``calibrate`` (hand
        estimates will come: the bundle has a ``hand`` model)."""
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
        self.carried: dict[str, np.ndarray] = {}
        """with a correction: the object on the cup and its place relative to the end effector, while the suction
        stays on (`_on_the_cup`)"""
        if calibrate and geometry is None:
            raise ConfigError("resting hold: a hand model measures the camera's offset, and correcting a resting "
                              "object needs the geometry its perception was exported with (the manifest's "
                              "located_geometry); this bundle has none: export it again with 'tinker vision export'")
        self.geometry = geometry
        self.camera = CameraOffset(deadband_m) if calibrate else None

    @property
    def held(self) -> dict[str, np.ndarray]:
        """Each resting object's held position (raw, m)."""
        return {p: self.sums[p] / self.counts[p] for p in self.sums if self.counts.get(p)}

    summary = "each object's estimate held while it rests"
    """what the hold does, for a log line"""
    def continue_from(self, other: "RestingHold") -> None:
        """Keep ``other``'s episode and means (a reloaded model goes on with the same estimates)."""
        self.episode, self.sums, self.counts = other.episode, dict(other.sums), dict(other.counts)
        self.carried = dict(other.carried)
        if self.camera is not None:
            self.camera.continue_from(other.camera)

    def __call__(self, features: np.ndarray, episode: str, image: Any = None, hand: Any = None) -> np.ndarray:
        if features.shape != (self.size,):
            raise ValidationError("resting_hold.features", f"{self.size} values in the state's layout",
                                  f"shape {list(features.shape)}")
        if episode != self.episode:
            self.episode, self.sums, self.counts, self.carried = episode, {}, {}, {}
            if self.camera is not None:
                self.camera.reset()
        out = features.copy()
        ee = self.asm.raw_term(features, "ee_pos")
        suction = float(self.asm.raw_term(features, "suction_active")[0]) > 0.5
        if not suction:
            self.carried = {}
        if hand is not None and self.camera is not None and not suction:  # a carried object hides the cup
            self.camera.measure(ee, hand)
        offset = self.correction
        seen = {p: self.asm.raw_term(features, p + "_pos") for p in self.objects}
        if offset is None:
            held = {p for p in self.objects if suction and float(np.linalg.norm(seen[p] - ee)) < self.held_radius}
            pos = seen
        else:
            pos, held = self._on_the_cup(seen, offset, ee, suction)
        for p in self.objects:
            if p in held:
                self.sums.pop(p, None)
                self.counts.pop(p, None)
                if offset is not None:
                    self._write(out, features, p, seen[p], pos[p], ee, corrected=True, held=True)
                continue
            n = self.counts.get(p, 0)
            if n and float(np.linalg.norm(pos[p] - self.sums[p] / n)) > self.jump_m:
                n = 0
            self.sums[p] = pos[p] + (self.sums[p] if n else 0.0)
            self.counts[p] = n + 1
            self._write(out, features, p, seen[p], self.sums[p] / self.counts[p], ee, corrected=offset is not None,
                        held=False)
        return out

    def _on_the_cup(self, seen: dict[str, np.ndarray], offset: np.ndarray, ee: np.ndarray,
                    suction: bool) -> tuple[dict[str, np.ndarray], set[str]]:
        """The corrected positions, and the one object held. The perception judged "held" by where the moved camera
        shows things, which is off by the move: here the object nearest the cup (within ``held_radius``, corrected)
        when the suction takes hold is held until it lets go, and placed with the hand wherever the perception
        put it on the table (its place relative to the hand kept from the frames it was seen lifted)."""
        pos = {p: self._corrected(v, offset) for p, v in seen.items()}
        if suction and not self.carried:
            near = [(float(np.linalg.norm(v - ee)), p) for p, v in pos.items()]
            d, p = min(near)
            if d < self.held_radius:
                self.carried[p] = pos[p] - ee
        for p in self.carried:
            if self._rests(seen[p]):
                pos[p] = ee + self.carried[p]
            else:
                self.carried[p] = pos[p] - ee
        return pos, set(self.carried)

    def _rests(self, seen: np.ndarray) -> bool:
        """The perception placed the object at the resting height (to within float32): it judged it not held."""
        return abs(float(seen[2]) - self.geometry.rest_z) < 1e-4

    def _corrected(self, seen: np.ndarray, offset: np.ndarray) -> np.ndarray:
        """Where an object the nominal camera placed at ``seen`` is, the camera moved by ``offset``: at the resting
        height if it was placed there, else (triangulated freely: held) ``seen + offset``."""
        return self.geometry.resting(seen, offset) if self._rests(seen) else seen + offset

    def _write(self, out: np.ndarray, features: np.ndarray, p: str, seen: np.ndarray, pos: np.ndarray,
               ee: np.ndarray, corrected: bool, held: bool) -> None:
        """Object ``p``'s terms from its position ``pos`` (the frame's estimate was ``seen``). Its ``sorted`` term
        is the frame's, unless ``pos`` was ``corrected`` for a moved camera: then it follows from ``pos`` as the
        perception decides it (inside its bin's inner half-width, not ``held``)."""
        self.asm.write_term(out, p + "_pos", pos, self.bound)
        self.asm.write_term(out, p + "_minus_ee", pos - ee, self.bound)
        if p + "_bin_minus_obj" in self.slots:
            goal = self.asm.raw_term(features, p + "_bin_minus_obj") + seen
            self.asm.write_term(out, p + "_bin_minus_obj", goal - pos, self.bound)
            if p + "_sorted" in self.slots and corrected:
                inside = not held and bool((np.abs(pos[:2] - goal[:2]) < self.geometry.bin_inner_half).all())
                self.asm.write_term(out, p + "_sorted", np.array([float(inside)]), self.bound)
