"""The watchdog: it reads the injected monotonic clock (never a caller's or a message's time), counts misses only in
a row, executes each action once, and never executes an action from the future; alone and inside the wrapper."""

from __future__ import annotations

import numpy as np
import pytest

from tinker_safety import Outcome, Watchdog
from tinker_core.errors import ConfigError

ZERO = np.zeros(7)


@pytest.fixture
def wd_guard(make_guard, clock, home):
    """Limits only, watchdog timeout 50 ms, 3 stale ticks in a row latch; armed at HOME on the manual clock."""
    guard = make_guard(clock=clock, collision_check=False, workspace_min=None, workspace_max=None,
                       watchdog_timeout=0.05, watchdog_misses_to_estop=3)
    assert guard.reset(home, ZERO)
    return guard


def test_misses_that_are_not_in_a_row_never_latch(wd_guard, clock, home):
    """A fresh action between stale ticks restarts the count (issue 22: the policy paused 60 ms four times)."""
    wd_guard(home, home, ZERO)  # the first target at the measured pose ends the start ramp
    for k in range(6):
        cmd, status = wd_guard.tick(clock.advance(0.06), home, ZERO)
        assert status.outcome is Outcome.HELD and "stale tick 1/3" in status.reasons[0], status.reasons
        assert np.array_equal(cmd, home)
        cmd, status = wd_guard(home + 0.01, home, ZERO)  # the late action arrives: it is fresh
        assert status.outcome is Outcome.PASSED, status.summary
    assert not wd_guard.estopped
    for k in range(1, 4):  # three stale ticks in a row do latch
        _, status = wd_guard.tick(clock.advance(0.06), home, ZERO)
        assert f"stale tick {k}/3" in status.reasons[0]
    assert wd_guard.estopped and wd_guard.estop_cause == "watchdog"


def test_a_stalled_clock_does_not_keep_an_action_fresh(wd_guard, clock, home):
    """With the clock stuck, the one action is executed once; the ticks after it are misses and latch."""
    wd_guard.feed(home + 0.01)
    cmd, status = wd_guard.tick(clock(), home, ZERO)
    assert status.outcome is Outcome.PASSED and np.allclose(cmd, home + 0.01)
    for k in range(1, 4):
        cmd, status = wd_guard.tick(clock(), home, ZERO)
        assert status.outcome >= Outcome.HELD and np.array_equal(cmd, home)
        assert status.reasons[0].startswith("watchdog: no new action since the last one was executed"), status.reasons
        assert f"stale tick {k}/3" in status.reasons[0]
    assert wd_guard.estopped and wd_guard.estop_cause == "watchdog"


def test_an_action_from_the_future_is_never_executed(wd_guard, clock, home):
    wd_guard.feed(home + 0.01, now=clock() + 3600.0)  # stamped an hour ahead
    cmd, status = wd_guard.tick(clock(), home, ZERO)
    assert status.outcome is Outcome.HELD and np.array_equal(cmd, home)
    assert status.reasons[0].startswith("watchdog: newest action is stamped 3600000.0 ms in the future"), status.reasons
    wd_guard.feed(home + 0.01)
    clock.advance(-1.0)  # the clock runs backwards: the action now lies 1 s ahead of it
    cmd, status = wd_guard.tick(clock(), home, ZERO)
    assert status.outcome is Outcome.HELD and np.array_equal(cmd, home)
    assert "1000.0 ms in the future" in status.reasons[0]
    wd_guard.feed(home + 0.02)  # arrives after the jump: fresh on the clock as it now reads
    cmd, status = wd_guard.tick(clock(), home, ZERO)
    assert status.outcome is Outcome.PASSED and np.allclose(cmd, home + 0.02)


def test_the_watchdog_reads_the_injected_clock_not_the_time_it_is_given(wd_guard, clock, home):
    """A caller passing a message stamp as ``now`` cannot keep a dead policy's last action fresh."""
    t_action = clock()
    wd_guard.feed(home + 0.01)
    clock.advance(0.2)  # the policy died 200 ms ago
    cmd, status = wd_guard.tick(t_action, home, ZERO)  # 'now' taken from an old stamp
    assert status.outcome is Outcome.HELD and np.array_equal(cmd, home)
    assert status.reasons[0].startswith("watchdog: newest action is 200.0 ms old (timeout 50.0 ms)"), status.reasons


def test_a_direct_call_executes_the_action_so_a_tick_after_it_is_a_miss(wd_guard, clock, home):
    wd_guard(home + 0.01, home, ZERO)
    cmd, status = wd_guard.tick(clock.advance(0.01), home, ZERO)
    assert status.outcome is Outcome.HELD and "no new action" in status.reasons[0]


def test_watchdog_alone_counts_in_a_row_and_reports_why(clock):
    wd = Watchdog(timeout=0.05, misses_to_latch=2, clock=clock)
    v = wd.tick()
    assert not v.fresh and not v.latch and v.misses == 0 and v.reason == "no action received yet"
    wd.feed()
    v = wd.tick()
    assert v.fresh and v.misses == 0 and v.reason == ""
    clock.advance(0.08)
    v = wd.tick()
    assert not v.fresh and v.misses == 1 and not v.latch
    assert v.reason == "newest action is 80.0 ms old (timeout 50.0 ms)"
    wd.executed()  # a fresh action executed directly: the streak restarts
    assert wd.misses == 0
    clock.advance(0.08)
    assert wd.tick().misses == 1
    v = wd.tick()
    assert v.misses == 2 and v.latch
    wd.reset()
    assert wd.misses == 0 and wd.tick().reason == "no action received yet"


def test_watchdog_serves_an_action_for_as_many_ticks_as_its_timeout_allows(clock):
    """A loop ticking faster than the policy: timeout 50 ms at 10 ms ticks serves each action 5 times."""
    wd = Watchdog(timeout=0.05, misses_to_latch=3, clock=clock, ticks_per_action=5)
    wd.feed()
    assert all(wd.tick().fresh for _ in range(5))  # the clock is stalled: the tick count still runs out
    assert not wd.tick().fresh


@pytest.mark.parametrize("kwargs, message", [
    ({"timeout": 0.0}, "Watchdog.timeout: expected a finite number > 0 s, got 0.0"),
    ({"misses_to_latch": 0}, "Watchdog.misses_to_latch: expected an integer >= 1, got 0"),
    ({"ticks_per_action": 1.5}, "Watchdog.ticks_per_action: expected an integer >= 1, got 1.5"),
])
def test_watchdog_settings_are_checked(kwargs, message):
    args = {"timeout": 0.05, "misses_to_latch": 3, **kwargs}
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Watchdog(**args)
