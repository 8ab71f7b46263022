"""tinker's multi-agent envs: PettingZoo's own API test, domain randomization, and the success criteria
reached (or not) by scripted robots, in real PyBullet."""

from __future__ import annotations

import numpy as np
import pybullet as p
import pytest
from pettingzoo.test import parallel_api_test

import tinker_sim.multi
import tinker_sim as sim
from tinker_sim.multi.beacon import PADS
from tinker_core.errors import ConfigError


@pytest.fixture
def make():
    made = []

    def _make(env_id, **kw):
        env = sim.multi.make(env_id, **kw)
        made.append(env)
        return env

    yield _make
    for e in made:
        e.close()


@pytest.mark.parametrize("env_id", sorted(sim.multi.PARALLEL_ENV_IDS))
def test_pettingzoo_parallel_api(make, env_id):
    parallel_api_test(make(env_id), num_cycles=120)


def test_swarm_randomizes_mass_friction_and_gain_per_episode(make):
    env = make("tinker/SwarmFormation-v0", n_robots=20)
    env.reset(seed=1)
    first = {k: v.copy() for k, v in env.params.items()}
    masses = [p.getDynamicsInfo(b, -1, physicsClientId=env.world.client)[0] for b in env.fleet.ids]
    np.testing.assert_allclose(masses, first["mass_kg"])
    for k in ("actuator_gain", "friction"):  # drawn per robot: they differ
        assert first[k].std() > 0.1 * first[k].mean(), (k, first[k])
    env.reset(seed=2)
    assert not np.allclose(env.params["mass_kg"], first["mass_kg"])


def _slot_controller(obs):
    """Drive straight to the slot, slowing down inside 0.5 m (no collision avoidance)."""
    to_slot = obs[:2]
    return np.clip(2.0 * to_slot, -1.0, 1.0).astype(np.float32)


def test_scripted_swarm_reaches_the_formation_within_tolerance(make):
    env = make("tinker/SwarmFormation-v0", n_robots=20)
    obs, _ = env.reset(seed=3)
    steps, info = 0, {}
    while env.agents:
        obs, rew, term, trunc, info = env.step({a: _slot_controller(o) for a, o in obs.items()})
        steps += 1
    last = next(iter(info.values()))
    assert last["is_success"] and all(term.values()), last
    assert steps < env.max_steps
    assert last["mean_dist_m"] <= env.tolerance


def test_a_still_swarm_is_truncated_without_success(make):
    env = make("tinker/SwarmFormation-v0", n_robots=5, max_steps=5)
    env.reset(seed=0)
    for _ in range(5):
        _, _, term, trunc, info = env.step({a: np.zeros(2, np.float32) for a in env.agents})
    assert all(trunc.values()) and not any(term.values())
    assert env.agents == [] and info["robot_0"]["is_success"] is False
    with pytest.raises(ConfigError, match="the episode is over; call reset"):
        env.step({})


@pytest.mark.parametrize("follow_signal, success", [(True, True), (False, False)])
def test_beacon_needs_the_signal(make, follow_signal, success):
    env = make("tinker/BeaconRelay-v0")
    obs, _ = env.reset(seed=5)
    lit = env.lit
    pad = lit if follow_signal else (lit + 2) % 4  # the opposite corner
    info = {}
    while env.agents:
        to_pad = PADS[pad] - obs["rover"][:2]
        obs, rew, term, trunc, info = env.step({"spotter": lit, "rover": np.clip(3 * to_pad, -1, 1).astype(np.float32)})
    assert info["rover"]["is_success"] is success
    assert obs["spotter"].shape == (36, 36, 3) and obs["spotter"].dtype == np.uint8
    np.testing.assert_array_equal(obs["rover"][4:8], np.eye(4)[lit])  # the rover heard the signal


def test_the_spotter_sees_which_pad_is_lit(make):
    env = make("tinker/BeaconRelay-v0")
    images = {}
    for seed in range(12):
        obs, _ = env.reset(seed=seed)
        images[env.lit] = obs["spotter"].astype(int)
    assert len(images) == 4
    red = {k: (im[:, :, 0] - im[:, :, 1] > 100) for k, im in images.items()}
    centres = {k: np.argwhere(m).mean(0) for k, m in red.items()}
    assert len({(round(r), round(c)) for r, c in centres.values()}) == 4  # a different red spot per lit pad
