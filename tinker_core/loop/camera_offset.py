"""`CameraOffset`: how far the camera has moved, measured on the hand it sees (no ROS, no torch).

A camera moved by ``s`` (and not re-aimed) shows everything as the camera in place would show it ``s`` away:
through the nominal camera's model a triangulating locator places a point X at X - s, the end effector included.
Forward kinematics of the measured joints says where the end effector is, so each frame with a hand estimate (a
bundle's ``hand`` model) measures ``s`` as the measured ``ee_pos`` minus the hand seen. The episode's mean is the
camera's offset; it is corrected once it is longer than the deadband (shorter: the hand estimate's own error).
`tinker_core.loop.held_estimate.EstimateHold` (the reach target) and `tinker_core.loop.resting_hold.RestingHold`
(the sorter's objects) both measure it here.
"""

from __future__ import annotations

import numpy as np

from tinker_core.errors import ConfigError, ValidationError

CALIBRATION_DEADBAND_M = 0.02
"""a measured camera offset no longer than this is not corrected: with the camera in place the offset is the hand
estimate's own error. Measured with the shipped reach vision bundle (a triangulating locator), 100 nominal
episodes (seeds 3000-3099): the offset's episode mean is 1.3 cm at the median; correcting beyond 2 cm left the held
target 1.63 cm off on average against 1.78 cm correcting always and 1.51 cm never, and on a camera moved 4 cm
1.79 cm against 3.58 cm with the 4.5 cm deadband of the learned-map locator before it (docs/sim2real/vision.md)"""


class CameraOffset:
    """The episode's mean of ``ee - hand`` (`measure`), and the ``correction`` beyond ``deadband_m``."""

    def __init__(self, deadband_m: float):
        if not deadband_m >= 0.0:
            raise ConfigError(f"held estimate: deadband_m must be >= 0 m, got {deadband_m!r}")
        self.deadband_m = float(deadband_m)
        self.sum: np.ndarray | None = None
        """measured ee_pos minus the hand seen, summed over this episode's frames with a hand estimate"""
        self.count = 0

    def reset(self) -> None:
        """A new episode: the camera is measured again."""
        self.sum, self.count = None, 0

    def measure(self, ee: np.ndarray, hand: np.ndarray) -> None:
        """One frame: ``ee`` the measured end effector, ``hand`` the one the camera sees (base frame, m)."""
        hand = np.asarray(hand, dtype=np.float64).reshape(-1)
        if hand.shape != (3,) or not np.isfinite(hand).all():
            raise ValidationError("held_estimate.hand", "3 finite values (base frame, m)", f"{hand!r}")
        error = np.asarray(ee, dtype=np.float64) - hand
        self.sum = error if self.sum is None else self.sum + error
        self.count += 1

    @property
    def offset(self) -> np.ndarray | None:
        """The camera's error the hand measured this episode, m (None: no hand estimate yet)."""
        return None if not self.count else self.sum / self.count

    @property
    def correction(self) -> np.ndarray | None:
        """What the estimates are corrected by: the ``offset`` where it is longer than the deadband, else None."""
        offset = self.offset
        return offset if offset is not None and float(np.linalg.norm(offset)) > self.deadband_m else None

    def continue_from(self, other: "CameraOffset | None") -> None:
        """Keep ``other``'s measurements of this episode (a reloaded model goes on with the same offset)."""
        if other is not None:
            self.sum, self.count = other.sum, other.count


class CameraReadings:
    """What a hold with a ``camera`` (`CameraOffset`; None: it has no hand model) shows of it: read by `tinker eval`
    and the perception node's diagnostics, and ``deadband_m`` set by the node's ``calibration_deadband``."""

    camera: CameraOffset | None = None

    @property
    def camera_offset(self) -> np.ndarray | None:
        """The camera's error the hand measured this episode, m (base frame; None: no hand estimate yet)."""
        return None if self.camera is None else self.camera.offset

    @property
    def correction(self) -> np.ndarray | None:
        """What the estimates are corrected by: the ``camera_offset`` beyond the deadband (else None)."""
        return None if self.camera is None else self.camera.correction

    @property
    def hands(self) -> int:
        """This episode's frames with a hand estimate."""
        return 0 if self.camera is None else self.camera.count

    @property
    def deadband_m(self) -> float | None:
        """The calibration deadband, m (None: no hand model); the perception node sets it at run time."""
        return None if self.camera is None else self.camera.deadband_m

    @deadband_m.setter
    def deadband_m(self, value: float) -> None:
        if self.camera is not None:
            self.camera.deadband_m = float(value)
