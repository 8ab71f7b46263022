"""Which dynamics keys act on which task and policy: the declarations checked against the physics, and the refusals."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pybullet as p
import pytest

from tinker_sim.dynamics import DYNAMICS_DIR, NOMINAL_PATH, DynamicsParams
from tinker_sim.dynamics_check import ARM_KEYS, CAMERA_KEYS, PolicyInputs, check_dynamics_act, inert_keys
from tinker_core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
FAR = {"mass_scale": 2.0, "friction": 0.2, "joint_damping_scale": 5.0, "actuator_gain": 0.4, "action_latency_steps": 2,
       "obs_noise_std": 0.05, "camera_shift_m": 0.1, "camera_tilt_deg": 5.0, "camera_fov_delta_deg": 8.0,
       "image_noise_std": 10.0, "object_mass_scale": 3.0, "object_size_scale": 1.3, "light_intensity": 0.4,
       "light_azimuth_deg": 170.0, "target_bias_x_m": 0.05, "target_bias_y_m": -0.05, "target_bias_z_m": 0.05}
"""a value far from nominal for every key"""
STATE, CAMERA = PolicyInputs(camera=False), PolicyInputs(camera=True)
VISION = PolicyInputs(camera=True, image_terms=("target_pos", "target_minus_ee"))


def test_every_key_has_a_far_value_and_a_home():
    names = {f.name for f in fields(DynamicsParams)}
    assert set(FAR) == names
    from tinker_sim.tasks import TASKS

    declared = set(ARM_KEYS) | set(CAMERA_KEYS) | {k for t in TASKS.values() for k in t.dynamics_keys}
    assert declared == names, f"keys no one declares: {names - declared}"


def _probe(env, dynamics: DynamicsParams, steps: int = 12) -> list[bytes]:
    """What a run exposes, byte for byte: observations (image too), rewards, and the physical properties of the
    task's bodies (friction, mass), for one seeded episode under a fixed action sequence."""
    u = env.unwrapped
    obs, _ = env.reset(seed=3, options={"dynamics": dynamics})
    rng = np.random.default_rng(0)
    out = []

    def grab(o):
        parts = [o["state"], o["image"]] if isinstance(o, dict) else [o]
        out.extend(np.ascontiguousarray(x).tobytes() for x in parts)

    grab(obs)
    bodies = list(getattr(u.task, "objects", [])) + [b for b, _ in u.task._fixtures]
    for b in bodies:
        out.append(repr(p.getDynamicsInfo(b, -1, physicsClientId=u.world.client)[:2]).encode())
    for _ in range(steps):
        obs, r, *_ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
        grab(obs)
        out.append(np.float64(r).tobytes())
    return out


@pytest.mark.parametrize("env_id,inputs", [("tinker/ArmReach-v0", STATE), ("tinker/ArmReach-v0", CAMERA),
                                           ("tinker/ArmSort-v0", STATE)], ids=["reach-state", "reach-camera", "sort-state"])
def test_a_key_is_refused_exactly_when_it_changes_nothing(make_env, env_id, inputs):
    """The declarations against the physics: every key declared inert leaves the run byte-identical to nominal,
    every key declared acting changes it."""
    env = make_env(env_id, camera=inputs.camera, image_size=32)
    nominal = _probe(env, DynamicsParams())
    assert _probe(env, DynamicsParams()) == nominal  # the probe itself is deterministic
    for key, value in FAR.items():
        params = DynamicsParams(**{key: value})
        inert = key in inert_keys(params, env_id, inputs)
        same = _probe(env, params) == nominal
        assert inert == same, f"{env_id} {inputs}: {key}={value} declared {'inert' if inert else 'acting'}, " \
                              f"but the run {'did not change' if same else 'changed'}"


def test_the_refusal_names_the_key_the_env_the_policy_and_what_to_do():
    with pytest.raises(ConfigError) as e:
        check_dynamics_act(DynamicsParams(camera_shift_m=0.08), "tinker/ArmReach-v0", STATE,
                           source="shifted_camera.yaml", policy="the policy pretrained/arm_reach/bundle")
    msg = str(e.value)
    assert msg.startswith("shifted_camera.yaml: 1 key(s) cannot act on tinker/ArmReach-v0 with the policy "
                          "pretrained/arm_reach/bundle")
    assert "camera_shift_m = 0.08: the policy's observation has no camera image (a state-only policy)" in msg
    assert "remove them from shifted_camera.yaml (nominal: camera_shift_m=0.0), or choose an env and policy" in msg


