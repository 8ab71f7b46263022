"""`EstimateHold`: an image model's estimate averaged over the frames of an episode that show the target (no ROS).

A target locator looks at every frame, and the arm often hides the target: in about a third of the frames it is
out of sight in at least one view, and the locator then guesses. The target does not move within an episode, so
the held estimate is the mean of the estimates of the episode's frames that show it in every view
(`tinker_core.loop.target_sight.TargetSight`); until the first such frame, each frame's own estimate serves.
Measured on the shipped vision bundle, nominal ArmReach with the SafetyWrapper, 600 episodes (seeds 1000-1199,
2000-2199, 3000-3199): per frame 590, the first frame's estimate held 580, this mean 597 (docs/sim2real/vision.md).

The features keep the state's layout (the located state: the model wrote its image terms into the state's
slots); each image term ``<x>_pos`` gets its held value, and ``<x>_minus_ee`` is recomputed from the held
``<x>_pos`` and this cycle's measured ``ee_pos`` (as the model computes it), scaled and clipped as the
observation is. Any other image term is averaged the same way.

A camera that moved misplaces everything it sees by the same vector, the hand included. With a ``hand`` estimate
(a bundle's ``hand`` model: the end effector the camera sees) each frame measures that error as the measured
``ee_pos`` (forward kinematics of the joints) minus the hand seen; its mean over the episode's frames (the
``camera_offset``) is added to every held ``<x>_pos`` term, and, until a frame shows the target, to each frame's own
estimate, once it is longer than `CALIBRATION_DEADBAND_M`. `tinker eval` and the perception node use this
same class, chosen by one rule (`holds_estimate`): held by default wherever the model computes image terms and the
episodes are known; ``per_frame`` to see each frame's own estimate.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.camera_offset import CALIBRATION_DEADBAND_M, CameraOffset, CameraReadings
from tinker_core.loop.observation import OBS_BOUND, ObservationAssembly
from tinker_core.loop.resting_geometry import RestingGeometry
from tinker_core.loop.resting_hold import RestingHold
from tinker_core.loop.target_sight import TargetSight


CALIBRATION_DEADBAND_RANGE_M = (0.0, 0.5)
"""the values a deadband may be set to (the perception node's ``calibration_deadband``, `tinker eval`), m"""

ESTIMATE_MODES = ("auto", "held", "per_frame")
"""How a bundle's image estimate is used: ``auto`` (held where there is one to hold, see `holds_estimate`),
``held`` (required: refused where it cannot be), ``per_frame`` (each frame's own)."""


def holds_estimate(mode: str, image_terms: Sequence[str], synced: bool = True, where: str = "estimate") -> bool:
    """Whether the estimate is held (`estimate_hold`) under ``mode`` (`ESTIMATE_MODES`), for a model computing
    ``image_terms`` whose episodes are known (``synced``: the simulated robot's task terms declare them).
    ``auto`` holds exactly where both hold; ``held`` where they do not is refused (``where`` names the setting)."""
    if mode not in ESTIMATE_MODES:
        raise ConfigError(f"{where}: expected one of {list(ESTIMATE_MODES)}, got {mode!r}")
    if mode == "per_frame":
        return False
    if mode == "auto":
        return bool(image_terms) and bool(synced)
    if not image_terms:
        raise ConfigError(f"{where}: held needs a bundle whose model computes terms from the image (image_terms); "
                          f"this one names none, so there is no estimate to hold")
    if not synced:
        raise ConfigError(f"{where}: held needs the episodes the synced task terms declare (task_synced: true); "
                          f"a goal-driven robot has none")
    return True


def estimate_hold(terms: Sequence[Any], image_terms: Sequence[str], static: bool = True, calibrate: bool = False,
                  deadband_m: float = CALIBRATION_DEADBAND_M,
                  geometry: Mapping[str, Any] | None = None) -> "EstimateHold | RestingHold":
    """The hold for a bundle's image terms: `EstimateHold` where what they locate stays put within an episode
    (``static``: the manifest's ``image_terms_static``; the reach target), `RestingHold` where it moves (the
    sorter's objects, carried). ``calibrate``: the bundle has a ``hand`` model; ``geometry``: the manifest's
    ``located_geometry``, with which a `RestingHold` corrects what it places."""
    if static:
        return EstimateHold(terms, image_terms, calibrate=calibrate, deadband_m=deadband_m)
    return RestingHold(terms, image_terms, geometry=None if geometry is None else RestingGeometry.from_dict(geometry),
                       calibrate=calibrate, deadband_m=deadband_m)


class EstimateHold(CameraReadings):
    """``hold(features, episode, image)``: the features with the image terms averaged over ``episode``'s frames
    that show the target (``sight``), or as they are until one has."""

    summary = "estimate held over each episode"
    """what the hold does, for a log line"""

    def __init__(self, terms: Sequence[Any], image_terms: Sequence[str], bound: float = OBS_BOUND,
                 sight: TargetSight | None = None, deadband_m: float = CALIBRATION_DEADBAND_M,
                 calibrate: bool = False):
        """``calibrate``: hand estimates will come (the bundle has a ``hand`` model); checked against the terms
        here, so that a bundle that cannot use them is refused when it is loaded, not in the loop."""
        asm = ObservationAssembly(terms)
        holds_estimate("held", image_terms, where="held estimate")  # the one rule, and its message
        unknown = sorted(set(image_terms) - set(asm.names))
        if unknown:
            raise ConfigError(f"held estimate: image terms {unknown} are not observation terms {asm.names}")
        self.asm, self.slots = asm, asm.slots
        self.size, self.bound = asm.size, float(bound)
        self.offset, self.scale = asm.offset, asm.scale
        self.recomputed = {n: n[: -len("_minus_ee")] + "_pos" for n in image_terms
                           if n.endswith("_minus_ee") and n[: -len("_minus_ee")] + "_pos" in image_terms
                           and "ee_pos" in self.slots}
        self.held_terms = [n for n in image_terms if n not in self.recomputed]
        self.sight = sight or TargetSight()
        self.episode: str | None = None
        self.sums: dict[str, np.ndarray] = {}
        """raw (unscaled) values of the held terms, summed over the episode's frames that show the target"""
        self.seen = 0
        """the episode's frames that showed the target"""
        self.calibrated = [n for n in self.held_terms if n.endswith("_pos") and n != "ee_pos"]
        """the held positions a camera offset corrects"""
        self.camera = CameraOffset(deadband_m)
        if calibrate and "ee_pos" not in self.slots:
            raise ConfigError(f"held estimate: a hand model calibrates the camera against the measured ee_pos, and "
                              f"this bundle's observation has no ee_pos term (its terms: {list(self.slots)})")

    @property
    def held(self) -> dict[str, np.ndarray]:
        """The held terms' raw values (the mean over the frames seen; empty before the first)."""
        return {n: v / self.seen for n, v in self.sums.items()} if self.seen else {}

    def raw(self, features: np.ndarray, name: str) -> np.ndarray:
        """Term ``name`` of ``features`` unscaled: ``value / scale + offset``."""
        return self.asm.raw_term(features, name)

    def continue_from(self, other: "EstimateHold") -> None:
        """Keep ``other``'s episode and the frames it has seen (a reloaded model goes on with the same estimate)."""
        self.episode, self.sums, self.seen = other.episode, dict(other.sums), other.seen
        self.camera.continue_from(other.camera)

    def __call__(self, features: np.ndarray, episode: str, image: np.ndarray,
                 hand: np.ndarray | None = None) -> np.ndarray:
        """``hand``: the end effector the camera sees in ``image`` (base frame, m), or None."""
        if features.shape != (self.size,):
            raise ValidationError("held_estimate.features", f"{self.size} values in the state's layout",
                                  f"shape {list(features.shape)}")
        if episode != self.episode:  # a new episode: nothing seen yet
            self.episode, self.sums, self.seen = episode, {}, 0
            self.camera.reset()
        if hand is not None:
            self._measure_camera(features, hand)
        if self.sight(image):
            for n in self.held_terms:
                self.sums[n] = self.sums.get(n, 0.0) + self.raw(features, n)
            self.seen += 1
        offset = self.correction
        if not self.seen and offset is None:
            return features
        out = features.copy()
        held = self.held or {n: self.raw(features, n) for n in self.held_terms}
        if offset is not None:
            held = {n: v + offset if n in self.calibrated else v for n, v in held.items()}
        for name, raw in held.items():
            self.asm.write_term(out, name, raw, self.bound)
        if self.recomputed:
            ee = self.raw(features, "ee_pos")
            for name, pos in self.recomputed.items():
                self.asm.write_term(out, name, held[pos] - ee, self.bound)
        return out

    def _measure_camera(self, features: np.ndarray, hand: np.ndarray) -> None:
        if "ee_pos" not in self.slots:
            raise ValidationError("held_estimate.hand", "no hand estimate: this observation has no ee_pos to "
                                  "measure it against", "one")
        self.camera.measure(self.raw(features, "ee_pos"), hand)
