"""`RestingHold`: the sorter's located objects held while they rest, per frame while carried (no ROS)."""

import numpy as np
import pytest

from tinker_core.errors import ConfigError
from tinker_core.loop.held_estimate import estimate_hold
from tinker_core.loop.resting_hold import RestingHold


@pytest.fixture(scope="module")
def sorter():
    """ArmSort's observation terms and one observation (what a located state looks like)."""
    from tinker_sim.arm_env import ArmEnv

    env = ArmEnv("sort")
    obs, _ = env.reset(seed=1000)
    terms = env.obs_terms
    env.close()
    return terms, obs


def _image_terms(terms):
    return [t["name"] for t in terms if t["name"].startswith("obj")]


class Features:
    """Reads and writes raw terms of a state vector (as `ObservationAssembly` scales them)."""

    def __init__(self, terms, obs):
        self.slots, i = {}, 0
        for t in terms:
            self.slots[t["name"]] = (slice(i, i + t["size"]), np.asarray(t["offset"], float), np.asarray(t["scale"], float))
            i += t["size"]
        self.obs = obs

    def get(self, x, name):
        s, off, sc = self.slots[name]
        return x[s] / sc + off

    def put(self, x, name, raw):
        s, off, sc = self.slots[name]
        x = x.copy()
        x[s] = (np.asarray(raw) - off) * sc
        return x

    def frame(self, obj0, ee, suction=0.0, goal=np.array([0.5, -0.4, 0.0775])):
        x = self.put(self.obs, "ee_pos", ee)
        x = self.put(x, "suction_active", [suction])
        x = self.put(x, "obj0_pos", obj0)
        x = self.put(x, "obj0_minus_ee", obj0 - ee)
        return self.put(x, "obj0_bin_minus_obj", goal - obj0).astype(np.float32)


def test_a_resting_object_is_averaged_and_its_relative_terms_follow_the_arm(sorter):
    terms, obs = sorter
    f = Features(terms, obs)
    hold = RestingHold(terms, _image_terms(terms))
    rng = np.random.default_rng(0)
    true = np.array([0.55, 0.05, 0.0775])
    seen = true + rng.normal(0, 0.01, (40, 3))
    for i, pos in enumerate(seen):
        ee = np.array([0.4, 0.0, 0.3 - 0.005 * i])  # the arm moves; the object rests
        out = hold(f.frame(pos, ee), "1")
    mean = seen.mean(0)
    np.testing.assert_allclose(f.get(out, "obj0_pos"), mean, atol=1e-5)
    np.testing.assert_allclose(f.get(out, "obj0_minus_ee"), mean - ee, atol=1e-5)  # this frame's arm
    np.testing.assert_allclose(f.get(out, "obj0_bin_minus_obj"), np.array([0.5, -0.4, 0.0775]) - mean, atol=1e-5)
    assert np.linalg.norm(f.get(out, "obj0_pos") - true) < 0.005 < np.linalg.norm(seen[-1] - true)
    np.testing.assert_allclose(f.get(out, "obj1_pos"), f.get(obs, "obj1_pos"), atol=1e-5)  # seen still: there
    for name in ("obj0_kind", "obj0_sorted"):  # the frame's own
        np.testing.assert_array_equal(out[f.slots[name][0]], obs[f.slots[name][0]])


def test_a_carried_object_is_per_frame_and_its_mean_starts_again_where_it_is_let_go(sorter):
    terms, obs = sorter
    f = Features(terms, obs)
    hold = RestingHold(terms, _image_terms(terms))
    table = np.array([0.55, 0.05, 0.0775])
    for _ in range(10):
        hold(f.frame(table, np.array([0.4, 0.0, 0.3])), "1")
    ee = np.array([0.5, -0.2, 0.2])
    carried = ee + np.array([0.0, 0.0, -0.05])
    out = hold(f.frame(carried, ee, suction=1.0), "1")  # suction on, at the cup: held
    np.testing.assert_allclose(f.get(out, "obj0_pos"), carried, atol=1e-5)
    assert "obj0" not in hold.held
    out = hold(f.frame(carried, ee + np.array([0, 0, 0.2]), suction=1.0), "1")  # suction on, far: resting
    np.testing.assert_allclose(f.get(out, "obj0_pos"), carried, atol=1e-5)  # a new mean, from that frame
    binned = np.array([0.5, -0.4, 0.0775])
    out = hold(f.frame(binned, ee), "1")  # seen 40 cm away: it moved, the mean starts there
    np.testing.assert_allclose(f.get(out, "obj0_pos"), binned, atol=1e-5)
    out = hold(f.frame(binned + 0.01, ee), "1")
    np.testing.assert_allclose(f.get(out, "obj0_pos"), binned + 0.005, atol=1e-5)
    out = hold(f.frame(table, ee), "2")  # a new episode: nothing held from the last
    np.testing.assert_allclose(f.get(out, "obj0_pos"), table, atol=1e-5)


def test_the_hold_for_moving_image_terms_is_a_resting_hold_and_what_does_not_fit_is_refused(sorter):
    terms, _ = sorter
    assert isinstance(estimate_hold(terms, _image_terms(terms), static=False), RestingHold)
    with pytest.raises(ConfigError, match="hand model"):
        estimate_hold(terms, _image_terms(terms), static=False, calibrate=True)
    with pytest.raises(ConfigError, match="expected objects located from the image"):
        RestingHold(terms, ["obj0_kind"])
    with pytest.raises(ConfigError, match="not observation terms"):
        RestingHold(terms, ["box_pos"])
    with pytest.raises(ConfigError, match="no \\['suction_active'\\]"):
        RestingHold([t for t in terms if t["name"] != "suction_active"], _image_terms(terms))


