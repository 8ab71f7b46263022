"""`EstimateHold`: an image model's estimate taken on an episode's first cycle and held for the episode (no ROS).

A target locator looks at every frame, and near the target the arm can hide it (docs/sim2real/vision.md).
The target does not move within an episode, so the estimate of the episode's first frame (the arm at its
start pose, the target in view) can serve the whole episode. The features keep the state's layout (the
located state: the model wrote its image terms into the state's slots); on later cycles of the episode
each image term ``<x>_pos`` gets its held value back, and ``<x>_minus_ee`` is recomputed from the held
``<x>_pos`` and this cycle's measured ``ee_pos`` (as the model computes it), scaled and clipped as the
observation is. Any other image term is held as it was. `tinker eval --hold-estimate` and the perception
node (``hold_estimate``) use this same class.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.observation import OBS_BOUND, ObservationAssembly


class EstimateHold:
    """``hold(features, episode)``: the features with the image terms of ``episode``'s first call."""

    def __init__(self, terms: Sequence[Any], image_terms: Sequence[str], bound: float = OBS_BOUND):
        asm = ObservationAssembly(terms)
        if not image_terms:
            raise ConfigError("hold_estimate: the bundle names no image_terms (terms its model computes from the "
                              "image); there is no estimate to hold")
        unknown = sorted(set(image_terms) - set(asm.names))
        if unknown:
            raise ConfigError(f"hold_estimate: image terms {unknown} are not observation terms {asm.names}")
        starts = np.cumsum([0] + asm.sizes)
        self.slots = {n: slice(int(a), int(a + k)) for n, a, k in zip(asm.names, starts, asm.sizes)}
        self.size, self.bound = asm.size, float(bound)
        self.offset, self.scale = asm.offset, asm.scale
        self.recomputed = {n: n[: -len("_minus_ee")] + "_pos" for n in image_terms
                           if n.endswith("_minus_ee") and n[: -len("_minus_ee")] + "_pos" in image_terms
                           and "ee_pos" in self.slots}
        self.held_terms = [n for n in image_terms if n not in self.recomputed]
        self.episode: str | None = None
        self.held: dict[str, np.ndarray] = {}
        """raw (unscaled) values of the held terms, taken on the episode's first call"""

    def raw(self, features: np.ndarray, name: str) -> np.ndarray:
        """Term ``name`` of ``features`` unscaled: ``value / scale + offset``."""
        s = self.slots[name]
        return features[s].astype(np.float64) / self.scale[s] + self.offset[s]

    def __call__(self, features: np.ndarray, episode: str) -> np.ndarray:
        if features.shape != (self.size,):
            raise ValidationError("hold_estimate.features", f"{self.size} values in the state's layout",
                                  f"shape {list(features.shape)}")
        if episode != self.episode:  # the episode's first cycle: its estimate is the one held
            self.episode = episode
            self.held = {n: self.raw(features, n) for n in self.held_terms}
            return features
        out = features.copy()
        for name, raw in self.held.items():
            s = self.slots[name]
            out[s] = np.clip((raw - self.offset[s]) * self.scale[s], -self.bound, self.bound)
        if self.recomputed:
            ee = self.raw(features, "ee_pos")
            for name, pos in self.recomputed.items():
                s = self.slots[name]
                out[s] = np.clip((self.held[pos] - ee - self.offset[s]) * self.scale[s], -self.bound, self.bound)
        return out
