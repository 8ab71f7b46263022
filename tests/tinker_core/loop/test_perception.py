"""Which inputs make a perception cycle (no ROS): synced task terms, a goal with joint states alone, frames."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tinker_deploy.manifest import Manifest
from tinker_sim.arm_env import ArmEnv
from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.kinematics import ForwardKinematics
from tinker_core.loop.latency_compensation import LatencyCompensation
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


def test_with_latency_compensation_the_cycle_gives_what_the_env_runtime_gives():
    """A robot 3 periods late, the env playing the compensating policy side: the cycle fed its states, the goal and
    each safe command gives, state by state, what the env runtime's compensation makes of the env's observation
    (`tinker eval --latency-compensation`), and moves the arm's terms away from the measured ones."""
    env = ArmEnv(task="reach", dynamics={"action_latency_steps": 3}, latency_compensation=3)
    try:
        obs, _ = env.reset(seed=5)
        m = Manifest.from_json(REACH.read_text())
        fk = ForwardKinematics.from_urdf(None, env.joint_names)
        compensation = LatencyCompensation.for_manifest(m, 3)
        cycle = _reach(synced=False, ee_fn=fk.ee_position, compensation=LatencyCompensation.for_manifest(m, 3))
        cycle.on_task(7, {"target_pos": env.task.target.copy()})
        rng, moved = np.random.default_rng(2), 0
        for k in range(2, 14):
            q, qd = env.joint_state
            cycle.on_command((k - 1) * 50_000_000, env.commanded_target)  # the command answering the last state
            out = cycle.on_state(k * 50_000_000, q, qd)
            expected = compensation(obs, env.commanded_target)
            np.testing.assert_allclose(out.features, expected, atol=1e-5)
            moved += not np.allclose(expected, obs, atol=1e-3)
            a = rng.uniform(-1, 1, 7)
            cycle.on_action(np.clip(a, -1, 1))
            obs, *_ = env.step(a)
        assert moved >= 8  # commands were in flight: the arm's terms are not the measured ones
    finally:
        env.close()


def test_a_reloaded_model_keeps_the_latency_perception_was_told_to_follow():
    """latency_auto: a bundle swapped in while the loop runs is built at the launch YAML's start value; the latency
    the safety stage measured and perception took stays (the edge carrying it is sent once)."""
    m = Manifest.from_json(REACH.read_text())
    fk = ForwardKinematics.from_urdf(None, m.joint_names)

    def following() -> PerceptionCycle:
        return _reach(synced=False, ee_fn=fk.ee_position,
                      compensation=LatencyCompensation.for_manifest(m, 0, follows=True))
    old = following()
    assert old.compensation is not None and old.compensation.steps == 0  # built, at 0, to follow
    old.compensation.follow(4)
    new = following()
    new.take_inputs(old)
    assert new.compensation.steps == 4
    fixed = _reach(synced=False, ee_fn=fk.ee_position, compensation=LatencyCompensation.for_manifest(m, 0))
    assert fixed.compensation is None  # 0 and not following: nothing to compensate, no command heard


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


# --- a vision bundle (pretrained/arm_reach_vision): the target comes from the image, never from the task ------
VISION = REACH.parents[2] / "arm_reach_vision"


def _vision(model=None, **kw):
    """The shipped vision bundle's cycle; each frame's own estimate unless ``estimate`` says otherwise."""
    from tinker_deploy.runtime import OnnxPolicy

    kw.setdefault("estimate", "per_frame")
    perception = OnnxPolicy.from_bundle(VISION, part="perception")
    m = perception.manifest
    cycle = PerceptionCycle(m.obs_spec, list(m.obs_terms), model or perception.forward, 7, image_terms=m.image_terms,
                            **kw)
    return cycle, perception


def _slot(m, name) -> slice:
    i = 0
    for t in m.obs_terms:
        if t.name == name:
            return slice(i, i + t.size)
        i += t.size
    raise KeyError(name)


def test_a_vision_bundle_never_takes_the_target_from_the_task_input():
    """The command of one state is the same whatever target the task input claims; the features are the ones
    `tinker eval` computes from the env's observation (whose state does carry the true target)."""
    from tinker_core.action_chain import ActionChain, ActionChainConfig
    from tinker_core.config import config_from_dict
    from tinker_core.loop.policy import PolicyCycle
    from tinker_deploy.runtime import OnnxPolicy

    env = ArmEnv(task="reach", camera=True, camera_views=2)
    try:
        obs, _ = env.reset(seed=3)
        q, qd = env.joint_state
        ee, true = env.ee_position, env.task.target.copy()
        lower, upper = env.robot.lower, env.robot.upper
    finally:
        env.close()
    actor = OnnxPolicy.from_bundle(VISION, part="actor")
    chain_cfg = config_from_dict(ActionChainConfig, dict(actor.manifest.action_chain), "action_chain")
    commands, features = [], []
    for claimed in (true, np.array([0.35, -0.25, 0.2]), np.full(3, 50.0)):
        cycle, perception = _vision()
        cycle.on_frame(10, obs["image"])
        cycle.on_state(10, q, qd)
        out = cycle.on_task(10, {"ee_pos": ee, "target_pos": claimed, "target_minus_ee": claimed - ee})
        policy = PolicyCycle(lambda f, sha: actor.forward(f), ActionChain(chain_cfg, lower, upper))
        policy.on_state(10, q)
        commands.append(policy.on_features(10, out.features, out.cycle, out.episode).target)
        features.append(out.features)
    for c in commands[1:]:
        np.testing.assert_array_equal(c, commands[0])
    np.testing.assert_allclose(features[0], perception.forward(obs), atol=1e-6)  # as in-process eval computes it
    t = next(t for t in perception.manifest.obs_terms if t.name == "target_pos")
    est = features[0][_slot(perception.manifest, "target_pos")] / np.asarray(t.scale) + np.asarray(t.offset)
    assert np.linalg.norm(est - true) < 0.06, (est, true)  # the locator's estimate


