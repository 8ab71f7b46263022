"""Dynamics parameters: one fixed set (`DynamicsParams`) and the ranges episodes draw from (`RandomizationRanges`).

A fixed set is loaded from a flat YAML file (``sim/config/nominal.yaml``, ``sim/config/dynamics/*.yaml``);
``tinker eval --dynamics FILE.yaml`` uses `DynamicsParams.load`. Ranges come from
``sim/config/randomization.yaml``: each key maps to ``[low, high]`` (uniform, inclusive) or to one
value (fixed). Unknown keys in either file are a `ConfigError` that names the key and the file.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tinker_core.config import read_yaml
from tinker_core.errors import ConfigError
from tinker_core.module import config_from_dict

CONFIG_DIR = Path(__file__).resolve().parent / "config"
NOMINAL_PATH = CONFIG_DIR / "nominal.yaml"
RANDOMIZATION_PATH = CONFIG_DIR / "randomization.yaml"
DYNAMICS_DIR = CONFIG_DIR / "dynamics"


@dataclass
class DynamicsParams:
    """The physical and sensing parameters in force during one episode (defaults = nominal)."""

    mass_scale: float = 1.0
    """multiplies every arm link's mass and inertia from the URDF"""
    friction: float = 1.0
    """lateral friction coefficient of the arm links, table and objects"""
    joint_damping_scale: float = 1.0
    """multiplies the URDF joint damping (0.5 N m s/rad per joint on the iiwa). Measured 2026-12-04
    (docs/sim2real/variants.md): up to 100x it barely slows the position motors (a 0.3 rad step is within 3 mrad
    after 0.25 s instead of 1 mrad); from about 120x PyBullet's 1/240 s integration goes unstable (the joints
    overshoot by radians, unsafe states from the first steps): a numerical failure, not a physical variant"""
    actuator_gain: float = 1.0
    """multiplies the position-motor gain (lower = slower, laggier tracking)"""
    action_latency_steps: int = 0
    """whole control periods between a command and the motors receiving it"""
    obs_noise_std: float = 0.0
    """std of Gaussian noise added to measured joint positions (rad) and velocities (rad/s)"""
    camera_shift_m: float = 0.0
    """distance the whole camera (eye and look-at point) is moved from its nominal pose, direction drawn per
    episode (so its sign carries no meaning); the camera is not re-aimed, so a shift moves where things appear"""
    camera_tilt_deg: float = 0.0
    """angle the camera's viewing direction is turned by, about an axis drawn per episode (sign: no meaning), deg"""
    camera_fov_delta_deg: float = 0.0
    """change of the camera's vertical field of view (intrinsics), degrees"""
    image_noise_std: float = 0.0
    """std of Gaussian noise added to each camera pixel, 0..255 units"""
    object_mass_scale: float = 1.0
    """multiplies the mass of task objects (ArmSort)"""
    object_size_scale: float = 1.0
    """multiplies the size of task objects (ArmSort)"""
    light_intensity: float = 1.0
    """multiplies the ambient and diffuse light of the camera image"""
    light_azimuth_deg: float = 45.0
    """azimuth of the light direction for the camera image, degrees"""
    target_bias_x_m: float = 0.0
    """error of the reach target's position as the robot is told it (a hand-eye calibration error), base x, m;
    the observation carries the biased target, success and reward use the true one"""
    target_bias_y_m: float = 0.0
    """the same error along base y, m"""
    target_bias_z_m: float = 0.0
    """the same error along base z, m"""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
                raise ConfigError(f"DynamicsParams.{f.name}: expected a finite number, got {v!r}")
        if isinstance(self.action_latency_steps, float) and not float(self.action_latency_steps).is_integer():
            raise ConfigError(f"DynamicsParams.action_latency_steps: expected a whole number of control periods, "
                              f"got {self.action_latency_steps}")
        self.action_latency_steps = int(self.action_latency_steps)
        for name in ("mass_scale", "actuator_gain", "object_mass_scale", "object_size_scale"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"DynamicsParams.{name}: expected > 0, got {getattr(self, name)}")
        for name in ("friction", "joint_damping_scale", "obs_noise_std", "light_intensity",
                     "action_latency_steps", "image_noise_std"):
            if getattr(self, name) < 0:
                raise ConfigError(f"DynamicsParams.{name}: expected >= 0, got {getattr(self, name)}")
        for f in fields(self):
            if f.name != "action_latency_steps":
                setattr(self, f.name, float(getattr(self, f.name)))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "DynamicsParams":
        """Read a fixed set from a flat YAML mapping; missing keys keep their nominal value."""
        return config_from_dict(cls, read_yaml(path), str(path))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "DynamicsParams") -> "DynamicsParams":
        return config_from_dict(cls, dict(data), where)

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def load_dynamics(path: str | os.PathLike) -> DynamicsParams:
    """`DynamicsParams.load` as a function (what ``tinker eval --dynamics`` calls)."""
    return DynamicsParams.load(path)


