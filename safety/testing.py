"""The SafetyWrapper's safety property, as hypothesis strategies plus a checker.

Used by ``tests/safety`` (300 examples in CI) and ``benchmarks/safety.py`` (100,000 checked cases or
more), so both run exactly the same property. Needs ``hypothesis`` (the dev extra); nothing at run time
imports this module.

The property, for any action whatsoever (NaN, inf, huge, wrong shape or dtype, not an array) and
any valid measured state (positions within the URDF limits plus tolerance, finite velocities; the
jump check is off, as each call draws an independent state):

- the command is a float64 array of the robot's DoF, finite, inside the URDF position limits or
  between a measured pose beyond one and that limit;
- it is inside the limits minus margin wherever the robot already is;
- it moves no faster than the speed limit from the measured position (as measured, not clipped);
- an action that is not a finite float array of the right shape is never passed through;
- every intervention comes with a reason.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinker_safety.safety_wrapper import SafetyWrapper
from tinker_safety.status import Outcome, SafetyStatus
from tinker_core.errors import ConfigError

CI_EXAMPLES = 300
"""hypothesis examples per property test in CI (each example is a run of 1 to 8 checked calls)"""
BENCH_CASES = 100_000
"""checked calls (generated action and state pairs) in a benchmark run"""

FLOAT_DTYPES = [np.float64, np.float32, np.float16]
OTHER_DTYPES = [np.int64, np.int8, np.uint16, np.bool_, np.complex128]


SPEED_SCALES = [0.0, 1.0, 5.0, 30.0, 1e6, 1e300]
"""standard deviations of the measured joint speeds, rad/s: at rest, moving, above the limit, absurd"""
ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True)
SPECIAL_FLOAT = st.one_of(st.sampled_from([np.nan, np.inf, -np.inf, 1e308, -1e308, 5e-324, -0.0, 65520.0]), ANY_FLOAT)
"""NaN, inf, huge (65520 overflows float16), subnormal, negative zero, or any float hypothesis finds"""


def scenarios(guard: SafetyWrapper, max_steps: int = 8) -> st.SearchStrategy[list[tuple[Any, np.ndarray, np.ndarray]]]:
    """A run of 1 to ``max_steps`` (action, q, qd) calls for ``guard``; each call is one checked case.

    Hypothesis picks the kind of each value and the values that matter (range ends, NaN, inf, huge,
    subnormal, wrong shapes and dtypes, non-arrays); a seeded numpy generator fills in the bulk of
    each vector, so a case costs a few draws instead of dozens and 100,000 cases stay affordable.
    """
    lim, tol = guard.limits, guard.config.state_tolerance
    dof = lim.dof
    q_lo, q_hi = lim.lower - tol, lim.upper + tol
    # edge: -1, or put one joint exactly on the lower (edge < dof) or upper end of the valid range
    step = st.tuples(st.integers(-1, 2 * dof - 1), st.sampled_from(SPEED_SCALES), _action_recipes(dof))

    def build(drawn: tuple[int, list]) -> list[tuple[Any, np.ndarray, np.ndarray]]:
        seed, recipes = drawn
        rng = np.random.default_rng(seed)
        steps = []
        for edge, speed, recipe in recipes:
            q = rng.uniform(q_lo, q_hi)
            if edge >= 0:
                q[edge % dof] = (q_lo if edge < dof else q_hi)[edge % dof]
            qd = rng.normal(0.0, speed, dof)
            steps.append((_make_action(recipe, rng, q), q, qd))
        return steps

    return st.tuples(st.integers(0, 2**32 - 1), st.lists(step, min_size=1, max_size=max_steps)).map(build)


def _action_recipes(dof: int) -> st.SearchStrategy[tuple]:
    """What kind of action to make (realized by `_make_action`): strategies are built once, drawn cheaply."""
    shapes = [(), (0,), (1,), (dof - 1,), (dof + 1,), (2 * dof,), (1, dof), (dof, 1), (2, dof)]
    non_array = st.one_of(st.none(), ANY_FLOAT, st.integers(), st.text(max_size=8),
                          st.lists(ANY_FLOAT, min_size=dof, max_size=dof), st.tuples(ANY_FLOAT, ANY_FLOAT),
                          st.dictionaries(st.text(max_size=3), ANY_FLOAT, max_size=2))
    kinds = [  # (share in %, recipe); mostly well-formed, so runs reach the limits instead of latching
        (35, st.tuples(st.just("near"))),
        (35, st.tuples(st.just("far"))),
        (12, st.tuples(st.just("special"), st.sampled_from(["near", "far"]), st.sampled_from(FLOAT_DTYPES),
                       st.integers(0, dof - 1), SPECIAL_FLOAT)),
        (6, st.tuples(st.just("shape"), st.sampled_from(shapes), SPECIAL_FLOAT)),
        (6, st.tuples(st.just("dtype"), st.sampled_from(OTHER_DTYPES), st.integers(-3, 3))),
        (6, st.tuples(st.just("raw"), non_array)),
    ]
    table = [strategy for share, strategy in kinds for _ in range(share)]

    @st.composite
    def recipe(draw: Callable) -> tuple:
        return draw(table[draw(st.integers(0, len(table) - 1))])

    return recipe()


def _make_action(recipe: tuple, rng: np.random.Generator, q: np.ndarray) -> Any:
    kind = recipe[0]
    if kind == "near":
        return q + rng.normal(0.0, 0.1, q.shape[0])
    if kind == "far":
        return rng.uniform(-4.0, 4.0, q.shape[0])
    if kind == "special":  # one joint set to a special value (NaN, inf, huge, subnormal...), any float dtype
        _, base, dtype, k, v = recipe
        a = _make_action((base,), rng, q)
        a[k] = v
        with np.errstate(over="ignore", invalid="ignore"):  # huge values become inf in float16/float32: wanted
            return a.astype(dtype)
    if kind == "shape":
        return np.full(recipe[1], recipe[2])
    if kind == "dtype":
        return np.full(q.shape[0], recipe[2]).astype(recipe[1])
    return recipe[1]


def is_valid_action(action: Any, dof: int) -> bool:
    return (type(action) is np.ndarray and action.shape == (dof,) and action.dtype.kind == "f"
            and bool(np.isfinite(action.astype(np.float64)).all()))


def check_command(guard: SafetyWrapper, action: Any, q: np.ndarray, cmd: Any, status: Any) -> None:
    """Assert the safety property for one call (``q`` is a valid measured position)."""
    lim = guard.limits
    assert type(cmd) is np.ndarray and cmd.dtype == np.float64 and cmd.shape == (lim.dof,), repr(cmd)
    assert np.isfinite(cmd).all(), cmd
    q = np.asarray(q, dtype=np.float64)
    # inside the URDF limits, or between a pose already beyond one and that limit (never further out)
    assert np.all(cmd >= np.minimum(lim.lower, q)) and np.all(cmd <= np.maximum(lim.upper, q)), (cmd, q)
    assert np.all(cmd >= np.minimum(guard.command_lower, q)), (cmd, q)
    assert np.all(cmd <= np.maximum(guard.command_upper, q)), (cmd, q)
    max_step = lim.velocity * guard.config.velocity_scale * guard.config.control_period
    assert np.all(np.abs(cmd - q) <= max_step * (1 + 1e-12) + 1e-12), (cmd, q, max_step)
    assert isinstance(status, SafetyStatus) and isinstance(status.outcome, Outcome)
    assert status.outcome is Outcome.PASSED or status.reasons, status
    if not is_valid_action(action, lim.dof):
        assert status.outcome >= Outcome.HELD, (action, status)
    elif status.outcome is Outcome.PASSED:
        assert np.array_equal(cmd, action.astype(np.float64))


def property_test(guard: SafetyWrapper, max_examples: int, derandomize: bool = True,
                  on_case: Callable[[], None] | None = None) -> Callable[[], None]:
    """A hypothesis test of the property on ``guard``; calling it runs ``max_examples`` scenarios.

    Each call draws an independent measured state, so ``guard`` must have the jump check off
    (``state_jump_scale=None``); sequences of states, with the jump check, are `tinker_safety.sequences`' job.
    ``on_case`` is called after each checked call (the benchmark counts cases with it).
    """
    if guard.config.state_jump_scale is not None:
        raise ConfigError("property_test: expected a guard with state_jump_scale=None (every call draws an "
                          f"independent state), got {guard.config.state_jump_scale}")

    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=derandomize,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])
    @given(scenarios(guard), st.booleans())
    def run(steps: list, warm: bool) -> None:
        q0, qd0 = steps[0][1], steps[0][2]
        assert guard.reset(q0, qd0), guard.last_reset_refusal
        if warm:  # a first target at the measured pose ends the start ramp: later steps run at full speed
            guard(np.clip(q0, guard.limits.lower, guard.limits.upper), q0, qd0)
        for action, q, qd in steps:
            cmd, status = guard(action, q, qd)
            check_command(guard, action, q, cmd, status)
            if on_case is not None:
                on_case()

    return run
