"""`TargetSight`: does a frame show the target in every view (no ROS)."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.target_sight import TargetSight


def test_the_sight_needs_the_target_in_every_view():
    img = np.full((8, 16, 3), 120, np.uint8)  # two grey 8x8 views
    sight = TargetSight()
    assert not sight(img)
    img[3, 2] = (30, 200, 30)  # green in the first view only
    assert not sight(img)
    img[5, 12] = (30, 200, 30)
    assert sight(img)
    img[5, 12] = (200, 200, 200)  # white is not green
    assert not sight(img)
    with pytest.raises(ValidationError, match="square views side by side"):
        sight(np.zeros((8, 12, 3), np.uint8))
    with pytest.raises(ConfigError, match="threshold"):
        TargetSight(threshold=1.5)
