"""tinker/PlanarSort-v0 (the kinematic multi-object sorter) and its scripted skills: the env checker, the
observation layout, sorting rules, domain randomization, and skills that solve it when sequenced right."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from tinker_core.errors import ConfigError
from tinker_core.hierarchy.skills import SkillLibrary, expand_skills
from tinker_sim import PLANAR_ENV_IDS
from tinker_sim.planar_sort import BIN_CENTERS, MAX_OBJECTS, NUM_KINDS, PlanarSortEnv, obs_dim, slot_offset


@pytest.mark.parametrize("env_id", sorted(PLANAR_ENV_IDS))
def test_every_planar_id_passes_the_env_checker(env_id):
    env = gym.make(env_id, num_objects=3)
    check_env(env.unwrapped, skip_render_check=True)
    assert env.observation_space.shape == (obs_dim(),)


def _oracle_option(obs: np.ndarray) -> int:
    """Reach the first active object, or carry the held one to its kind's bin (skill order of the set)."""
    for i in range(MAX_OBJECTS):
        k = slot_offset(i)
        if obs[k + 3 + NUM_KINDS] > 0.5:
            return MAX_OBJECTS + int(np.argmax(obs[k + 2:k + 2 + NUM_KINDS]))
    for i in range(MAX_OBJECTS):
        if obs[slot_offset(i) + 2 + NUM_KINDS] > 0.5:
            return i
    return 0


def test_scripted_skills_sequenced_right_sort_six_objects():
    skills = SkillLibrary(expand_skills(["planar_sort"]))
    assert len(skills.names) == MAX_OBJECTS + NUM_KINDS
    env = gym.make("tinker/PlanarSort-v0", num_objects=6)
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        total = 0.0
        for _ in range(env.unwrapped.max_steps):
            a = skills(torch.as_tensor(obs)[None], torch.tensor([_oracle_option(obs)]))[0].numpy()
            obs, r, te, tr, info = env.step(a)
            total += r
            if te or tr:
                break
        assert info["is_success"] and info["sorted"] == 6 and te and not tr
        assert total > 6.0  # +1 per object and +1 at success, shaping telescopes to about the start potential


def test_wrong_bin_costs_and_the_object_stays():
    env = PlanarSortEnv(num_objects=1, action_noise_range=(0.0, 0.0), shaping=0.0)
    obs, _ = env.reset(seed=0)
    kind = int(np.argmax(obs[slot_offset(0) + 2:slot_offset(0) + 2 + NUM_KINDS]))
    wrong = BIN_CENTERS[(kind + 1) % NUM_KINDS]
    env._grip = env._pos[0].copy()
    obs, r, *_ = env.step(np.array([0.0, 0.0, 1.0], np.float32))
    assert obs[2] == 1.0 and r == 0.0  # picked
    env._grip = wrong.copy()
    obs, r, te, *_ = env.step(np.array([0.0, 0.0, -1.0], np.float32))
    assert r == pytest.approx(-0.5) and not te and obs[slot_offset(0) + 2 + NUM_KINDS] == 1.0


def test_domain_randomization_varies_per_episode_and_bad_settings_are_named():
    env = PlanarSortEnv(num_objects=2)
    drawn = set()
    for s in range(5):
        env.reset(seed=s)
        drawn.add(round(env._gain, 4))
    assert len(drawn) == 5 and all(0.8 <= g <= 1.2 for g in drawn)
    with pytest.raises(ConfigError, match=r"PlanarSortEnv.num_objects: expected an integer 1..6, got 0"):
        PlanarSortEnv(num_objects=0)
    with pytest.raises(ConfigError, match="speed_gain_range"):
        PlanarSortEnv(speed_gain_range=(1.2, 0.8))
    with pytest.raises(ConfigError, match="must be finite"):
        env.step(np.array([np.nan, 0, 0], np.float32))


def test_time_limit_scales_with_the_number_of_objects():
    env = PlanarSortEnv(num_objects=2, steps_per_object=5)
    env.reset(seed=0)
    for t in range(10):
        *_, te, tr, _ = env.step(np.zeros(3, np.float32))
    assert tr and not te
