"""The ArmSort skills (`tinker_sim.arm_sort_skills`) in the real PyBullet env: each does its sub-task, their
kinematics match the simulator's, they export to ONNX with the same actions, and the env's object slots let a
curriculum change the number of objects under one layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tinker_sim  # noqa: F401  (registers the skills)
from tinker_core.errors import ConfigError
from tinker_core.hierarchy.skills import expand_skills, make_skill
from tinker_sim.arm_env import ArmEnv
from tinker_sim.arm_sort_skills import SLOTS, spd_solve


@pytest.fixture
def sort_env():
    made = []

    def _make(num_objects: int, randomize: bool = False) -> ArmEnv:
        env = ArmEnv(task="sort", randomize=randomize, task_kwargs={"num_objects": num_objects, "max_objects": SLOTS})
        made.append(env)
        return env

    yield _make
    for env in made:
        env.close()


def _act(skill, obs) -> np.ndarray:
    with torch.no_grad():
        return skill(torch.as_tensor(obs, dtype=torch.float32)[None])[0].numpy()


def test_the_set_names_a_reach_per_slot_then_a_carry_per_bin():
    assert expand_skills(["arm_sort"]) == [f"arm_sort/reach_{i}" for i in range(SLOTS)] + \
        ["arm_sort/carry_to_bin_0", "arm_sort/carry_to_bin_1"]


@pytest.mark.parametrize("seed,randomize,n", [(0, False, 2), (3, True, 2), (5, True, 2), (1, False, 1), (0, False, 3),
                                               (1000, True, 3)])
def test_reach_grips_object_i_and_carry_drops_it_in_bin_k(sort_env, seed, randomize, n):
    """With 3 objects two share a bin: the carry releases the second over the bin's free quadrant (released over
    the centre, it landed on the first and stayed stacked, not sorted: seeds 0 and 1000 did)."""
    env = sort_env(n, randomize)
    obs, _ = env.reset(seed=seed)
    task = env.task
    for i in reversed(range(n)):  # out of order: each skill acts on its own slot
        reach = make_skill(f"arm_sort/reach_{i}")
        for _ in range(60):
            obs, *_ = env.step(_act(reach, obs))
            if task.held is not None:
                break
        assert task.held == task.objects[i], f"reach_{i} (seed {seed}) holds {task.held}, not object {i}"
        carry = make_skill(f"arm_sort/carry_to_bin_{task.kinds[i]}")
        for _ in range(80):
            obs, _, terminated, _, info = env.step(_act(carry, obs))
            if task.sorted[i]:
                break
        assert task.sorted[i], f"carry_to_bin_{task.kinds[i]} did not sort object {i} (seed {seed})"
        assert task.held is None
    assert terminated and info["is_success"] and info["sorted"] == n
    assert env.violations == {"joint_position": 0, "joint_velocity": 0, "contact": 0}


def test_carry_to_the_other_bin_is_a_wrong_bin(sort_env):
    env = sort_env(1)
    obs, _ = env.reset(seed=1)
    reach = make_skill("arm_sort/reach_0")
    for _ in range(60):
        obs, *_ = env.step(_act(reach, obs))
    wrong = make_skill(f"arm_sort/carry_to_bin_{1 - env.task.kinds[0]}")
    for _ in range(80):
        obs, _, _, _, info = env.step(_act(wrong, obs))
    assert info["wrong_bin"] == 1 and info["sorted"] == 0 and not info["is_success"]


def test_skill_kinematics_match_the_simulator(sort_env):
    env = sort_env(1)
    skill = make_skill("arm_sort/reach_0")
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        with torch.no_grad():
            ee, z_axis, _ = skill.kinematics(skill.term(torch.as_tensor(obs)[None], "joint_pos"))
        np.testing.assert_allclose(ee[0].numpy(), env.ee_position, atol=1e-4)
        assert z_axis[0, 2] < -0.95  # the home pose points the suction face down


def test_spd_solve_matches_numpy():
    rng = np.random.default_rng(0)
    m = rng.normal(size=(4, 5, 5))
    a = m @ m.transpose(0, 2, 1) + 0.1 * np.eye(5)
    b = rng.normal(size=(4, 5))
    got = spd_solve(torch.as_tensor(a), torch.as_tensor(b)).numpy()
    np.testing.assert_allclose(got, np.linalg.solve(a, b[..., None])[..., 0], rtol=1e-8, atol=1e-10)


def test_skills_export_to_onnx_with_the_same_actions(sort_env, tmp_path):
    import onnxruntime as ort

    env = sort_env(2)
    obs = np.stack([env.reset(seed=s)[0] for s in range(4)]).astype(np.float32)
    for name in ("arm_sort/reach_1", "arm_sort/carry_to_bin_0"):
        skill = make_skill(name).eval()
        path = tmp_path / "skill.onnx"
        torch.onnx.export(skill, torch.as_tensor(obs), str(path), input_names=["obs"], output_names=["action"],
                          dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"}}, opset_version=17, dynamo=False)
        got = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"obs": obs})[0]
        with torch.no_grad():
            want = skill(torch.as_tensor(obs)).numpy()
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_object_slots_keep_one_layout_and_the_count_changes_at_reset(sort_env):
    env = sort_env(1)
    obs, info = env.reset(seed=0)
    assert obs.shape == env.observation_space.shape and info["num_objects"] == 1
    names = [t["name"] for t in env.obs_terms]
    assert [n for n in names if n.endswith("_sorted")] == [f"obj{i}_sorted" for i in range(SLOTS)]
    raw = {}
    i = 0
    for t in env.obs_terms:
        raw[t["name"]] = obs[i:i + t["size"]] / np.asarray(t["scale"]) + np.asarray(t["offset"])
        i += t["size"]
    assert raw["obj0_sorted"][0] == 0.0 and raw["obj1_sorted"][0] == 1.0 and raw["obj2_sorted"][0] == 1.0
    assert not raw["obj2_kind"].any()
    env.set_curriculum("num_objects", 3)
    assert env.task.num_objects == 1  # the running episode keeps its objects
    obs3, info = env.reset(seed=0)
    assert info["num_objects"] == 3 and obs3.shape == obs.shape and len(env.task.objects) == 3
    with pytest.raises(ConfigError, match=r"num_objects: expected an integer 1..3 \(max_objects\), got 4"):
        env.set_curriculum("num_objects", 4)


def test_a_library_of_arm_skills_runs_one_controller_with_each_skills_actions(sort_env):
    from tinker_core.hierarchy.skills import SkillLibrary

    env = sort_env(3)
    obs = torch.as_tensor(np.stack([env.reset(seed=s)[0] for s in range(4)]), dtype=torch.float32)
    lib = SkillLibrary(expand_skills(["arm_sort"]))
    assert lib.shared_control
    with torch.no_grad():
        for k, skill in enumerate(lib.skills):
            torch.testing.assert_close(lib(obs, torch.full((4,), k)), skill(obs))
        mixed = lib(obs, torch.tensor([0, 4, 2, 3]))
        torch.testing.assert_close(mixed[1], lib.skills[4](obs)[1])


def test_the_remaining_reward_charges_each_unsorted_object_per_step():
    a = ArmEnv(task="sort", task_kwargs={"num_objects": 2})
    b = ArmEnv(task="sort", task_kwargs={"num_objects": 2, "sorted_reward": "remaining"})
    try:
        a.reset(seed=0)
        b.reset(seed=0)
        zero = np.zeros(a.action_space.shape, np.float32)
        ra, rb = a.step(zero)[1], b.step(zero)[1]
        assert rb == pytest.approx(ra - 4.0, abs=1e-6)  # 2 unsorted objects: -2 each, instead of +2 per sorted (none)
    finally:
        a.close()
        b.close()
    with pytest.raises(ConfigError, match="SortTask.sorted_reward: expected 'per_step' or 'remaining', got 'events'"):
        ArmEnv(task="sort", task_kwargs={"sorted_reward": "events"})


def test_the_release_spot_ignores_absent_slots_when_it_finds_the_carried_object(sort_env):
    """An absent slot reads as the workspace centre; the carry once took it for the carried object when the arm
    passed nearer to it (then the carried object counted as an occupant of the spot below it, and the choice changed
    mid-transit). Wherever an absent slot reads, the spot is the same."""
    env = sort_env(2)
    obs, _ = env.reset(seed=0)
    carry = make_skill("arm_sort/carry_to_bin_0")

    def put(o: np.ndarray, name: str, value) -> np.ndarray:
        start = carry.terms[name][0]
        scale, offset = getattr(carry, f"scale_{name}").numpy(), getattr(carry, f"offset_{name}").numpy()
        o[start:start + scale.shape[0]] = (np.asarray(value, dtype=np.float32) - offset) * scale
        return o

    def spot(o: np.ndarray, ee: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return carry.release_spot(torch.as_tensor(o, dtype=torch.float32)[None],
                                      torch.as_tensor(ee, dtype=torch.float32)[None])[0].numpy()

    o = put(obs.astype(np.float32).copy(), "suction_active", [1.0])
    assert carry.term(torch.as_tensor(o)[None], "obj2_kind").sum() < 0.5, "slot 2 must be absent at 2 objects"
    o = put(o, "obj1_pos", [0.5, -0.6, 0.02])  # the other object, far from bin 0
    o = put(o, "obj2_pos", [3.0, 3.0, 3.0])
    free = spot(put(o.copy(), "obj0_pos", [0.5, 0.6, 0.3]), np.array([0.5, 0.6, 0.33]))
    ee = np.r_[free, 0.33]  # arriving above the free spot, the carried object 3 cm below the suction cup
    o = put(o, "obj0_pos", ee - [0.0, 0.0, 0.03])
    assert np.allclose(spot(o, ee), free)
    assert np.allclose(spot(put(o, "obj2_pos", ee + [0.0, 0.0, 0.01]), ee), free)  # the absent slot nearer than it
