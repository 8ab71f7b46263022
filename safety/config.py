"""`SafetyConfig`: margins, rate limits, workspace, known scene, watchdog and start-up settings.

Joint limits themselves come from the URDF (`tinker_safety.limits`); this file holds only what the URDF
cannot say. ``safety/config/kuka_iiwa.yaml`` is the one YAML for the default robot, read by the
ROS 2 safety node and by simulation training alike::

    config = load_safety_config()                     # the shipped kuka_iiwa.yaml
    config = load_config(SafetyConfig, "my_robot.yaml")
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_core.config import load_config
from tinker_core.errors import ConfigError
from tinker_core.module import config_from_dict

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent / "config" / "kuka_iiwa.yaml"

SHAPES = {"box": 3, "sphere": 1, "cylinder": 2, "plane": 0}
"""scene primitive shapes and how many ``size`` values each takes"""


@dataclass
class ScenePrimitive:
    """One object of the known scene, fixed in the robot's base frame."""

    name: str
    """label used in collision reasons, e.g. ``table``"""
    shape: str
    """``box``, ``sphere``, ``cylinder`` or ``plane``"""
    size: list[float] = field(default_factory=list)
    """box: full lengths [x, y, z] m; sphere: [radius] m; cylinder: [radius, length] m; plane: [] (its +z is the normal)"""
    position: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    """centre of the object in the base frame, m"""
    rpy: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    """orientation as roll, pitch, yaw about the base axes, rad"""

    def __post_init__(self) -> None:
        where = f"ScenePrimitive {self.name!r}"
        if self.shape not in SHAPES:
            raise ConfigError(f"{where}.shape: expected one of {sorted(SHAPES)}, got {self.shape!r}")
        self.size = _floats(self.size, f"{where}.size", SHAPES[self.shape])
        if any(s <= 0 for s in self.size):
            raise ConfigError(f"{where}.size: expected positive lengths in m, got {self.size}")
        self.position = _floats(self.position, f"{where}.position", 3)
        self.rpy = _floats(self.rpy, f"{where}.rpy", 3)


