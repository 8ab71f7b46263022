"""`CommandOrder`: which late policy commands may still reach the robot (the safety node's rule, ROS-free)."""

from __future__ import annotations

from tinker_safety.command_order import CommandOrder


def _order(*states: int) -> CommandOrder:
    o = CommandOrder()
    for s in states:
        o.state(s)
    return o


def test_a_command_for_the_newest_or_the_previous_state_goes_on_older_ones_do_not():
    o = _order(10, 11, 12)
    assert o.accepts(12) and o.accepts(11)  # on time, and one cycle late (holding would stop the arm)
    assert not o.accepts(10) and o.dropped == 1  # two cycles late: dropped and counted
    assert o.accepts(0)  # an unstamped command (a tool, a driver that stamps nothing) is not judged by age


def test_never_back_to_an_older_plan_once_a_newer_command_or_hold_went_out():
    # what CI saw: cycle 11's late command published after cycles 12 and 13 had been answered
    o = _order(10, 11)
    o.went_out(11)  # the deadline's hold for 11
    assert o.accepts(11)  # the late command for the same state may follow its hold
    o.state(12)
    o.went_out(12)
    assert not o.accepts(11)  # the newest state's command already went out
    o.state(13)
    assert not o.accepts(11) and o.accepts(12) and o.dropped == 2


def test_commands_from_before_an_episode_start_are_stale():
    o = _order(100, 101)
    o.rebase(101)  # the simulator teleported the arm at state 101
    assert not o.accepts(100)  # meant for the pose before the reset, though only one cycle old
    assert o.accepts(101)