@pytest.mark.parametrize("env_id,inputs,params,expected", [
    ("tinker/ArmReach-v0", VISION, {"friction": 0.3},
     "friction = 0.3: friction acts only through contact with task bodies (objects, a table, bins; an arm link on "
     "the ground is an unsafe state, not the task), and the reach task has none"),
    ("tinker/ArmReach-v0", STATE, {"object_mass_scale": 2.0},
     "object_mass_scale = 2.0: it scales the task's objects, and the reach task has none"),
    ("tinker/ArmSort-v0", STATE, {"target_bias_x_m": 0.04},
     "target_bias_x_m = 0.04: it biases the reach target the robot is told, and the sort task has none"),
    ("tinker/ArmReach-v0", VISION, {"target_bias_z_m": 0.05},
     "target_bias_z_m = 0.05: the policy computes target_pos, target_minus_ee from the camera image (its "
     "image_terms), so it never reads the told target; a camera calibration error is camera_shift_m or camera_tilt_deg"),
    ("tinker/ArmSort-v0", STATE, {"light_azimuth_deg": 10.0},
     "light_azimuth_deg = 10.0: the policy's observation has no camera image"),
])
def test_each_refusal_says_why(env_id, inputs, params, expected):
    with pytest.raises(ConfigError, match="cannot act on") as e:
        check_dynamics_act(DynamicsParams(**params), env_id, inputs)
    assert expected in str(e.value)


def test_every_key_a_policy_reads_is_accepted_and_nominal_values_are_never_refused():
    nominal = DynamicsParams.load(NOMINAL_PATH)  # lists every key, each at its nominal value
    for env_id in ("tinker/ArmReach-v0", "tinker/ArmSort-v0"):
        for inputs in (STATE, CAMERA, VISION):
            check_dynamics_act(nominal, env_id, inputs)
    check_dynamics_act(DynamicsParams(**{k: FAR[k] for k in ARM_KEYS}), "tinker/ArmSort-v0", STATE)
    check_dynamics_act(DynamicsParams(**{k: FAR[k] for k in CAMERA_KEYS + ARM_KEYS}), "tinker/ArmReach-v0", VISION)
    check_dynamics_act(DynamicsParams(target_bias_x_m=0.04, friction=1.0), "tinker/ArmReach-v0", STATE)
    check_dynamics_act(DynamicsParams(friction=0.1, object_mass_scale=2.0), "tinker/ArmSort-v0", STATE)


def test_a_shift_in_a_random_direction_is_not_refused_for_its_sign(make_env):
    """camera_shift_m and camera_tilt_deg move the camera in a direction drawn per episode: -x is the same variant
    as +x. Accepted where the camera acts; where it does not, refused for that, never for the sign."""
    for key in ("camera_shift_m", "camera_tilt_deg"):
        for value in (-0.08, 0.08):
            check_dynamics_act(DynamicsParams(**{key: value}), "tinker/ArmReach-v0", VISION)
            with pytest.raises(ConfigError) as e:
                check_dynamics_act(DynamicsParams(**{key: value}), "tinker/ArmReach-v0", STATE)
            assert "no camera image" in str(e.value) and "sign" not in str(e.value) and "negative" not in str(e.value)
    # and a negative shift really moves the camera, by its magnitude
    env = make_env(camera=True, image_size=32)
    for value in (-0.08, 0.08):
        env.reset(seed=5, options={"dynamics": DynamicsParams(camera_shift_m=value)})
        moved = np.linalg.norm(env.unwrapped.camera.eye - env.unwrapped.camera.eyes0[0])
        assert moved == pytest.approx(0.08)


def _shipped_inputs() -> dict[str, tuple[str, PolicyInputs]]:
    """The shipped bundles' env and what they read, from their manifests."""
    out = {}
    for name, path in (("arm_reach", "pretrained/arm_reach/bundle"), ("arm_reach_vision", "pretrained/arm_reach_vision"),
                       ("arm_sort", "pretrained/arm_sort/bundle")):
        m = json.loads((REPO / path / "manifest.json").read_text())
        camera = "image" in json.dumps(m["obs_spec"])
        out[name] = (m["env_id"], PolicyInputs(camera=camera, image_terms=tuple(m.get("image_terms") or ())))
    assert out["arm_reach_vision"][1] == VISION and out["arm_reach"][1] == STATE == out["arm_sort"][1]
    return out


def test_every_shipped_variant_acts_whole_on_a_shipped_policy():
    shipped = _shipped_inputs()
    for f in sorted(DYNAMICS_DIR.glob("*.yaml")):
        params = DynamicsParams.load(f)
        fits = [n for n, (env_id, inputs) in shipped.items() if not inert_keys(params, env_id, inputs)]
        assert fits, f"{f.name}: some key is inert on every shipped policy: " + str(
            {n: sorted(inert_keys(params, e, i)) for n, (e, i) in shipped.items()})
