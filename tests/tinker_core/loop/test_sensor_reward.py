"""The success sensor: the reach task's reward from the features (perceived target, FK of the measured joints).

Against the real PyBullet env: it equals the env's reward when perception's target is the true one, and differs
by exactly the perception's offset when it is not.
"""

from __future__ import annotations

import numpy as np
import pytest

from tinker_sim.arm_env import ArmEnv
from tinker_sim.registration import ENV_IDS
from tinker_sim.tasks.reach import success_rule
from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.kinematics import ForwardKinematics
from tinker_core.loop.sensor_reward import ReachSensor, SensorConfig, SensorOutcome

IMAGE_TERMS = ["target_pos", "target_minus_ee"]


@pytest.fixture(scope="module")
def env():
    e = ArmEnv(task="reach")  # nominal: no sensor noise, no calibration error (the state's target is the true one)
    yield e
    e.close()


def _sensor(env: ArmEnv) -> ReachSensor:
    cfg = SensorConfig(**success_rule(), time_limit_cycles=ENV_IDS["tinker/ArmReach-v0"]["max_episode_steps"])
    return ReachSensor(cfg, env.obs_terms, IMAGE_TERMS, ForwardKinematics.from_urdf(None, env.joint_names).ee_position)


def _slot(env: ArmEnv, name: str) -> tuple[slice, np.ndarray]:
    i = 0
    for t in env.obs_terms:
        if t["name"] == name:
            return slice(i, i + t["size"]), np.broadcast_to(np.asarray(t["scale"], float), (t["size"],))
        i += t["size"]
    raise KeyError(name)


def _at_target(env: ArmEnv) -> np.ndarray:
    """Put the arm's end effector on the task's true target; the env's observation of that state."""
    q0 = env.joint_state[0]
    q = env.robot.inverse_kinematics(env.task.target, q0, iterations=200)
    env.robot.reset_joints(q)
    env._read_state()
    return env._state_vector()


def test_the_rule_is_the_tasks(env):
    assert success_rule() == {"success_distance": env.task.success_distance, "success_bonus": env.task.success_bonus}


def test_equals_the_envs_reward_when_the_perceived_target_is_the_true_one(env):
    sensor = _sensor(env)
    seen_success = 0
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        rng = np.random.default_rng(seed)
        for _ in range(5):
            obs, reward, terminated, _, info = env.step(rng.uniform(-1, 1, 7).astype(np.float32))
            r = sensor.read(obs)
            assert r.reward == pytest.approx(reward, abs=1e-5), (seed, r, reward)
            assert r.success == info["is_success"] == terminated
            np.testing.assert_allclose(r.ee, env.ee_position, atol=1e-5)
        obs = _at_target(env)
        reward, success, _ = env.task.evaluate(env.ee_position)
        r = sensor.read(obs)
        assert r.reward == pytest.approx(reward, abs=1e-5) and r.success == success
        seen_success += success
    assert seen_success >= 5  # the success branch (bonus) is compared too, not only misses


def test_differs_by_the_perception_offset(env):
    sensor = _sensor(env)
    env.reset(seed=3)
    obs = _at_target(env)
    true_reward, true_success, info = env.task.evaluate(env.ee_position)
    assert true_success  # the arm is on the true target
    offset = np.array([0.08, -0.03, 0.0])  # the camera sees the target 8.5 cm beside where it is
    s, scale = _slot(env, "target_pos")
    shifted = obs.copy()
    shifted[s] += (offset * scale).astype(np.float32)
    r = sensor.read(shifted)
    expected_d = float(np.linalg.norm(env.task.target + offset - env.ee_position))
    assert r.distance == pytest.approx(expected_d, abs=1e-5)
    assert not r.success and r.reward == pytest.approx(-expected_d, abs=1e-5)
    # the env pays the bonus on the true target; the sensor pays -8.5 cm for the perceived one
    assert true_reward - r.reward == pytest.approx(1.0 - info["distance"] + expected_d, abs=1e-5)
    np.testing.assert_allclose(r.target, env.task.target + offset, atol=1e-5)


