"""safety: the SafetyWrapper, the last module before the actuators (used in simulation and on the robot)."""

from tinker_safety.config import DEFAULT_CONFIG_PATH, SafetyConfig, ScenePrimitive, load_safety_config
from tinker_safety.limits import JointLimits, default_urdf
from tinker_safety.safety_wrapper import SafetyWrapper
from tinker_safety.status import EstopCause, Outcome, SafetyStatus
from tinker_safety.watchdog import Watchdog, WatchdogVerdict

__all__ = [
    "DEFAULT_CONFIG_PATH", "EstopCause", "JointLimits", "Outcome", "SafetyConfig", "SafetyStatus", "SafetyWrapper",
    "ScenePrimitive", "Watchdog", "WatchdogVerdict", "default_urdf", "load_safety_config",
]
