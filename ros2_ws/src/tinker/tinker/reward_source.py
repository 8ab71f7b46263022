"""Where the experience bridge's rewards come from: the simulator's ``task`` topic, or a success sensor.

``reward_source: sim``: the simulated robot's reward and success (its true target): what the demo always used,
an oracle a real robot does not have. ``reward_source: sensors``: `tinker_core.loop.sensor_reward` computes
them from the cycle's features (the target the camera found, the measured joints through the URDF's forward
kinematics) with the env's own success rule and time limit; for the sorter `tinker_core.loop.sort_sensor` (the
objects the camera sees, in their bins or not, and the suction cup's vacuum sensor) with the task's reward rule.
The ``task`` topic then gives only the state's cycle and episode counters (a real driver gives them with its
state: the simulated one in the JointState's ``frame_id``).
"""

from __future__ import annotations

from pathlib import Path

from tinker_core.errors import ConfigError
from tinker_core.loop.sensor_reward import ReachSensor, SensorConfig, SensorOutcome

SOURCES = ("sim", "sensors")
"""the bridge's ``reward_source`` values"""


def sensor_outcome(bundle: str, env_id: str = "", urdf: str = "",
                   hold_target: bool = False) -> SensorOutcome:
    """The success sensor for the features of ``bundle`` (its terms and image_terms) on ``env_id``'s task ('': the
    bundle's own env, its manifest's env_id); ``hold_target``: `SensorConfig.hold_target`."""
    from tinker_deploy.manifest import Manifest
    from tinker_core.loop.kinematics import ForwardKinematics
    from tinker_sim.registration import ENV_IDS
    from tinker_sim.tasks.reach import success_rule

    if not bundle:
        raise ConfigError("experience_bridge.sensor_bundle: reward_source 'sensors' reads the features of a bundle; "
                          "give its directory (the perception node's bundle)")
    path = Path(bundle) / "manifest.json"
    if not path.is_file():
        raise ConfigError(f"experience_bridge.sensor_bundle: {path} does not exist")
    m = Manifest.from_json(path.read_text(), str(path))
    env_id = env_id or m.env_id or (m.env or {}).get("id") or ""
    reg = ENV_IDS.get(env_id)
    task = (reg or {}).get("kwargs", {}).get("task")
    if task not in ("reach", "sort"):
        raise ConfigError(f"experience_bridge.sensor_env: the success sensors are written for the reach and sort "
                          f"tasks (tinker/ArmReach-v0, tinker/ArmSort-v0); {env_id!r} has none")
    fk = ForwardKinematics.from_urdf(urdf or None, m.joint_names).ee_position
    task_kwargs = reg["kwargs"].get("task_kwargs")
    if task == "sort":
        from tinker_core.loop.sort_sensor import SortSensor, SortSensorConfig
        from tinker_sim.tasks.sort import sensor_rule

        if hold_target:
            raise ConfigError("experience_bridge.sensor_hold_target: the sorter's objects move; nothing is held")
        return SensorOutcome(SortSensor(SortSensorConfig(time_limit_cycles=int(reg["max_episode_steps"]),
                                                         **sensor_rule(task_kwargs)), m.obs_terms, m.image_terms, fk))
    cfg = SensorConfig(**success_rule(task_kwargs),
                       time_limit_cycles=int(reg["max_episode_steps"]), hold_target=bool(hold_target))
    return SensorOutcome(ReachSensor(cfg, m.obs_terms, m.image_terms, fk))


def reward_source(source: str, bundle: str = "", env_id: str = "", urdf: str = "",
                  hold_target: bool = False) -> SensorOutcome | None:
    """The bridge's rewards for ``reward_source`` ``source``: None for the simulator's, the success sensor
    (`sensor_outcome` of ``bundle``) for ``sensors``."""
    if source not in SOURCES:
        raise ConfigError(f"experience_bridge.reward_source: expected one of {list(SOURCES)}, got {source!r}")
    return None if source == "sim" else sensor_outcome(bundle, env_id, urdf, hold_target)
