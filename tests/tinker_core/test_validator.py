"""Every validator error path, with the message text pinned (run time: ValidationError; connect
time: SpecError). Messages name the edge/field, what was expected and what came."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.errors import SpecError, ValidationError
from tinker_core.module import ModuleBase
from tinker_core.pipeline import Pipeline
from tinker_core.spec import DictSpec, Spec, spec_from_dict, spec_from_space
from tinker_core.transition import Transition, TransitionBatch, TransitionSpec
from tinker_core.validator import Edge, Validator

OBS = Spec((3,), "float32", [-1.0, -1.0, -8.0], [1.0, 1.0, 8.0])
EDGE = Edge("perception", "policy", "obs")


def run_error(value, spec=OBS, **kw) -> str:
    with pytest.raises(ValidationError) as e:
        Validator().check_value(EDGE, spec, value, **kw)
    return str(e.value)


@pytest.mark.parametrize("value, message", [
    (np.zeros(4, np.float32), "policy.obs: expected float32[3], got float32[4]"),
    (np.zeros(3, np.float64), "policy.obs: expected float32[3], got float64[3]"),
    (np.zeros((1, 3), np.float32), "policy.obs: expected float32[3], got float32[1,3]"),
    (np.array([0, np.nan, 0], np.float32), "policy.obs: expected finite float32[3], got NaN at index [1]"),
    (np.array([0, 0, -np.inf], np.float32), "policy.obs: expected finite float32[3], got inf at index [2]"),
    (np.array([-1.5, 0, 0], np.float32), "policy.obs: expected values >= -1, got -1.5 at index [0] (below lower bound)"),
    (np.array([0, 0, 8.25], np.float32), "policy.obs: expected values <= 8, got 8.25 at index [2] (above upper bound)"),
    ([0.0, 0.0, 0.0], "policy.obs: expected float32[3], got list (not a numpy array)"),
    (0.5, "policy.obs: expected float32[3], got float scalar (not a numpy array)"),
    (None, "policy.obs: expected float32[3], got None (not a numpy array)"),
    ({"x": np.zeros(3, np.float32)}, "policy.obs: expected float32[3], got dict{'x'} (not a numpy array)"),
])
def test_run_time_errors_name_edge_expected_and_got(value, message):
    assert run_error(value) == message


def test_nan_and_inf_are_caught_without_bounds_too():
    unbounded = Spec((2, 2), "float64")
    v = np.zeros((2, 2))
    v[1, 0] = np.nan
    assert run_error(v, unbounded) == "policy.obs: expected finite float64[2,2], got NaN at index [1, 0]"
    v[1, 0] = np.inf
    assert run_error(v, unbounded) == "policy.obs: expected finite float64[2,2], got inf at index [1, 0]"


def test_integer_bounds_and_half_bounded_specs():
    s = Spec((2,), "int64", 0, 4)
    assert run_error(np.array([0, 5]), s) == "policy.obs: expected values <= 4, got 5 at index [1] (above upper bound)"
    lower_only = Spec((2,), "float32", low=0.0)
    assert run_error(np.array([1.0, -0.5], np.float32), lower_only) == \
        "policy.obs: expected values >= 0, got -0.5 at index [1] (below lower bound)"
    Validator().check_value(EDGE, lower_only, np.array([1e30, 0.0], np.float32))  # no upper bound


def test_bounds_check_can_be_switched_off_but_nan_is_still_refused():
    v = Validator(check_bounds=False)
    v.check_value(EDGE, OBS, np.array([5, 5, 50], np.float32))
    with pytest.raises(ValidationError, match="got NaN at index"):
        v.check_value(EDGE, OBS, np.array([np.nan, 0, 0], np.float32))


def test_validation_off_lets_anything_through():
    Validator(enabled=False).check_value(EDGE, OBS, "not even an array")


def test_value_at_bound_passes_despite_float32_rounding():
    s = Spec((), "float32", 0.3, 0.7)  # 0.3 and 0.7 are not exact in float32
    Validator().check_value(EDGE, s, np.array(0.3, np.float32))
    Validator().check_value(EDGE, s, np.array(np.nextafter(np.float32(0.7), np.float32(0)), np.float32))
    assert "above upper bound" in run_error(np.array(np.nextafter(np.float32(0.7), np.float32(1)), np.float32), s)


def test_batched_errors():
    assert run_error(np.zeros((8, 4), np.float32), batched=True) == \
        "policy.obs: expected batch of float32[3], got float32[8,4]"
    assert run_error(np.array(1.0, np.float32), batched=True) == \
        "policy.obs: expected batch of float32[3], got float32[]"
    v = np.zeros((8, 3), np.float32)
    v[5, 2] = 9.0
    assert run_error(v, batched=True) == \
        "policy.obs: expected values <= 8, got 9 at index [5, 2] (above upper bound)"


MULTI = DictSpec({"image": Spec((4, 4, 3), "uint8"), "joints": Spec((7,), "float32")})


def test_dict_spec_errors_name_the_nested_field():
    img = np.zeros((4, 4, 3), np.uint8)
    assert run_error({"image": img, "joints": np.zeros(6)}, MULTI) == \
        "policy.obs['joints']: expected float32[7], got float64[6]"
    assert run_error({"image": img}, MULTI) == \
        "policy.obs: expected keys ['image', 'joints'], got keys ['image'] (missing ['joints'], extra [])"
    assert run_error({"image": img, "joints": np.zeros(7, np.float32), "depth": img}, MULTI) == \
        ("policy.obs: expected keys ['image', 'joints'], got keys ['image', 'joints', 'depth'] "
         "(missing [], extra ['depth'])")
    assert run_error(np.zeros(3, np.float32), MULTI) == \
        "policy.obs: expected {'image': uint8[4,4,3], 'joints': float32[7]}, got float32[3] (not a mapping)"
    nested = DictSpec({"arm": DictSpec({"q": Spec((2,), "float32")})})
    assert run_error({"arm": {"q": np.array([0, np.nan], np.float32)}}, nested) == \
        "policy.obs['arm']['q']: expected finite float32[2], got NaN at index [1]"


def test_transition_spec_errors():
    ts = TransitionSpec(OBS, Spec((1,), "float32", -2, 2))
    ok = Transition(np.zeros(3, np.float32), np.zeros(1, np.float32), 0.0, False, False, {}, np.zeros(3, np.float32))
    ts.check(ok)
    ts.check(TransitionBatch.from_transitions([ok, ok]))
    bad_next = Transition(ok.obs, ok.action, 0.0, False, False, {}, np.zeros(4, np.float32))
    with pytest.raises(ValidationError, match=r"^learner.next_obs: expected float32\[3\], got float32\[4\]$"):
        ts.check(bad_next, "learner")
    with pytest.raises(ValidationError, match=r"^learner.reward: expected finite reward, got nan$"):
        ts.check(Transition(ok.obs, ok.action, float("nan"), False), "learner")
    with pytest.raises(ValidationError, match=r"^learner: expected Transition\(.*\), got ndarray \(not a Transition\)$"):
        ts.check(np.zeros(3), "learner")


# -- connect time ---------------------------------------------------------------------------------

def test_connect_time_incompatibilities():
    v = Validator()
    with pytest.raises(SpecError) as e:
        v.check_edge(EDGE, Spec((4,), "float32"), Spec((3,), "float32"))
    assert str(e.value) == "policy.obs: expected float32[3], got float32[4] (edge perception->policy)"
    with pytest.raises(SpecError) as e:
        v.check_edge(EDGE, Spec((3,), "float64"), Spec((3,), "float32"))
    assert str(e.value) == "policy.obs: expected float32[3], got float64[3] (edge perception->policy)"
    with pytest.raises(SpecError) as e:
        v.check_edge(EDGE, Spec((1,), "float32", -3, 3), Spec((1,), "float32", -2, 2))
    assert str(e.value) == "policy.obs: expected values >= -2, producer may emit lower (-3..-3) (edge perception->policy)"
    with pytest.raises(SpecError) as e:
        v.check_edge(EDGE, Spec((1,), "float32"), Spec((1,), "float32", -2, 2))
    assert str(e.value) == "policy.obs: expected values >= -2, producer may emit lower (unbounded) (edge perception->policy)"
    with pytest.raises(SpecError) as e:
        v.check_edge(EDGE, Spec((1,), "float32", -1, 3), Spec((1,), "float32", -2, 2))
    assert str(e.value) == "policy.obs: expected values <= 2, producer may emit higher (3..3) (edge perception->policy)"
    v.check_edge(EDGE, Spec((1,), "float32", -1, 1), Spec((1,), "float32", -2, 2))  # narrower feeds wider


def test_connect_time_dict_and_kind_mismatch():
    v = Validator()
    with pytest.raises(SpecError) as e:
        v.check_edge(EDGE, DictSpec({"image": MULTI["image"]}), MULTI)
    assert str(e.value) == "policy.obs: consumer needs keys ['joints'] that the producer does not emit (edge perception->policy)"
    with pytest.raises(SpecError) as e:
        v.check_edge(EDGE, DictSpec({**MULTI.fields, "depth": Spec((1,))}), MULTI)
    assert str(e.value) == "policy.obs: producer emits keys ['depth'] that the consumer does not declare (edge perception->policy)"
    with pytest.raises(SpecError) as e:
        v.check_edge(EDGE, DictSpec({"image": MULTI["image"], "joints": Spec((6,), "float64")}), MULTI)
    assert str(e.value) == "policy.obs: ['joints']: expected float32[7], got float64[6] (edge perception->policy)"
    with pytest.raises(SpecError) as e:
        v.check_edge(EDGE, Spec((3,), "float32"), MULTI)
    assert str(e.value) == ("policy.obs: expected {'image': uint8[4,4,3], 'joints': float32[7]}, got float32[3] "
                            "(edge perception->policy)")


def test_missing_output_spec_is_refused():
    with pytest.raises(SpecError) as e:
        Validator().check_edge(EDGE, None, OBS)
    assert str(e.value) == "policy.obs: expects float32[3], but perception declares no output spec (edge perception->policy)"
    Validator().check_edge(EDGE, None, None)  # a consumer that declares nothing accepts anything


class _NoSpec(ModuleBase):
    input_name = "obs"

    def forward(self, x):
        return x


def test_pipeline_connect_refuses_and_names_the_edge(pendulum, parts):
    MLPPolicy, Normalize = parts.MLPPolicy, parts.Normalize

    with pytest.raises(SpecError) as e:
        Pipeline().connect(pendulum, _NoSpec(), MLPPolicy())
    assert str(e.value) == "policy.obs: expects float32[3], but perception declares no output spec (edge perception->policy)"
    wide = MLPPolicy()
    wide.output_spec = Spec((1,), "float32", -3, 3)
    with pytest.raises(SpecError) as e:
        Pipeline().connect(pendulum, Normalize(), wide)
    assert str(e.value) == "env.action: expected values >= -2, producer may emit lower (-3..-3) (edge policy->env)"


def test_run_time_error_inside_the_pipeline_names_the_edge(pendulum, parts):
    MLPPolicy, Normalize = parts.MLPPolicy, parts.Normalize

    class Broken(Normalize):
        def forward(self, x):
            return np.full(3, np.nan, np.float32)

    p = Pipeline().connect(pendulum, Broken(), MLPPolicy())
    with pytest.raises(ValidationError) as e:
        p.run(5)
    assert str(e.value) == "policy.obs: expected finite float32[3], got NaN at index [0]"
    assert p.stats.steps == 0


def test_bad_specs_are_refused_when_declared():
    with pytest.raises(SpecError, match="is not a numpy dtype"):
        Spec((3,), "floaty")
    with pytest.raises(SpecError, match="low > high"):
        Spec((2,), "float32", 1.0, 0.0)
    with pytest.raises(SpecError, match="must not be NaN"):
        Spec((2,), "float32", float("nan"), 1.0)
    with pytest.raises(SpecError, match="do not fit shape"):
        Spec((2,), "float32", [0, 0, 0], 1.0)
    with pytest.raises(SpecError, match="non-negative"):
        Spec((-1,))
    with pytest.raises(SpecError, match="missing 'dtype'"):
        spec_from_dict({"shape": [3]})


def test_specs_round_trip_through_dicts_and_spaces(pendulum):
    s = spec_from_space(pendulum.observation_space)
    assert s == OBS and spec_from_dict(s.to_dict()) == s
    assert spec_from_dict(MULTI.to_dict()) == MULTI
    ts = TransitionSpec(OBS, Spec((1,), "float32", -2, 2))
    assert spec_from_dict(ts.to_dict()) == ts


class _ScriptedEnv(ModuleBase):
    """A pure-Python env whose step ``bad_at`` returns a NaN observation or reward (Pendulum never does)."""

    input_name, output_name = "action", "obs"

    def __init__(self, bad_at: int, what: str):
        super().__init__()
        self.input_spec, self.output_spec = Spec((1,), "float32", -2, 2), OBS
        self.bad_at, self.what, self.n = bad_at, what, 0

    def reset_env(self, seed=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.n += 1
        obs = np.full(3, 0.5, np.float32)
        reward = -1.0
        if self.n == self.bad_at:
            if self.what == "obs":
                obs[1] = np.nan
            else:
                reward = float("nan")
        return obs, reward, False, False, {}


# "equal": the learner's specs equal those already checked this cycle (only next_obs and reward are
# checked again); "wider": they differ, so the whole transition is checked against the learner's spec.
@pytest.mark.parametrize("learner_obs", [OBS, Spec((3,), "float32", -10, 10)], ids=["equal", "wider"])
@pytest.mark.parametrize("what, message", [
    ("obs", "learner.transition.next_obs: expected finite float32[3], got NaN at index [1]"),
    ("reward", "learner.transition.reward: expected finite reward, got nan"),
])
def test_learner_edge_is_validated_at_run_time(parts, learner_obs, what, message):
    learner = parts.KeepLearner(obs=learner_obs)
    p = Pipeline().connect(_ScriptedEnv(5, what), parts.Normalize(), parts.MLPPolicy(), learner)
    with pytest.raises(ValidationError) as e:
        p.run(10)
    assert str(e.value) == message
    assert len(learner.seen) == 4 and p.stats.steps == 5
