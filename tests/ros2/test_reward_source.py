"""The experience bridge's reward source (no graph is started): the simulator's, or the success sensor built from a
bundle, holding the episode's first target unless perception holds the estimate itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinker.reward_source import reward_source
from tinker_core.errors import ConfigError

VISION = Path(__file__).resolve().parents[2] / "pretrained" / "arm_reach_vision"


def test_the_sensor_reads_each_states_held_estimate_unless_told_to_hold_the_first():
    assert reward_source("sim") is None
    held = reward_source("sensors", str(VISION), hold_target=True)
    as_is = reward_source("sensors", str(VISION))  # perception holds the estimate by default
    assert held.sensor.config.hold_target is True and as_is.sensor.config.hold_target is False
    assert held.sensor.config.time_limit_cycles == as_is.sensor.config.time_limit_cycles == 50  # the env's own


def test_a_source_or_bundle_it_cannot_use_is_refused_with_why(tmp_path):
    with pytest.raises(ConfigError, match="expected one of"):
        reward_source("oracle")
    with pytest.raises(ConfigError, match="give its directory"):
        reward_source("sensors", "")
    with pytest.raises(ConfigError, match="does not exist"):
        reward_source("sensors", str(tmp_path))


def test_the_camera_sorter_gets_the_sorting_sensor_of_its_own_env():
    """No env named: the bundle's manifest says which task's rule applies (the camera sorter: ArmSort's, 200 cycles)."""
    sorter = Path(__file__).resolve().parents[2] / "pretrained"
    out = reward_source("sensors", str(sorter / "arm_sort_vision"))
    assert out.sensor.config.name == "sort_objects_seen_in_bins" and out.sensor.config.time_limit_cycles == 200
    with pytest.raises(ConfigError, match="needs objects the robot perceives"):
        reward_source("sensors", str(sorter / "arm_sort" / "bundle"))  # the state sorter is told its objects
    with pytest.raises(ConfigError, match="the sorter's objects move"):
        reward_source("sensors", str(sorter / "arm_sort_vision"), hold_target=True)