def test_a_camera_offset_the_hand_measures_corrects_every_object_and_the_sorted_sensor(sorter, sort_geometry):
    """A camera moved 8 cm shows everything as the nominal camera would show it 8 cm away: the perception places
    obj0, resting in its bin, at the resting height where the views agree (outside the bin: not sorted), and the
    carried obj1 freely. The hand seen the same 8 cm off measures the move; the hold then puts both where they
    are, and obj0 reads sorted."""
    terms, obs = sorter
    f, g = Features(terms, obs), sort_geometry
    s = np.array([0.03, -0.045, 0.06])  # 8.1 cm
    ee = np.array([0.45, 0.1, 0.3])
    x0, goal0 = np.array([0.52, -0.35, g.rest_z]), np.array([0.5, -0.4, g.rest_z])
    x1, goal1 = ee + np.array([0.0, 0.0, -0.087]), np.array([0.5, 0.4, g.rest_z])  # on the suction cup
    e0 = np.append(g.at_height(g.project(x0 - s), g.rest_z), g.rest_z)
    assert np.abs(e0[:2] - goal0[:2]).max() > g.bin_inner_half  # as seen: outside its bin
    x = f.frame(e0, ee, suction=1.0, goal=goal0)
    x = f.put(f.put(x, "obj0_sorted", [0.0]), "obj1_sorted", [0.0])
    x = f.put(f.put(f.put(x, "obj1_pos", x1 - s), "obj1_minus_ee", x1 - s - ee), "obj1_bin_minus_obj", goal1 - x1 + s)
    x = x.astype(np.float32)
    hold = RestingHold(terms, _image_terms(terms), geometry=g, calibrate=True)
    assert hold(x, "1") is not None and hold.camera_offset is None  # no hand estimate yet: nothing measured
    bare = f.put(x, "suction_active", [0.0]).astype(np.float32)
    for _ in range(4):  # measured on the bare hand only: a carried object hides the cup
        hold(bare, "1", hand=ee - s)
        hold(x, "1", hand=ee + 0.3)
    assert hold.camera.count == 4
    out = hold(x, "1", hand=ee - s)
    np.testing.assert_allclose(hold.correction, s, atol=1e-6)
    np.testing.assert_allclose(f.get(out, "obj0_pos"), x0, atol=2e-4)
    np.testing.assert_allclose(f.get(out, "obj0_bin_minus_obj"), goal0 - x0, atol=2e-4)
    np.testing.assert_allclose(f.get(out, "obj1_pos"), x1, atol=2e-4)
    np.testing.assert_allclose(f.get(out, "obj1_minus_ee"), x1 - ee, atol=2e-4)
    assert f.get(out, "obj0_sorted")[0] == pytest.approx(1.0) and f.get(out, "obj1_sorted")[0] == pytest.approx(0.0)
    assert "obj0" in hold.held and "obj1" not in hold.held  # obj1 is held by the cup, not resting
    # carried on: the perception, measuring the carried obj1 more than 12 cm from the hand as the moved camera shows
    # it, places it on the table; the suction is still on, so it is still on the cup, and moves with the hand
    ee2 = ee + np.array([0.05, -0.3, 0.02])
    on_table = np.array([0.4, -0.1, g.rest_z])
    y = f.put(f.put(f.put(x, "ee_pos", ee2), "obj1_pos", on_table), "obj1_minus_ee", on_table - ee2)
    out = hold(y.astype(np.float32), "1", hand=ee2 - s)
    np.testing.assert_allclose(f.get(out, "obj1_pos"), ee2 + (x1 - ee), atol=2e-4)
    ee3 = x0 + np.array([0.02, 0.0, 0.1])  # the cup carries obj1 past obj0, 10 cm above it: obj0 still rests
    z = f.put(f.put(y, "ee_pos", ee3), "obj1_minus_ee", on_table - ee3).astype(np.float32)
    out = hold(z, "1", hand=ee3 - s)
    np.testing.assert_allclose(f.get(out, "obj1_pos"), ee3 + (x1 - ee), atol=2e-4)
    np.testing.assert_allclose(f.get(out, "obj0_pos"), x0, atol=2e-4)
    assert "obj0" in hold.held and list(hold.carried) == ["obj1"]
    out = hold(f.put(y, "suction_active", [0.0]).astype(np.float32), "1", hand=ee2 - s)  # let go: seen again
    np.testing.assert_allclose(f.get(out, "obj1_pos"), g.resting(on_table, hold.correction), atol=2e-4)

    near = RestingHold(terms, _image_terms(terms), geometry=g, calibrate=True)
    plain = RestingHold(terms, _image_terms(terms))
    for _ in range(3):  # a 1 cm offset is within the deadband: the hand estimate's own error, nothing corrected
        out, ref = near(bare, "1", hand=ee - np.array([0.01, 0.0, 0.0])), plain(bare, "1")
    assert near.correction is None and near.camera_offset is not None
    np.testing.assert_array_equal(out, ref)
    with pytest.raises(ConfigError, match="located_geometry"):
        RestingHold(terms, _image_terms(terms), calibrate=True)
