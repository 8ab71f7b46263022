"""NamesakeWatch on an injected clock: a namesake while starting is fatal, later an error reported while it lasts."""

from __future__ import annotations

from tinker_core.loop.namesake import NAME_CHECK_WINDOW_S, NamesakeWatch


class Clock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


def test_a_node_alone_on_its_name_has_no_namesake():
    w = NamesakeWatch("/safety", clock=Clock())
    assert w.update(1) is False and w.message == "" and w.fatal == ""


def test_a_namesake_seen_while_starting_is_fatal_and_names_the_node_and_the_fix():
    clock = Clock()
    w = NamesakeWatch("/safety", clock=clock)
    clock.t += NAME_CHECK_WINDOW_S - 0.5
    assert w.update(3) is False  # fatal, not a late appearance to log
    assert w.message == "2 other node(s) named /safety on this ROS domain (a second graph with the same names?)"
    assert w.fatal.startswith(w.message) and "refusing to run" in w.fatal and "ROS_DOMAIN_ID" in w.fatal


def test_a_namesake_after_start_up_is_reported_while_it_lasts_and_logged_once_when_it_appears():
    clock = Clock()
    w = NamesakeWatch("/ns/sim_robot", clock=clock)
    assert w.update(1) is False
    clock.t += NAME_CHECK_WINDOW_S + 1
    assert w.update(2) is True and "1 other node(s) named /ns/sim_robot" in w.message
    assert w.fatal == ""  # too late to refuse: an error in /diagnostics instead
    clock.t += 5
    assert w.update(2) is False and w.message  # still there: not a new appearance
    clock.t += 5
    assert w.update(1) is False and w.message == ""  # gone: clear


def test_the_node_list_is_read_at_every_check_while_starting_then_every_few_seconds():
    clock = Clock()
    w = NamesakeWatch("/safety", every_s=2.0, clock=clock)
    w.update(1)
    assert w.due()  # starting: always
    clock.t += NAME_CHECK_WINDOW_S + 0.1
    assert w.due()  # the last read was long ago
    w.update(1)
    clock.t += 1.0
    assert not w.due()
    clock.t += 1.0
    assert w.due()
