"""Which inputs make a perception cycle (no ROS): synced task terms, a goal with joint states alone, frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinker_deploy.manifest import Manifest
from tinker_sim.arm_env import ArmEnv
from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.kinematics import ForwardKinematics
from tinker_core.loop.perception import PerceptionCycle
from tinker_core.spec import DictSpec, Spec

REACH = Path(__file__).resolve().parents[3] / "pretrained" / "arm_reach" / "bundle" / "manifest.json"


def _reach(**kw) -> PerceptionCycle:
    m = Manifest.from_json(REACH.read_text())
    return PerceptionCycle(m.obs_spec, list(m.obs_terms), lambda obs: obs, 7, **kw)


def test_synced_terms_never_mix_two_states():
    cycle = _reach()
    q, qd, ee, tgt = np.zeros(7), np.zeros(7), np.full(3, 0.5), np.array([0.6, 0.0, 0.4])
    terms = {"ee_pos": ee, "target_pos": tgt, "target_minus_ee": tgt - ee}
    assert cycle.on_task(1, terms) is None  # no state yet
    assert cycle.on_state(1, q, qd) is not None  # state 1 with its terms
    assert cycle.on_state(2, q, qd) is None  # state 2 waits for its own terms, never runs on state 1's
    out = cycle.on_task(2, terms, "4")
    assert (out.stamp_ns, out.cycle, out.episode) == (2, 2, "4")
    assert cycle.on_task(2, terms) is None  # a repeat of a stamp already run: no second cycle


def test_a_goal_and_joint_states_alone_run_every_state_like_the_environment():
    """What a ros2_control robot gives: joint_states at the robot's rate and a goal when it changes."""
    env = ArmEnv(task="reach")
    try:
        obs, _ = env.reset(seed=5)
        fk = ForwardKinematics.from_urdf(None, env.joint_names)
        cycle = _reach(synced=False, ee_fn=fk.ee_position)
        q, qd = env.joint_state
        assert cycle.on_state(1, q, qd) is None  # no goal yet: nothing to aim at
        assert cycle.on_task(7, {"target_pos": env.task.target.copy()}) is None  # the goal alone runs no cycle
        rng = np.random.default_rng(1)
        for k in range(2, 12):
            out = cycle.on_state(k * 50_000_000, q, qd)  # no task message at all: every state runs
            assert out is not None and out.cycle == k
            np.testing.assert_allclose(out.features, obs, atol=1e-5)  # FK vs the physics' link frame: ~1e-7 m
            a = rng.uniform(-1, 1, 7)
            cycle.on_action(np.clip(a, -1, 1))
            obs, *_ = env.step(a)
            q, qd = env.joint_state
    finally:
        env.close()


def test_unsynced_terms_that_need_the_end_effector_need_a_robot_model():
    with pytest.raises(ConfigError, match="ee_pos"):
        _reach(synced=False)


def test_frames_newest_first_refuses_a_stale_one_and_in_line_waits_for_its_own():
    spec = DictSpec({"image": Spec((4, 4, 3), "uint8"), "state": Spec((2,), "float32", -10.0, 10.0)})
    terms = [{"name": "image", "size": 48, "offset": 0.0, "scale": 1.0},
             {"name": "joint_pos", "size": 2, "offset": 0.0, "scale": 1.0}]
    img = np.zeros((4, 4, 3), np.uint8)
    cycle = PerceptionCycle(spec, terms, lambda obs: obs["state"] * 2, 2, max_frame_age_ns=100)
    assert cycle.on_state(1000, np.ones(2), np.zeros(2)) is None  # the first frame is on its way
    out = cycle.on_frame(950, img)
    assert out.extra == {"frame_age_us": 0} and list(out.features) == [2.0, 2.0]
    with pytest.raises(ValidationError, match="perception.image: expected a frame at most"):
        cycle.on_state(2000, np.ones(2), np.zeros(2))
    inline = PerceptionCycle(spec, terms, lambda obs: obs["state"], 2, sync_frames=True)
    inline.on_frame(1000, img)
    assert inline.on_state(2000, np.ones(2), np.zeros(2)) is None  # waits for the frame of its own state
    assert inline.on_frame(2000, img).stamp_ns == 2000
    with pytest.raises(ValidationError, match=r"obs.image: expected uint8\[4, 4, 3\]"):
        inline.on_state(3000, np.ones(2), np.zeros(2)) or inline.on_frame(3000, np.zeros((2, 2, 3), np.uint8))
