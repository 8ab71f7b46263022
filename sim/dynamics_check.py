"""Which dynamics keys can act on a task and a policy, and the refusal of those that cannot.

A fixed dynamics set (``tinker eval --dynamics``, ``tinker benchmark sim2real``, the demo's robot) may only
move keys away from nominal that change something the chosen policy sees or the task scores; a key nothing
reads would give results identical to nominal under a name that promises otherwise. Who reads what (each
checked in the code it names):

- the arm, in every task: ``mass_scale``, ``joint_damping_scale``, ``actuator_gain`` (`ArmRobot.apply_dynamics`),
  ``action_latency_steps`` (`ArmEnv.step_joint_target`), ``obs_noise_std`` (`ArmEnv._state_vector`: joint
  positions and velocities);
- the camera image, only when the policy's observation has one: `CAMERA_KEYS` (`Camera.set_params`);
- the task, per `Task.dynamics_keys`: the sorter's table, bins and objects (``friction``, ``object_*``), the
  reach target as the robot is told it (``target_bias_*``). The arm links' friction acts only through contact,
  and in the reach task the only body the arm can touch is the ground, an unsafe state: there it is refused.

A policy that computes every one of the task's `Task.told_terms` from the image (a vision bundle's manifest
``image_terms``) never reads the told target, so ``target_bias_*`` is refused for it. Signs are not judged here:
a camera shift or tilt is applied in a direction drawn per episode, so ``-0.08`` and ``0.08`` are the same
variant and both are accepted where the camera acts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from tinker_sim.dynamics import DynamicsParams
from tinker_sim.registration import ENV_IDS
from tinker_sim.tasks import TASKS, Task
from tinker_core.errors import ConfigError

ARM_KEYS = ("mass_scale", "joint_damping_scale", "actuator_gain", "action_latency_steps", "obs_noise_std")
"""keys that act on the arm itself, in every task"""
CAMERA_KEYS = ("camera_shift_m", "camera_tilt_deg", "camera_fov_delta_deg", "image_noise_std", "light_intensity",
               "light_azimuth_deg")
"""keys that act only on the camera image"""
NEEDS = {
    "friction": ("friction acts only through contact with task bodies (objects, a table, bins; an arm link on the "
                 "ground is an unsafe state, not the task)"),
    "object_mass_scale": "it scales the task's objects",
    "object_size_scale": "it scales the task's objects",
    "target_bias_x_m": "it biases the reach target the robot is told",
    "target_bias_y_m": "it biases the reach target the robot is told",
    "target_bias_z_m": "it biases the reach target the robot is told",
}
"""what a task key needs, for the refusal's message"""


@dataclass(frozen=True)
class PolicyInputs:
    """What a policy reads: whether its observation has a camera image, and which state terms it computes from it."""

    camera: bool = False
    """the observation has an ``image`` (the env renders the camera)"""
    image_terms: tuple[str, ...] = ()
    """state terms the policy's own model computes from the image (a bundle manifest's ``image_terms``)"""


def task_of(env: str | type[Task]) -> type[Task]:
    """The task class of an arm env id (``tinker/ArmSort-v0``), a task name (``sort``) or a Task class."""
    if isinstance(env, type) and issubclass(env, Task):
        return env
    name = ENV_IDS.get(env, {}).get("kwargs", {}).get("task", env)
    if name not in TASKS:
        raise ConfigError(f"dynamics check: {env!r} is not an arm task; expected one of {sorted(ENV_IDS)} "
                          f"or a task name in {sorted(TASKS)}")
    return TASKS[name]


def inert_keys(params: DynamicsParams, env: str | type[Task], inputs: PolicyInputs) -> dict[str, str]:
    """Keys of ``params`` away from nominal that cannot act on ``env`` with a policy reading ``inputs``,
    each with why (empty: every changed key acts)."""
    task = task_of(env)
    nominal = DynamicsParams()
    out: dict[str, str] = {}
    for f in fields(DynamicsParams):
        if getattr(params, f.name) == getattr(nominal, f.name) or f.name in ARM_KEYS:
            continue
        if f.name in CAMERA_KEYS:
            if not inputs.camera:
                out[f.name] = ("the policy's observation has no camera image (a state-only policy), so the camera's "
                               "pose, intrinsics, light and pixel noise change nothing it reads")
        elif f.name not in task.dynamics_keys:
            out[f.name] = f"{NEEDS.get(f.name, 'nothing reads it')}, and the {task.name} task has none"
        elif task.told_terms and set(task.told_terms) <= set(inputs.image_terms):
            out[f.name] = (f"the policy computes {', '.join(task.told_terms)} from the camera image (its image_terms), "
                           "so it never reads the told target; a camera calibration error is camera_shift_m or "
                           "camera_tilt_deg")
    return out


def check_dynamics_act(params: DynamicsParams, env: str | type[Task], inputs: PolicyInputs, *, source: str = "dynamics",
                       policy: str = "the policy") -> None:
    """Raise `ConfigError` naming every key of ``params`` (from ``source``) that cannot act on ``env`` with
    ``policy``, why, and what to do; return quietly when all act."""
    bad = inert_keys(params, env, inputs)
    if not bad:
        return
    task = task_of(env)
    env_name = env if isinstance(env, str) and env in ENV_IDS else f"the {task.name} task"
    lines = [f"  {k} = {getattr(params, k)}: {why}" for k, why in bad.items()]
    nominal = DynamicsParams()
    raise ConfigError(
        f"{source}: {len(bad)} key(s) cannot act on {env_name} with {policy} (they would change "
        f"nothing, yet the results would be reported under them):\n" + "\n".join(lines) + "\n"
        f"remove them from {source} (nominal: " + ", ".join(f"{k}={getattr(nominal, k)}" for k in bad) + "), "
        "or choose an env and policy they act on")

