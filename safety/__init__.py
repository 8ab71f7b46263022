"""safety: the SafetyWrapper, the last module before the actuators (used in simulation and on the robot)."""

from safety.config import DEFAULT_CONFIG_PATH, SafetyConfig, ScenePrimitive, load_safety_config
from safety.limits import JointLimits, default_urdf
from safety.safety_wrapper import SafetyWrapper
from safety.status import EstopCause, Outcome, SafetyStatus
from safety.watchdog import Watchdog, WatchdogVerdict

__all__ = [
    "DEFAULT_CONFIG_PATH", "EstopCause", "JointLimits", "Outcome", "SafetyConfig", "SafetyStatus", "SafetyWrapper",
    "ScenePrimitive", "Watchdog", "WatchdogVerdict", "default_urdf", "load_safety_config",
]
