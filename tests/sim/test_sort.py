"""ArmSort: objects of two kinds, bins per kind, suction grasp, and a scripted sorter that solves it."""

from __future__ import annotations

import numpy as np

from tinker_sim.scripted import ScriptedSortController, decode_terms


def test_sort_layout_terms_and_suction_dimension(make_env):
    env = make_env("tinker/ArmSort-v0")
    u = env.unwrapped
    assert env.action_space.shape == (8,)
    assert [t["name"] for t in u.action_terms] == ["joint_pos_delta", "suction"]
    obs, info = env.reset(seed=0)
    terms = decode_terms(u.obs_terms, obs)
    kinds = {int(np.argmax(terms[f"obj{i}_kind"])) for i in range(2)}
    assert kinds == {0, 1}  # both kinds are on the table
    assert info["sorted"] == 0 and not info["is_success"] and info["num_objects"] == 2
    # Suction on far from any object grips nothing.
    _, _, _, _, info = env.step(np.r_[np.zeros(7), 1.0].astype(np.float32))
    assert not info["holding"]


def test_scripted_sorter_solves_the_task_with_randomized_dynamics(make_env):
    env = make_env("tinker/ArmSort-v0", randomize=True)
    ctl = ScriptedSortController(env)
    wins, grips = 0, 0
    try:
        for ep in range(5):
            obs, info = env.reset(seed=300 + ep)
            ctl.reset()
            done = False
            while not done:
                obs, reward, terminated, truncated, info = env.step(ctl.act(obs))
                grips += info["holding"]
                done = terminated or truncated
            wins += info["is_success"]
            if info["is_success"]:
                assert info["sorted"] == 2 and info["wrong_bin"] == 0 and terminated
    finally:
        ctl.close()
    assert grips > 0
    assert wins >= 4


def test_an_object_dropped_in_the_wrong_bin_is_not_success(make_env):
    env = make_env("tinker/ArmSort-v0")
    env.reset(seed=1)
    task = env.unwrapped.task
    # Put every object into the OTHER kind's bin by hand and let it settle.
    from tinker_sim.tasks.sort import BIN_CENTERS, TABLE_TOP

    for body, kind in zip(task.objects, task.kinds):
        x, y = BIN_CENTERS[1 - kind]
        env.unwrapped.world.set_pose(body, (x, y, TABLE_TOP + 0.05))
    info = {}
    for _ in range(5):
        _, _, terminated, _, info = env.step(np.r_[np.zeros(7), -1.0].astype(np.float32))
    assert info["wrong_bin"] == 2 and info["sorted"] == 0 and not info["is_success"] and not terminated
    for body, kind in zip(task.objects, task.kinds):
        x, y = BIN_CENTERS[kind]
        env.unwrapped.world.set_pose(body, (x, y, TABLE_TOP + 0.05))
    for _ in range(5):
        _, _, terminated, _, info = env.step(np.r_[np.zeros(7), -1.0].astype(np.float32))
        if terminated:
            break
    assert info["is_success"] and info["sorted"] == 2 and terminated


def test_the_sorters_fixtures_are_known_without_a_simulator_as_the_built_task_gives_them(make_env):
    """`fixture_scene` is what a guard in another process (the safety node) adds to its scene: the same items as the
    built task's `fixtures()`, from one description (`sort_fixtures`)."""
    import pytest

    from tinker_core.errors import ConfigError
    from tinker_sim.tasks import fixture_scene

    env = make_env("tinker/ArmSort-v0")
    env.reset(seed=0)
    built = env.unwrapped.task.fixtures()
    assert fixture_scene("sort") == built and [f["name"] for f in built][:2] == ["sort_table", "bin0_wall0"]
    assert len(built) == 9 and fixture_scene("reach") == []
    with pytest.raises(ConfigError, match=r"task: expected one of \['reach', 'sort'\], got 'stack'"):
        fixture_scene("stack")
