"""The sorting success sensor: the sort task's reward from the features (objects seen in their bins, the suction
cup's vacuum state, FK of the measured joints).

Against the real PyBullet sorter driven by the scripted expert: where perception sees what the simulator has (the
state observation's object terms, taken here as perceived), every state's reward and success equal the env's; an
object perception misplaces changes them by what it got wrong.
"""

from __future__ import annotations

import numpy as np
import pytest

from tinker_sim.arm_env import ArmEnv
from tinker_sim.registration import ENV_IDS
from tinker_sim.scripted import ScriptedSortController
from tinker_sim.tasks.sort import sensor_rule
from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.kinematics import ForwardKinematics
from tinker_core.loop.observation import ObservationAssembly
from tinker_core.loop.sensor_reward import SensorOutcome
from tinker_core.loop.sort_sensor import SortSensor, SortSensorConfig

LIMIT = ENV_IDS["tinker/ArmSort-v0"]["max_episode_steps"]


def _sensor(env: ArmEnv, image_terms=None, settle: int | None = None) -> SortSensor:
    seen = image_terms if image_terms is not None else [t["name"] for t in env.obs_terms if t["name"].startswith("obj")]
    rule = {**sensor_rule(), **({} if settle is None else {"settle_cycles": settle})}
    return SortSensor(SortSensorConfig(time_limit_cycles=LIMIT, **rule), env.obs_terms, seen,
                      ForwardKinematics.from_urdf(None, env.joint_names).ee_position)


@pytest.fixture(scope="module")
def env():
    e = ArmEnv(task="sort")  # nominal: no sensor noise
    yield e
    e.close()


def test_the_sensor_gives_the_sorters_reward_and_success_when_perception_sees_what_the_simulator_has(env):
    sensor = _sensor(env)
    ctl = ScriptedSortController(env)
    rewards, held, ends = [], 0, 0
    try:
        for ep in range(2):
            obs, _ = env.reset(seed=40 + ep)
            ctl.reset()
            for _ in range(LIMIT):
                obs, reward, terminated, truncated, info = env.step(ctl.act(obs))
                r = sensor.read(obs)
                rewards.append((r.reward, reward))
                held += info["holding"]
                assert r.success == info["is_success"], (r, info)
                if terminated or truncated:
                    ends += terminated
                    break
    finally:
        ctl.close()
    got, want = np.array(rewards).T
    assert held > 0 and ends == 2  # it carried objects and sorted both episodes
    np.testing.assert_allclose(got, want, atol=2e-3)  # the features are float32, scaled


def test_a_misplaced_object_changes_the_reward_by_what_perception_got_wrong(env):
    sensor = _sensor(env)
    obs, _ = env.reset(seed=3)
    _, reward, *_ = env.step(np.zeros(env.action_space.shape, np.float32))
    asm = ObservationAssembly(env.obs_terms)
    obs = env.unwrapped._observe()
    base = sensor.read(obs).reward
    moved = obs.copy()
    pos = asm.raw_term(moved, "obj0_pos")
    asm.write_term(moved, "obj0_pos", pos + np.array([0.0, 0.05, 0.0]))
    first = int(np.argmax([asm.raw_term(obs, f"obj{i}_sorted")[0] < 0.5 for i in range(2)]))
    change = sensor.read(moved).reward - base
    assert change != 0.0 if first == 0 else change == 0.0  # only the object the reward is about counts
    # seen in a wrong bin (below the rim), it costs the penalty
    wrong = obs.copy()
    kind0 = int(np.argmax(asm.raw_term(obs, "obj0_kind")))
    other = sensor_rule()["bins"][1 - kind0]
    asm.write_term(wrong, "obj0_pos", np.array([other[0], other[1], 0.07]))
    assert sensor.read(wrong).reward < base - 0.9


def test_objects_the_simulator_tells_are_refused_and_bad_features_are_named(env):
    with pytest.raises(ConfigError, match="do not come from the camera"):
        _sensor(env, image_terms=[])  # the state sorter reads objects from the simulator
    sensor = _sensor(env)
    with pytest.raises(ValidationError, match="sort_objects_seen_in_bins.features"):
        sensor.read(np.zeros(sensor.size + 1))
    with pytest.raises(ConfigError, match="sorted_reward"):
        SortSensorConfig(time_limit_cycles=LIMIT, **{**sensor_rule(), "sorted_reward": "sometimes"})


def test_the_outcome_ends_an_episode_where_the_camera_sees_every_object_sorted(env):
    """The bridge's `SensorOutcome` with the sorting sensor, given the simulator's own terms (nothing falls unseen),
    settling 1 state: terminated at the first state it reads as sorted, as the env."""
    outcome = SensorOutcome(_sensor(env, settle=1))
    ctl = ScriptedSortController(env)
    try:
        obs, _ = env.reset(seed=41)
        ctl.reset()
        for cycle in range(LIMIT):
            obs, _, terminated, truncated, info = env.step(ctl.act(obs))
            assert outcome.counters(cycle, cycle, 0) is None
            out = outcome.features(cycle, obs)
            assert out.terminated == info["is_success"]
            if terminated or truncated:
                break
    finally:
        ctl.close()
    assert outcome.successes == 1


class _Seen:
    """A sensor that reads what the test says it sees (a stand-in for the camera's estimates: what matters here is
    `SensorOutcome`'s rule over a sequence of readings)."""

    def __init__(self, done: list[bool]):
        self.config = SortSensorConfig(time_limit_cycles=LIMIT, **sensor_rule())
        self.done = done

    def read(self, features, target=None):
        from tinker_core.loop.sensor_reward import SensorReading

        ok = self.done[int(features[0])]
        return SensorReading(4.0 + (self.config.success_bonus if ok else 0.0), ok, 0.0, np.zeros(3), np.zeros(3))


def test_the_sorter_ends_an_episode_once_every_object_has_stayed_sorted_for_its_settle_cycles():
    """An object let go above its bin reads as sorted while it falls (the camera puts what is not held at its resting
    height): the episode ends only after the sorted reading held for ``settle_cycles`` states in a row, and the
    success bonus is paid once, where it ends."""
    settle = sensor_rule()["settle_cycles"]
    assert settle == 5
    done = [False, False, True, True, False] + [True] * settle + [True]
    outcome = SensorOutcome(_Seen(done))
    outs = [outcome.counters(k, k, 0) or outcome.features(k, np.array([k])) for k in range(len(done))]
    ends = [k for k, o in enumerate(outs) if o.terminated]
    assert ends[0] == 4 + settle and outcome.successes == 1
    assert [k for k, o in enumerate(outs) if o.ends_here] == ends[:1]  # the later states repeat it, once marked
    bonus = sensor_rule()["success_bonus"]
    assert [o.reward for o in outs[:ends[0]]] == [4.0] * ends[0]  # seen done, not yet settled: no bonus
    assert outs[ends[0]].reward == 4.0 + bonus