def test_refuses_a_target_that_does_not_come_from_the_camera(env):
    fk = ForwardKinematics.from_urdf(None, env.joint_names).ee_position
    cfg = SensorConfig(**success_rule(), time_limit_cycles=50)
    with pytest.raises(ConfigError, match="does not come from the camera"):
        ReachSensor(cfg, env.obs_terms, [], fk)
    with pytest.raises(ConfigError, match="no term 'goal'"):
        ReachSensor(SensorConfig(**success_rule(), time_limit_cycles=50, target_term="goal"), env.obs_terms, ["goal"], fk)
    with pytest.raises(ValidationError, match="30 values"):
        ReachSensor(cfg, env.obs_terms, IMAGE_TERMS, fk).read(np.zeros(29, np.float32))
    with pytest.raises(ConfigError, match="time_limit_cycles"):
        SensorConfig(**success_rule(), time_limit_cycles=0)


class _Fixed:
    """A sensor whose reading is the features' first value: success when it is 1."""

    def __init__(self, limit: int):
        self.config = SensorConfig(success_distance=0.05, success_bonus=1.0, time_limit_cycles=limit)

    def read(self, f, target=None):
        from tinker_core.loop.sensor_reward import SensorReading

        return SensorReading(float(f[0]), bool(f[0] == 1.0), 0.0, np.zeros(3), np.zeros(3))


def test_outcomes_pair_by_stamp_and_end_episodes_from_the_sensor():
    out = SensorOutcome(_Fixed(limit=4))  # type: ignore[arg-type]
    # counters first, then features; and the other way round: the outcome comes with the second half
    assert out.counters(10, 1, 0) is None
    o = out.features(10, np.array([-0.3]))
    assert (o.stamp, o.cycle, o.episode, o.reward, o.terminated, o.truncated) == (10, 1, 0, -0.3, False, False)
    assert out.features(20, np.array([1.0])) is None
    o = out.counters(20, 2, 0)
    assert (o.reward, o.terminated, o.truncated) == (1.0, True, False) and out.successes == 1
    # the episode ended on the sensor: its later states say so (a robot left at the goal is not reset)
    out.counters(30, 3, 0)
    assert out.features(30, np.array([-0.5])).terminated
    # a new episode: no end until the time limit (4 cycles from its first), then truncated, then held
    got = []
    for k, cycle in enumerate(range(4, 10)):
        out.counters(100 + k, cycle, 1)
        o = out.features(100 + k, np.array([-0.2]))
        got.append((o.terminated, o.truncated))
    assert got == [(False, False)] * 3 + [(False, True)] * 3
    assert out.successes == 1


@pytest.mark.parametrize("hold", [True, False])
def test_the_target_is_read_on_the_episodes_first_state_and_held(env, hold):
    """Near the target the arm hides it and a locator's estimate wanders; the held target does not."""
    fk = ForwardKinematics.from_urdf(None, env.joint_names).ee_position
    cfg = SensorConfig(**success_rule(), time_limit_cycles=50, hold_target=hold)
    out = SensorOutcome(ReachSensor(cfg, env.obs_terms, IMAGE_TERMS, fk))
    first, _ = env.reset(seed=4)  # the arm at its start pose: the target in view, perceived where it is
    out.counters(1, 0, 7)
    assert not out.features(1, first).terminated
    at = _at_target(env).copy()
    s, scale = _slot(env, "target_pos")
    at[s] += np.array([0.10, 0.0, 0.0]) * scale  # this frame's estimate 10 cm off, as when the arm hides the target
    out.counters(2, 1, 7)
    o = out.features(2, at)
    assert o.terminated is hold and out.successes == int(hold)
    assert out.last.distance == pytest.approx(np.linalg.norm(env.task.target - env.ee_position) if hold else 0.10, abs=2e-3)
    # the next episode reads its own target: this frame (10 cm off) is its first
    out.counters(3, 2, 8)
    o = out.features(3, at)
    assert not o.terminated and out.last.distance == pytest.approx(0.10, abs=2e-3)
