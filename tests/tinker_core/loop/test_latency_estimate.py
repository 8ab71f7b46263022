"""`LatencyEstimator` on a simulated joint-position servo with dead time: a first-order lag toward the command sent
``k`` periods earlier, the arm a policy-like command stream chases. (The servo here is a few lines of numpy, so every
lag and noise level can be set; tests/sim/test_latency_probe.py runs the same estimator on the PyBullet arm.)"""

from __future__ import annotations

import numpy as np
import pytest

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.latency_estimate import MIN_CYCLES, LatencyEstimator

DOF = 6


def drive(est: LatencyEstimator, lag: int, periods: int, rng: np.random.Generator, noise: float = 0.0,
          gain: float = 0.6, q0: np.ndarray | None = None) -> np.ndarray:
    """``periods`` control periods of a servo ``lag`` periods late; commands step toward random goals (0.05 rad a
    period at most, as the action chain limits them). Returns the last measured pose."""
    q = np.zeros(DOF) if q0 is None else q0.copy()
    sent = [q.copy()] * (lag + 1)  # the arm rested at q, commanded there
    goal, c = rng.uniform(-1, 1, DOF), q.copy()
    est.state(q + rng.normal(0, noise, DOF))
    for t in range(periods):
        if t % 15 == 0:
            goal = rng.uniform(-1, 1, DOF)
        c = c + np.clip(goal - c, -0.05, 0.05)
        est.command(c)
        sent.append(c.copy())
        q = q + gain * (sent[-1 - lag] - q)
        est.state(q + rng.normal(0, noise, DOF))
    return q


@pytest.mark.parametrize("lag", [0, 1, 2, 4, 7])
@pytest.mark.parametrize("noise", [0.0, 0.002])
def test_it_finds_the_dead_time_of_the_servo(lag, noise):
    est = LatencyEstimator(DOF)
    drive(est, lag, 200, np.random.default_rng(lag), noise)
    got = est.estimate()
    assert got.periods == lag, got
    assert 1 - got.runner_up >= 2 * (1 - got.fit), got


def test_too_little_data_or_a_still_arm_gives_no_estimate_and_says_why():
    est = LatencyEstimator(DOF)
    drive(est, 2, MIN_CYCLES // 2, np.random.default_rng(0))
    got = est.estimate()
    assert got.periods is None and f"of {MIN_CYCLES} periods" in got.why, got

    still = LatencyEstimator(DOF)
    still.state(np.zeros(DOF))
    for _ in range(100):
        still.command(np.zeros(DOF))
        still.state(np.zeros(DOF))
    got = still.estimate()
    assert got.periods is None and "hardly moved" in got.why, got


def test_states_that_do_not_follow_the_commands_give_no_estimate():
    rng = np.random.default_rng(3)
    est = LatencyEstimator(DOF)
    est.state(rng.normal(0, 0.1, DOF))
    for _ in range(300):
        est.command(rng.normal(0, 0.1, DOF))
        est.state(rng.normal(0, 0.1, DOF))  # another arm's states, or a driver ignoring its commands
    got = est.estimate()
    assert got.periods is None and "no lag explains" in got.why, got


def test_an_episode_start_joins_nothing_across_the_reset():
    """A reset teleports the arm: without the break, the jump would be fitted as motion toward old commands."""
    rng = np.random.default_rng(5)
    est = LatencyEstimator(DOF)
    for episode in range(6):
        q0 = rng.uniform(-1, 1, DOF)
        est.break_sequence(rest=q0)
        drive(est, 3, 30, rng, q0=q0)
    assert est.estimate().periods == 3


def test_a_missing_command_leaves_those_lags_out_and_old_data_fades():
    rng = np.random.default_rng(7)
    est = LatencyEstimator(DOF, window=300)
    drive(est, 1, 400, rng)
    assert est.estimate().periods == 1
    est.break_sequence()
    drive(est, 5, 300, rng)  # the latency grew (a loaded network): the old fit still weighs ...
    assert est.estimate().periods != 5
    drive(est, 5, 2700, rng)  # ... and fades (1/e a window): the old lag's motion fits the new lag badly, so it
    assert est.estimate().periods == 5  # takes some windows before the new one stands out


def test_bad_input_is_refused_naming_where():
    est = LatencyEstimator(DOF, where="safety.command_latency")
    with pytest.raises(ValidationError, match="safety.command_latency.state"):
        est.state(np.full(DOF, np.nan))
    with pytest.raises(ValidationError, match="safety.command_latency.command"):
        est.command(np.zeros(DOF + 1))
    with pytest.raises(ConfigError, match="max_steps"):
        LatencyEstimator(DOF, max_steps=99)
    with pytest.raises(ConfigError, match="window"):
        LatencyEstimator(DOF, window=0)


def test_a_lag_it_could_not_try_is_not_ruled_out():
    """Sequences of 10 periods (broken without a known rest) never show lags above 9: no estimate, and it says which
    lag it lacks, instead of the best of the lags it could try."""
    rng = np.random.default_rng(11)
    est = LatencyEstimator(DOF)
    for _ in range(30):
        est.break_sequence()
        drive(est, 2, 10, rng)
    got = est.estimate()
    assert got.periods is None and got.why.startswith("lag ") and "of 40 periods" in got.why, got


def test_unheard_states_are_skipped_with_the_motors_holding_the_last_command():
    rng = np.random.default_rng(12)
    est = LatencyEstimator(DOF)
    q, sent, c = np.zeros(DOF), [np.zeros(DOF)] * 4, np.zeros(DOF)
    goal = rng.uniform(-1, 1, DOF)
    est.state(q)
    for t in range(300):
        if t % 15 == 0:
            goal = rng.uniform(-1, 1, DOF)
        heard = t % 9 != 4
        if heard:
            c = c + np.clip(goal - c, -0.05, 0.05)
            est.command(c)
        sent.append(c.copy())  # unheard: no new command, the motors keep the last
        q = q + 0.6 * (sent[-1 - 3] - q)
        if (t + 1) % 9 == 4:
            est.skip(1)  # the next state is lost on the way
        else:
            est.state(q)
    assert est.estimate().periods == 3
