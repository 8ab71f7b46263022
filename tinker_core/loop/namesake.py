"""`NamesakeWatch`: one node per name on a domain, the policy without ROS (the safety and sim_robot nodes).

Another node with this node's fully qualified name on the domain is a second graph with the same names: its
commands could reach this graph's robot. Seen within ``window_s`` of start-up the node refuses to run
(``fatal``: the runtime exits 3); seen later it is an ERROR the node reports (``message``) while it lasts.
Fast DDS re-announces participants every 3 s, so a namesake missed in the first burst shows within the window.
After the window the node list is read only every ``every_s`` (it costs a graph query).
"""

from __future__ import annotations

import time
from typing import Callable

NAME_CHECK_WINDOW_S = 6.0
"""Seconds after start-up in which a namesake on the domain makes the process refuse to run."""
NAME_CHECK_EVERY_S = 2.0
"""Seconds between two reads of the node list once the start-up window has passed."""


class NamesakeWatch:
    """Judges the count of nodes named like this one (``name``, fully qualified; itself included)."""

    def __init__(self, name: str, window_s: float = NAME_CHECK_WINDOW_S, every_s: float = NAME_CHECK_EVERY_S,
                 clock: Callable[[], float] = time.monotonic):
        self.name, self.window_s, self.every_s, self.clock = name, float(window_s), float(every_s), clock
        self.started = clock()
        self._checked = float("-inf")
        self.message = ""
        """why this node has a namesake ('' = none): an ERROR in /diagnostics while it lasts"""
        self.fatal = ""
        """set once a namesake was seen within the start-up window: the node must not run"""

    @property
    def starting(self) -> bool:
        """Still within the start-up window (a namesake now is fatal)."""
        return self.clock() - self.started <= self.window_s

    def due(self) -> bool:
        """Whether the node list should be read now: always while starting, every ``every_s`` later."""
        return self.starting or self.clock() - self._checked >= self.every_s

    def update(self, twins: int) -> bool:
        """``twins``: nodes on the domain with this name, this one included. Returns True when a namesake has
        just appeared after the start-up window (the node logs it once)."""
        self._checked = self.clock()
        before = self.message
        self.message = "" if twins <= 1 else (f"{twins - 1} other node(s) named {self.name} on this ROS domain "
                                              f"(a second graph with the same names?)")
        if self.message and self.starting:
            self.fatal = f"{self.message}: refusing to run; give this graph its own namespace or ROS_DOMAIN_ID"
            return False
        return bool(self.message) and not before
