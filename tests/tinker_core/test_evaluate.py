"""`tinker_core.evaluate.evaluate` runs the framework's own Pipeline: each edge is spec-checked and measured, episode k
starts from seed + k, and a policy's wrong output is refused naming the edge. Real gymnasium Pendulum."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from tinker_core.errors import ValidationError
from tinker_core.evaluate import evaluate
from tinker_core.module import ModuleBase
from tinker_core.spec import ROUNDING, Spec, spec_from_space


def test_a_function_policy_runs_through_the_pipeline_and_each_edge_is_measured():
    env = gym.make("Pendulum-v1")
    res = evaluate(env, lambda obs: np.array([0.5]), 3, seed=7)
    assert res.episodes == 3 and [r["steps"] for r in res.per_episode] == [200, 200, 200]
    assert set(res.flow) == {"env->perception", "perception->policy", "policy->env"}
    assert all(f["messages"] == 600 for f in res.flow.values())
    # episode k starts from seed + k: the same returns as the loop written out by hand
    want = []
    for k in range(3):
        env.reset(seed=7 + k)
        ret, done = 0.0, False
        while not done:
            _, r, term, trunc, _ = env.step(np.array([0.5], dtype=np.float32))
            ret, done = ret + float(r), term or trunc
        want.append(ret)
    np.testing.assert_allclose([r["return"] for r in res.per_episode], want, rtol=1e-6)


def test_a_policy_output_off_the_envs_action_spec_is_refused_naming_the_edge():
    env = gym.make("Pendulum-v1")
    with pytest.raises(ValidationError, match=r"env\.action"):
        evaluate(env, lambda obs: np.array([0.5, 0.5]), 1)
    with pytest.raises(ValidationError, match=r"env\.action.*upper bound"):
        evaluate(env, lambda obs: np.array([2.5]), 1)  # Pendulum's torque is within +-2


class _Half(ModuleBase):
    """A perception module: halves the observation (its own specs)."""

    input_name, output_name = "obs", "features"

    def __init__(self, spec):
        super().__init__()
        self.input_spec = self.output_spec = spec
        self.resets = 0

    def forward(self, x):
        return (x * 0.5).astype(np.float32)

    def reset(self):
        self.resets += 1


def test_a_perception_module_sits_between_the_env_and_the_policy_and_is_reset_every_episode():
    env = gym.make("Pendulum-v1")
    obs_spec = spec_from_space(env.observation_space)
    half, seen = _Half(Spec(obs_spec.shape, "float32")), []
    res = evaluate(env, lambda f: (seen.append(f), np.zeros(1))[1], 2, perception=half)
    assert res.flow["env->perception"]["messages"] == 400 and len(seen) == 400
    assert max(abs(float(f[0])) for f in seen) <= 0.5 + 1e-6  # cos(theta) halved: the policy saw the features
    assert half.resets == 3  # before the first episode, and as each of the two ended


def test_rounding_beyond_a_bound_is_clipped_and_anything_further_is_left_for_the_check():
    s = Spec((3,), low=-1.0, high=1.0)
    a = np.array([-1.0000001, 0.5, 1.0 + ROUNDING / 2], dtype=np.float32)
    np.testing.assert_array_equal(s.clip_rounding(a), np.array([-1.0, 0.5, 1.0], dtype=np.float32))
    far = np.array([-1.01, 0.0, 1.0], dtype=np.float32)
    np.testing.assert_array_equal(s.clip_rounding(far), far)
    with pytest.raises(ValidationError):
        s.check(s.clip_rounding(far))
    inside = np.zeros(3, dtype=np.float32)
    assert s.clip_rounding(inside) is inside
    np.testing.assert_array_equal(s.clip_rounding(a[None]), s.clip_rounding(a)[None])  # a batch too
