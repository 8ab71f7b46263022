"""`TargetSight`: whether a camera frame shows the target in every view (no ROS, no torch).

The reach target is a small marker: at 64x64 a few pixels per view, and in about a third of the frames the arm
hides it from at least one view. There a locator can only guess (its error is then 4 cm at the median, against
2.6 cm where it is seen; docs/sim2real/vision.md), so an estimate is worth keeping only from frames that show
the target. A view shows it when some pixel's colour contrast ``rgb . pixel / 255`` exceeds ``threshold``: the
same contrast the locator's first heatmap starts from (`tinker_core.nn.locator.LocatorConfig.prior_rgb`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinker_core.errors import ConfigError, ValidationError

GREENNESS = (-0.5, 1.0, -0.5)
"""the ArmReach marker's colour contrast: green against red and blue"""


@dataclass(frozen=True)
class TargetSight:
    """``sight(image)``: True when every square view of the uint8 HWC image (views side by side) has a pixel
    whose contrast exceeds ``threshold``."""

    rgb: tuple[float, float, float] = GREENNESS
    threshold: float = 40.0 / 255.0
    """contrast a pixel must exceed (0..1 scale); the marker reaches 0.5-0.7, a lit grey floor 0"""

    def __post_init__(self) -> None:
        if len(self.rgb) != 3 or not 0.0 < self.threshold < 1.0:
            raise ConfigError(f"TargetSight: expected 3 colour weights and a threshold in (0, 1), got {self.rgb}, "
                              f"{self.threshold}")

    def __call__(self, image: np.ndarray) -> bool:
        if image.ndim != 3 or image.shape[2] != 3 or image.shape[1] % image.shape[0]:
            raise ValidationError("target_sight.image", "uint8 (S, views*S, 3): square views side by side",
                                  f"{image.dtype}{list(image.shape)}")
        s = image.shape[0]
        contrast = image.astype(np.float32) @ np.asarray(self.rgb, np.float32)
        limit = self.threshold * 255.0
        return all(bool((contrast[:, i:i + s] > limit).any()) for i in range(0, image.shape[1], s))