def test_the_image_terms_slots_of_the_models_state_input_hold_no_task_value():
    cycle, perception = _vision(model=lambda obs: obs["state"])  # the state input the model would get
    m = perception.manifest
    tgt, ee = np.array([0.6, 0.1, 0.4]), np.array([0.5, 0.0, 0.5])
    cycle.on_frame(1, np.zeros((64, 128, 3), np.uint8))
    out = cycle.on_task(1, {"ee_pos": ee, "target_pos": tgt, "target_minus_ee": tgt - ee}) or cycle.on_state(
        1, np.zeros(7), np.zeros(7))
    assert not out.features[_slot(m, "target_pos")].any() and not out.features[_slot(m, "target_minus_ee")].any()
    assert out.features[_slot(m, "ee_pos")].any()
    assert cycle.needed == {"ee_pos"}  # it waits for the state's measured terms only
    with pytest.raises(ConfigError, match="image_terms"):
        _reach(image_terms=["target_pos"])  # a state-only model computes nothing from an image


def test_a_frame_from_before_the_episode_reset_is_not_used():
    cycle, _ = _vision(model=lambda obs: obs["state"])
    terms = {"ee_pos": np.full(3, 0.5)}
    img = np.zeros((64, 128, 3), np.uint8)
    cycle.on_frame(1, img)
    cycle.on_task(1, terms, "0")
    assert cycle.on_state(1, np.zeros(7), np.zeros(7)) is not None
    cycle.on_task(2, terms, "1")  # the robot reset: state 2 is the new episode's first
    assert cycle.on_state(2, np.zeros(7), np.zeros(7)) is None  # frame 1 shows the old scene
    out = cycle.on_frame(2, img)
    assert (out.stamp_ns, out.episode, out.extra["frame_age_us"]) == (2, "1", 0)
    cycle.on_task(3, terms, "1")
    assert cycle.on_state(3, np.zeros(7), np.zeros(7)).stamp_ns == 3  # within the episode the newest frame serves


def test_the_estimate_is_held_by_default_where_the_episodes_are_known():
    assert _vision(estimate="auto")[0].hold is not None
    assert _vision(estimate="auto", synced=False, ee_fn=lambda q: np.zeros(3))[0].hold is None  # no episodes
    assert _vision(estimate="per_frame")[0].hold is None
    with pytest.raises(ConfigError, match="perception.estimate: held needs the episodes"):
        _vision(synced=False, ee_fn=lambda q: np.zeros(3), estimate="held")
    with pytest.raises(ConfigError, match=r"perception.estimate: expected one of \['auto', 'held', 'per_frame'\]"):
        _vision(estimate="true")


def test_a_vision_bundle_on_a_robot_without_the_simulator_needs_no_goal():
    """joint_states and the camera alone (``task_synced: false``): the target comes from the image, ee_pos from FK."""
    cycle, perception = _vision(model=lambda obs: obs["state"], synced=False, ee_fn=lambda q: np.full(3, 0.5))
    assert cycle.needed == set()
    cycle.on_frame(1, np.zeros((64, 128, 3), np.uint8))
    out = cycle.on_state(2, np.zeros(7), np.zeros(7))
    assert out is not None and not out.features[_slot(perception.manifest, "target_minus_ee")].any()


def test_a_held_estimate_runs_the_bundles_hand_model_and_corrects_a_moved_camera():
    """The perception node's cycle passes each frame to the bundle's hand model; a camera moved 8 cm (the
    shifted_camera variant) is measured against the joints' forward kinematics and the held target corrected, and
    ``per_frame`` never runs the hand model."""
    from tinker_deploy.runtime import OnnxPolicy
    from tinker_sim.dynamics import DynamicsParams

    hand_model = OnnxPolicy.from_bundle(VISION, part="hand")
    calls = []

    def hand(obs):
        calls.append(obs["image"].shape)
        return hand_model.forward(obs)

    env = ArmEnv(task="reach", camera=True, camera_views=2, dynamics=DynamicsParams(camera_shift_m=0.08))
    try:
        cycle, perception = _vision(estimate="auto", hand=hand)
        rng = np.random.default_rng(0)
        obs, _ = env.reset(seed=7)
        for k in range(8):
            q, qd = env.joint_state
            ee = env.ee_position
            cycle.on_frame(10 + k, obs["image"])
            cycle.on_state(10 + k, q, qd)
            out = cycle.on_task(10 + k, {"ee_pos": ee}, episode="1")
            assert out is not None
            obs, *_ = env.step(rng.uniform(-0.3, 0.3, 7))
        true = env.task.target.copy()
    finally:
        env.close()
    m = perception.manifest
    t = next(t for t in m.obs_terms if t.name == "target_pos")
    held = out.features[_slot(m, "target_pos")] / np.asarray(t.scale) + np.asarray(t.offset)
    own = perception.forward(obs)[_slot(m, "target_pos")] / np.asarray(t.scale) + np.asarray(t.offset)
    assert len(calls) == 8 and cycle.hold.hands == 8
    assert 0.045 < np.linalg.norm(cycle.hold.camera_offset) < 0.13, cycle.hold.camera_offset  # the 8 cm move
    assert cycle.hold.correction is not None
    assert np.linalg.norm(held - true) < np.linalg.norm(own - true), (held, own, true)
    calls.clear()
    per_frame, _ = _vision(estimate="per_frame", hand=hand)
    assert per_frame.hand is None
