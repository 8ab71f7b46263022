"""What the learner lets into its replay: a live transition's action within the algorithm's action bounds.

An action computed on the robot side in float32 (the exported actor's scaled tanh, a command turned back into an
action) can land a rounding error beyond its bound, e.g. -1.0000001 for -1; the update checks its batch against
the spec, so one such row would stop the learner. Within rounding of the bound (`Spec.clip_rounding`, `ROUNDING` of
the bound's range, the rule the exported policy's output goes through too) it is clipped to it; further out it is
refused here (counted, never trained on), naming the joint and the value.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tinker_core.errors import ValidationError
from tinker_core.transition import Transition


def admit_action(t: Transition, spec: Any) -> Transition:
    """``t`` with its action clipped to ``spec``'s bounds where it is beyond them by rounding only
    (`Spec.clip_rounding`); raises `ValidationError` where it is beyond them by more. A spec without float bounds
    (discrete) admits as is."""
    low, high = getattr(spec, "low", None), getattr(spec, "high", None)
    if low is None or high is None or np.dtype(getattr(spec, "dtype", np.float32)).kind != "f":
        return t
    a = np.asarray(t.action)
    if a.shape != tuple(spec.shape):
        return t  # the layout check is the replay's (it names the field)
    if a.dtype.kind != "f":
        a = a.astype(np.float64)
    admitted = spec.clip_rounding(a)
    low, high = np.broadcast_to(low, a.shape), np.broadcast_to(high, a.shape)
    bad = (admitted < low) | (admitted > high) | ~np.isfinite(admitted)
    if bad.any():
        i = int(np.flatnonzero(bad.reshape(-1))[0])
        raise ValidationError(f"transition.action[{i}]", f"a value in [{low.flat[i]:g}, {high.flat[i]:g}]",
                              f"{float(a.flat[i])!r}", "beyond its bound by more than rounding; the transition is refused")
    return t if admitted is a else dataclasses.replace(t, action=admitted)
