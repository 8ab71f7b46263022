"""`CommandOrder`: which policy commands may still reach the robot, by the state each one answers.

Every command carries the stamp of the measured state it was computed from. Over a middleware, a command can
arrive late (its policy stalled) or after commands for newer states. A late command still goes on when it
answers the newest state or the one before it: holding instead would stop the arm for a cycle. Anything older
is dropped, and so is a command for a state older than one whose command (or deadline hold) already went out,
and one for a state before an episode start the caller rebased on: the robot never steps back to an older plan.

ROS-free: the safety node tells it each trusted state and each command it sends; tests drive it with numbers.
A stamp of 0 means "not stamped" and is always accepted (a driver or a tool that stamps nothing).
"""

from __future__ import annotations


class CommandOrder:
    """The order rule for one command stream; stamps are the answered states' stamps (any monotonic unit)."""

    def __init__(self) -> None:
        self.newest = 0
        """the newest trusted state"""
        self.previous = 0
        """the trusted state before it"""
        self.sent = 0
        """the newest state a command (or a deadline hold) went out for"""
        self.rebased = 0
        """the state the caller rebased on (an episode start); commands for states before it are stale"""
        self.dropped = 0

    def state(self, stamp: int) -> None:
        """A new trusted state arrived."""
        self.previous, self.newest = self.newest, stamp

    def rebase(self, stamp: int) -> None:
        """The caller rebased its limits on the state of ``stamp`` (commands for earlier states were meant for
        another pose)."""
        self.rebased = stamp

    def accepts(self, stamp: int) -> bool:
        """Whether a well-formed command answering the state of ``stamp`` may go on; counts the ones that may not."""
        if stamp > 0 and (stamp < max(self.rebased, self.previous) or stamp < self.sent):
            self.dropped += 1
            return False
        return True

    def went_out(self, stamp: int) -> None:
        """A command (or the deadline's hold) answering the state of ``stamp`` was sent to the robot."""
        self.sent = max(self.sent, stamp)


__all__ = ["CommandOrder"]