def resolve_dynamics(dynamics: "str | os.PathLike | DynamicsParams | Mapping | None") -> DynamicsParams | None:
    """A fixed set from a path, a mapping or an instance; None stays None."""
    if dynamics is None or isinstance(dynamics, DynamicsParams):
        return dynamics
    if isinstance(dynamics, Mapping):
        return DynamicsParams.from_dict(dynamics)
    if isinstance(dynamics, (str, os.PathLike)):
        return DynamicsParams.load(dynamics)
    raise ConfigError(f"dynamics: expected a YAML path, a mapping or DynamicsParams, got {type(dynamics).__name__}")


@dataclass
class RandomizationRanges:
    """Per-parameter ``(low, high)`` ranges; parameters not listed stay at their nominal value."""

    ranges: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    """parameter name -> (low, high), inclusive; low == high fixes the value"""
    source: str = "RandomizationRanges"
    """where the ranges came from (named in error messages)"""

    def __post_init__(self) -> None:
        known = {f.name for f in fields(DynamicsParams)}
        clean: dict[str, tuple[float, float]] = {}
        for key, value in self.ranges.items():
            if key not in known:
                raise ConfigError(f"{self.source}: unknown key {key!r} for DynamicsParams; known: {sorted(known)}")
            if isinstance(value, (list, tuple)):
                if len(value) != 2:
                    raise ConfigError(f"{self.source}: {key}: expected [low, high], got {value!r}")
                lo, hi = value
            else:
                lo = hi = value
            try:
                lo, hi = float(lo), float(hi)
            except (TypeError, ValueError):
                raise ConfigError(f"{self.source}: {key}: expected numbers, got {value!r}") from None
            if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
                raise ConfigError(f"{self.source}: {key}: expected finite low <= high, got [{lo}, {hi}]")
            clean[key] = (lo, hi)
        self.ranges = clean
        # Both ends must themselves be valid parameters (e.g. mass_scale > 0).
        DynamicsParams(**{k: v[0] for k, v in clean.items()})
        DynamicsParams(**{k: v[1] for k, v in clean.items()})

    @classmethod
    def load(cls, path: str | os.PathLike = RANDOMIZATION_PATH) -> "RandomizationRanges":
        return cls(read_yaml(path), source=str(path))

    def sample(self, rng: np.random.Generator) -> DynamicsParams:
        """One draw: uniform within each range (whole steps for action_latency_steps), in a fixed key order."""
        values: dict[str, float | int] = {}
        for f in fields(DynamicsParams):
            if f.name not in self.ranges:
                continue
            lo, hi = self.ranges[f.name]
            if f.name == "action_latency_steps":
                values[f.name] = int(rng.integers(math.ceil(lo), math.floor(hi) + 1))
            else:
                values[f.name] = float(rng.uniform(lo, hi))
        return DynamicsParams(**values)

    def violations(self, params: DynamicsParams) -> list[str]:
        """Names of the parameters of ``params`` outside these ranges (nominal for unlisted ones)."""
        nominal = DynamicsParams()
        out = []
        for f in fields(DynamicsParams):
            v = getattr(params, f.name)
            lo, hi = self.ranges.get(f.name, (getattr(nominal, f.name),) * 2)
            if not lo - 1e-9 <= v <= hi + 1e-9:
                out.append(f.name)
        return out


def resolve_ranges(randomize: "bool | str | os.PathLike | RandomizationRanges") -> RandomizationRanges | None:
    """False -> None; True -> the shipped default ranges; a path -> ranges from that YAML file."""
    if randomize is False or randomize is None:
        return None
    if randomize is True:
        return RandomizationRanges.load(RANDOMIZATION_PATH)
    if isinstance(randomize, RandomizationRanges):
        return randomize
    if isinstance(randomize, (str, os.PathLike)):
        return RandomizationRanges.load(randomize)
    raise ConfigError(f"randomize: expected a bool, a YAML path or RandomizationRanges, got {type(randomize).__name__}")
