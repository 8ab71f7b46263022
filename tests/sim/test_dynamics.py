"""Dynamics: fixed sets from YAML, randomization ranges, and their effect on the simulated physics."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest

from tinker_sim.dynamics import (DYNAMICS_DIR, NOMINAL_PATH, RANDOMIZATION_PATH, DynamicsParams, RandomizationRanges,
                          load_dynamics)
from tinker_core.errors import ConfigError

REQUIRED = {"mass_scale", "friction", "joint_damping_scale", "actuator_gain", "action_latency_steps",
            "obs_noise_std", "camera_shift_m", "object_mass_scale"}


def test_required_keys_exist_and_nominal_file_equals_defaults():
    assert REQUIRED <= {f.name for f in fields(DynamicsParams)}
    assert DynamicsParams.load(NOMINAL_PATH) == DynamicsParams()
    assert load_dynamics(NOMINAL_PATH) == DynamicsParams()


def test_held_out_variants_lie_inside_the_ranges_and_the_shifted_and_far_ones_outside():
    ranges = RandomizationRanges.load(RANDOMIZATION_PATH)
    files = sorted(DYNAMICS_DIR.glob("*.yaml"))
    assert len(files) >= 4
    for f in files:
        params = DynamicsParams.load(f)
        assert params != DynamicsParams(), f
        if f.stem.startswith(("shifted", "far_")):
            assert ranges.violations(params), f"{f.name} should lie outside the training ranges"
        else:
            assert ranges.violations(params) == [], f"{f.name} outside ranges: {ranges.violations(params)}"


def test_unknown_key_names_the_key_and_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("mass_scale: 1.2\nmas_scale: 2.0\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml.*'mas_scale'"):
        DynamicsParams.load(bad)
    with pytest.raises(ConfigError, match=r"bad\.yaml.*'mas_scale'"):
        RandomizationRanges.load(bad)


def test_invalid_values_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"DynamicsParams.mass_scale: expected > 0, got -1"):
        DynamicsParams(mass_scale=-1.0)
    with pytest.raises(ConfigError, match="action_latency_steps: expected a whole number"):
        DynamicsParams(action_latency_steps=1.5)
    f = tmp_path / "r.yaml"
    f.write_text("friction: [1.2, 0.5]\n")
    with pytest.raises(ConfigError, match=r"r\.yaml: friction: expected finite low <= high"):
        RandomizationRanges.load(f)


def test_draws_stay_in_range_and_are_reproducible_from_the_seed():
    ranges = RandomizationRanges.load(RANDOMIZATION_PATH)
    draws = [ranges.sample(np.random.default_rng(s)) for s in range(200)]
    for d in draws:
        assert ranges.violations(d) == []
    assert ranges.sample(np.random.default_rng(5)) == draws[5]
    latencies = {d.action_latency_steps for d in draws}
    assert latencies == {0, 1}
    masses = np.array([d.mass_scale for d in draws])
    lo, hi = ranges.ranges["mass_scale"]
    assert masses.min() < lo + 0.1 * (hi - lo) and masses.max() > hi - 0.1 * (hi - lo)  # the range is covered


def test_env_draws_per_episode_reproducibly(make_env):
    env = make_env(randomize=True)
    ranges = RandomizationRanges.load(RANDOMIZATION_PATH)
    _, a = env.reset(seed=11)
    _, a2 = env.reset()  # next episode: a new draw
    _, b = env.reset(seed=11)
    assert a["dynamics"] == b["dynamics"]
    assert a["dynamics"] != a2["dynamics"]
    assert ranges.violations(DynamicsParams(**a["dynamics"])) == []
    # A fixed set overrides randomization.
    fixed = make_env(randomize=True, dynamics=DYNAMICS_DIR / "heavy_arm.yaml")
    _, c = fixed.reset(seed=11)
    assert c["dynamics"] == DynamicsParams.load(DYNAMICS_DIR / "heavy_arm.yaml").to_dict()


def _step_response(make_env, dynamics, steps=4):
    """Max joint error after each control period for the same 0.6 rad step command."""
    env = make_env(dynamics=dynamics)
    env.reset(seed=0)
    u = env.unwrapped
    q0, _ = u.joint_state
    target = q0 + 0.6
    errors = []
    for _ in range(steps):
        u.step_joint_target(target)
        q, _ = u.joint_state
        errors.append(np.abs(target - q).max())
    return np.array(errors)


@pytest.mark.parametrize("variant", ["heavy_arm", "low_gain", "laggy"])
def test_a_fixed_dynamics_file_makes_the_arm_lag_the_same_command(make_env, variant):
    nominal = _step_response(make_env, DynamicsParams())
    varied = _step_response(make_env, DYNAMICS_DIR / f"{variant}.yaml")
    assert nominal[-1] < 0.05  # nominal arm has nearly arrived after 0.2 s
    assert varied[1:].sum() > 1.3 * nominal[1:].sum(), (variant, nominal, varied)


def test_latency_delays_the_command_by_whole_control_periods(make_env):
    env = make_env(dynamics=DynamicsParams(action_latency_steps=2))
    env.reset(seed=0)
    u = env.unwrapped
    q0, _ = u.joint_state
    moved = []
    for _ in range(3):
        u.step_joint_target(q0 + 0.3)
        moved.append(np.abs(u.joint_state[0] - q0).max())
    assert moved[0] < 0.01 and moved[1] < 0.01 and moved[2] > 0.1


def test_observation_noise_perturbs_joint_terms_only(make_env):
    env = make_env(dynamics=DynamicsParams(obs_noise_std=0.05))
    obs, _ = env.reset(seed=0)
    u = env.unwrapped
    from tinker_sim.scripted import decode_terms

    terms = decode_terms(u.obs_terms, obs)
    q, _ = u.joint_state
    err = terms["joint_pos"] - q
    assert 0.005 < np.abs(err).mean() < 0.2
    np.testing.assert_allclose(terms["ee_pos"], u.ee_position, atol=1e-5)


def test_target_bias_moves_the_observed_target_but_success_uses_the_true_one(make_env):
    from tinker_sim.scripted import decode_terms

    bias = np.array([0.04, -0.03, 0.05])
    plain, biased = make_env(), make_env(dynamics=DynamicsParams(target_bias_x_m=0.04, target_bias_y_m=-0.03,
                                                                 target_bias_z_m=0.05))
    obs_p, _ = plain.reset(seed=3)
    obs_b, _ = biased.reset(seed=3)
    tp, tb = decode_terms(plain.unwrapped.obs_terms, obs_p), decode_terms(biased.unwrapped.obs_terms, obs_b)
    true_target = np.asarray(biased.unwrapped.task_state()["target"])
    np.testing.assert_allclose(tp["target_pos"], true_target, atol=1e-5)  # same seed, same real target
    np.testing.assert_allclose(tb["target_pos"], true_target + bias, atol=1e-5)
    np.testing.assert_allclose(tb["target_minus_ee"], tp["target_minus_ee"] + bias, atol=1e-5)
    # reaching where the robot is told the target is does not succeed: success is judged on the real target
    task = biased.unwrapped.task
    assert task.evaluate(true_target + bias)[1] is False
    assert task.evaluate(true_target)[1] is True