@dataclass
class SafetyConfig:
    """What the SafetyWrapper enforces beyond the URDF's joint limits."""

    position_margin: float = 0.05
    """distance kept from each URDF position limit, rad (or m for prismatic joints)"""
    velocity_scale: float = 0.5
    """largest commanded speed as a fraction of the URDF velocity limit"""
    accel_limit: float | list[float] | None = 20.0
    """largest speed-up per joint, rad/s² (one value or one per joint); slowing to a stop is always allowed; None disables"""
    limit_from: str = "command"
    """where the speed and acceleration limits act from. ``measured``: a command's step from the measured position,
    its speed-up from the measured speed. ``command``: on the command stream, from the last command sent and its
    speed (as ros2_control's joint limiters do), every command also kept within one speed-limit step of the
    measured position (the bound ``measured`` gives). For a robot with command latency: from the measured state, a
    command that acts L periods later cannot drive a joint faster than about accel_limit * control_period / L
    (7 periods cap the reach arm near 0.2 rad/s: docs/sim2real/variants.md)"""
    control_period: float = 0.05
    """time between two commands, s; turns speed and acceleration limits into a step per command"""
    state_tolerance: float = 0.1
    """a measured position further than this outside the URDF limits is an invalid state, rad"""
    state_max_age: float = 0.5
    """a state whose stamp (when one is given) is older than this on the stamp clock is refused, s"""
    state_future_tolerance: float = 0.05
    """a state stamped further than this ahead of the stamp clock is refused, s"""
    state_jump_scale: float | None = 1.2
    """a joint moving faster than this multiple of its URDF velocity limit between two states is implausible: the
    state is refused (time on the monotonic clock, at least one control period); None disables the check"""
    state_jump_slack: float = 0.01
    """added to the largest plausible move between two states (measurement noise), rad"""
    workspace_min: list[float] | None = None
    """lower corner [x, y, z] of the box the end effector must stay in, base frame, m; None disables"""
    workspace_max: list[float] | None = None
    """upper corner [x, y, z] of that box, m"""
    ee_link: str = ""
    """link whose frame origin is the end effector; empty: the link moved by the last commanded joint"""
    collision_check: bool = True
    """check self-collision and the known scene at each commanded configuration (PyBullet, private client)"""
    collision_margin: float = 0.02
    """smallest allowed distance between robot links, or a link and the scene, m"""
    collision_step: float = 0.05
    """largest joint change between two collision checks along one command's step, rad"""
    scene: list[ScenePrimitive] = field(default_factory=list)
    """the known scene: fixed primitives (table, walls, fixtures) in the base frame"""
    self_collision_ignore: list[list[str]] = field(default_factory=list)
    """link pairs never checked against each other (besides parent/child), e.g. whose hulls always touch"""
    watchdog_timeout: float = 0.05
    """an action older than this when the loop ticks is stale: the output holds, s"""
    watchdog_misses_to_estop: int = 3
    """consecutive stale ticks that latch the e-stop (cause ``watchdog``)"""
    invalid_inputs_to_estop: int = 3
    """consecutive invalid actions or states that latch the e-stop (cause ``invalid_input``)"""
    start_max_gap: float = 1.0
    """at start, after reset or e-stop release: refuse (hold) a first target further than this from the measured pose, rad"""
    start_velocity_scale: float = 0.25
    """speed during the start ramp as a fraction of the URDF velocity limit, until the target is reached"""

    def __post_init__(self) -> None:
        for name in ("velocity_scale", "control_period", "collision_margin", "collision_step",
                     "watchdog_timeout", "start_max_gap", "start_velocity_scale"):
            _positive(self, name)
        for name in ("state_max_age", "state_future_tolerance"):
            _positive(self, name)
        if self.limit_from not in ("measured", "command"):
            raise ConfigError(f"SafetyConfig.limit_from: expected 'measured' or 'command', got {self.limit_from!r}")
        if self.state_jump_scale is not None:
            v = self.state_jump_scale
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 1.0):
                raise ConfigError(f"SafetyConfig.state_jump_scale: expected a number >= 1 (a multiple of the URDF "
                                  f"velocity limit) or None, got {v!r}")
        for name in ("position_margin", "state_tolerance", "state_jump_slack"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
                raise ConfigError(f"SafetyConfig.{name}: expected a finite number >= 0, got {v!r}")
        if self.velocity_scale > 1.0 or self.start_velocity_scale > 1.0:
            raise ConfigError(f"SafetyConfig: velocity_scale and start_velocity_scale must be <= 1 (a fraction of the "
                              f"URDF limit), got {self.velocity_scale} and {self.start_velocity_scale}")
        if self.accel_limit is not None:
            acc = [self.accel_limit] if isinstance(self.accel_limit, (int, float)) else self.accel_limit
            vals = _floats(acc, "SafetyConfig.accel_limit", None)
            if not vals or any(a <= 0 for a in vals):
                raise ConfigError(f"SafetyConfig.accel_limit: expected values > 0 rad/s², got {self.accel_limit!r}")
            self.accel_limit = vals[0] if isinstance(self.accel_limit, (int, float)) else vals
        if (self.workspace_min is None) != (self.workspace_max is None):
            raise ConfigError("SafetyConfig: workspace_min and workspace_max must be given together, "
                              f"got {self.workspace_min!r} and {self.workspace_max!r}")
        if self.workspace_min is not None:
            self.workspace_min = _floats(self.workspace_min, "SafetyConfig.workspace_min", 3)
            self.workspace_max = _floats(self.workspace_max, "SafetyConfig.workspace_max", 3)
            if any(lo >= hi for lo, hi in zip(self.workspace_min, self.workspace_max)):
                raise ConfigError(f"SafetyConfig: expected workspace_min < workspace_max on every axis, "
                                  f"got {self.workspace_min} and {self.workspace_max}")
        if not isinstance(self.collision_check, bool):
            raise ConfigError(f"SafetyConfig.collision_check: expected true or false, got {self.collision_check!r}")
        self.scene = [s if isinstance(s, ScenePrimitive) else _primitive(s, i) for i, s in enumerate(self.scene or [])]
        names = [s.name for s in self.scene]
        if len(set(names)) != len(names):
            raise ConfigError(f"SafetyConfig.scene: expected unique names, got {names}")
        pairs = []
        for p in self.self_collision_ignore or []:
            if not (isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, str) for x in p)):
                raise ConfigError(f"SafetyConfig.self_collision_ignore: expected pairs of link names, got {p!r}")
            pairs.append([p[0], p[1]])
        self.self_collision_ignore = pairs
        for name in ("watchdog_misses_to_estop", "invalid_inputs_to_estop"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ConfigError(f"SafetyConfig.{name}: expected an integer >= 1, got {v!r}")

    @property
    def workspace_enabled(self) -> bool:
        return self.workspace_min is not None


def load_safety_config(source: str | os.PathLike | dict[str, Any] | None = DEFAULT_CONFIG_PATH) -> SafetyConfig:
    """`SafetyConfig` from a YAML file or mapping; by default the shipped ``kuka_iiwa.yaml``."""
    return load_config(SafetyConfig, source)


def _primitive(d: Any, i: int) -> ScenePrimitive:
    if not isinstance(d, dict):
        raise ConfigError(f"SafetyConfig.scene[{i}]: expected a mapping (name, shape, size, position, rpy), "
                          f"got {type(d).__name__}")
    return config_from_dict(ScenePrimitive, d, f"SafetyConfig.scene[{i}]")


def _positive(obj: Any, name: str) -> None:
    v = getattr(obj, name)
    if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0):
        raise ConfigError(f"{type(obj).__name__}.{name}: expected a finite number > 0, got {v!r}")


def _floats(values: Any, where: str, n: int | None) -> list[float]:
    """A list of finite floats (of length ``n`` if given), or a `ConfigError` naming ``where``."""
    if not isinstance(values, (list, tuple)):
        raise ConfigError(f"{where}: expected a list of numbers, got {values!r}")
    if n is not None and len(values) != n:
        raise ConfigError(f"{where}: expected {n} numbers, got {len(values)}: {list(values)}")
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"{where}: expected finite numbers, got {list(values)}")
        out.append(float(v))
    return out
