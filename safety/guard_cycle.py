"""`GuardCycle`: the safety node's decisions per state, command and deadline, without ROS.

The SafetyWrapper judges one command against one measured state. Between topics there is more to decide, and
this class decides it (the node only turns messages into calls and `Ports` into publishers and a timer):

- **cycles**: every trusted state opens a cycle and arms the deadline; a policy command answering it (same
  stamp, or no stamp) closes it; a deadline that passes first is a missed cycle, answered by a hold;
  ``watchdog_misses_to_estop`` misses **in a row** latch the e-stop (one served cycle resets the count);
- **trust**: each state goes through the `StateGate` (publishers, stamps, plausible motion); while the newest
  state is refused, the robot holds at the last command sent, never at the refused state; a declared episode
  start rebases the wrapper;
- **order**: a late command still goes on when it answers the newest state or the one before (`CommandOrder`);
- **the policy's lifecycle**: while the policy is not active, cycles are held and no miss counted; its first
  command after re-activation starts through the start ramp;
- **the e-stop**: only `reset` with a trusted measured state clears it;
- **a person's takeover** (`takeover`, a `Takeover`; None: none): a fresh teleop target replaces the policy's
  target of a cycle as the candidate, and goes through the same wrapper; the command says so (``teleop``).

The clock is the receiver's monotonic clock (``clock``), never message stamps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from tinker_safety.command_order import CommandOrder
from tinker_safety.safety_wrapper import SafetyWrapper
from tinker_safety.state_gate import StateGate
from tinker_safety.takeover import Takeover


@dataclass(slots=True)
class Command:
    """What goes to the robot: joint positions and the cycle they answer."""

    q: np.ndarray
    stamp: int
    cycle: int
    version: str
    status: str
    """passed, clipped, rate_limited, held, estopped... (the SafetyWrapper's outcome, lower case)"""
    why: str = ""
    teleop: np.ndarray | None = None
    """the person's joint target this command was made from (None: the policy's)"""
    measured: np.ndarray | None = None
    """the trusted measured pose the command was judged at (set with ``teleop``: the learner's action needs it)"""


class Ports(Protocol):
    """What the cycle needs from its host (the ROS node, or a test)."""

    def send(self, command: Command) -> None:
        """Publish the command to the robot."""

    def arm_deadline(self) -> None:
        """(Re)start the one-shot deadline; when it fires, the host calls `GuardCycle.deadline`."""

    def cancel_deadline(self) -> None:
        """Stop the deadline (the cycle was served, or no cycle is open)."""

    def log(self, level: str, message: str) -> None:
        """``level``: info, warning or error."""

    def estop_changed(self) -> None:
        """The e-stop was latched or cleared."""

    def expect_commands(self, expected: bool, arrived: bool) -> None:
        """The policy's commands must flow (``expected``) or may be silent; ``arrived``: one has just come."""


class GuardCycle:
    """One per safety node, for its whole life; `configure` gives it a wrapper and a gate, `release` takes them."""

    def __init__(self, ports: Ports, clock: Callable[[], float] = time.monotonic):
        self.ports, self.clock = ports, clock
        self.guard: SafetyWrapper | None = None
        self.gate: StateGate | None = None
        self.active = False
        self.q: np.ndarray | None = None  # the last TRUSTED measured state
        self.qd: np.ndarray | None = None
        self._state_stamp = 0
        self._state_cycle = 0
        self._state_seq = 0  # trusted states seen: the cycles (never message stamps)
        self._served_seq = 0
        self.misses_in_row = 0
        self._last_cmd_t = 0.0
        self.last_sent: np.ndarray | None = None
        self.untrusted = ""  # why the newest state was refused ('' = trusted)
        self.refused_states: dict[str, int] = {}  # by kind (StateGate.check)
        self.policy_active = True  # until the policy's lifecycle says otherwise
        self._restart_ramp = False  # activated before any state: the first state starts the ramp
        self._policy_returning = False  # the policy was seen inactive: its next command starts the ramp
        self.order = CommandOrder()  # which late commands may still go on (order.dropped: the ones that may not)
        self.holds = 0
        self.no_command = 0
        self.ramp_restarts = 0  # safe-start ramps begun by activation or a returning policy
        self.deadline_misses = 0
        self.takeover: Takeover | None = None  # a person's teleop targets (the host offers them; None: no teleop)

    # --- configuration and lifecycle ------------------------------------------------------------
    def configure(self, guard: SafetyWrapper, gate: StateGate) -> None:
        self.guard, self.gate = guard, gate

    def release(self) -> None:
        """The node is cleaned up: wrapper, gate and measured state go; counters and the policy's state stay."""
        if self.guard is not None:
            self.guard.close()
        self.guard = self.gate = None
        self.q = self.qd = None
        self.last_sent = None
        self._last_cmd_t = 0.0

    def activate(self) -> None:
        if self.q is not None and not self.guard.estopped:
            self._start_ramp(self.q, self.qd)  # the start ramp begins at the measured pose
        self._restart_ramp = self.q is None
        self._served_seq = self._state_seq
        self.misses_in_row = 0
        self.active = True

    def deactivate(self) -> None:
        self.hold("deactivated")
        self.active = False
        self.ports.cancel_deadline()

    # --- inputs -----------------------------------------------------------------------------------
    @property
    def states_trusted(self) -> int:
        """Trusted states so far (each one a cycle; a refused state does not count)."""
        return self._state_seq

    def state(self, q: np.ndarray, qd: np.ndarray, stamp: int, cycle: int | None, episode: int | None,
              publishers: int, now_ns: int, mono_ns: int) -> None:
        """A measured state from the state topic (``now_ns``: the stamp clock; ``mono_ns``: monotonic)."""
        kind, why = self.gate.check(q, stamp, publishers, now_ns, mono_ns, episode)
        if why:
            self._refuse_state(kind, why)
            return
        if self.gate.new_episode:  # the simulator moved the arm itself: a new safe start from where it is now
            if not self.guard.rebase(q, qd):
                self._refuse_state("rebase", f"{self.gate.topic}: episode start: {self.guard.last_reset_refusal}")
                return
            self.last_sent = self.guard.last_command
            self.order.rebase(stamp)  # commands answering states before it were meant for another pose
        if self.untrusted:  # the guard's limits apply from this measured pose on, as for every command
            self.ports.log("info", f"{self.gate.topic}: states trusted again")
            self.untrusted = ""
        self.q, self.qd = q, qd
        if self._restart_ramp and self.active and not self.guard.estopped:
            self._start_ramp(q, qd)
            self._restart_ramp = False
        self._state_stamp = stamp
        self.order.state(stamp)
        self._state_cycle = cycle if cycle is not None else self._state_cycle + 1
        self._state_seq += 1
        if self.active:
            self.ports.arm_deadline()  # this state's command is due within the deadline

    def command(self, target: np.ndarray, valid: bool, meta: dict[str, str], now_ns: int | None = None) -> bool:
        """A policy command; ``valid``: it passed the wire checks (an invalid one still goes to the wrapper,
        which holds, counts and may latch); ``now_ns``: the teleop stamps' clock (None: no takeover this cycle).
        Returns whether it went to the wrapper."""
        if not self.active or self.q is None:
            return False
        if self.untrusted:
            self._hold_untrusted()
            return False
        stamp = int(meta["stamp_ns"]) if meta.get("stamp_ns", "").isdigit() else 0
        if meta.get("stop") == "1":
            self.hold("policy node stopped")
            return False
        if valid and not self.order.accepts(stamp):  # too old to go on (tinker_safety.command_order)
            return False
        if not self.policy_active:  # a command before its activation event: the policy is back
            self.policy_active, self._policy_returning = True, True
            self.ports.expect_commands(True, True)
        if self._policy_returning and not self.guard.estopped:
            self._start_ramp(self.q, self.qd)
        self._policy_returning = False
        teleop = self.takeover.pick(now_ns) if self.takeover is not None and valid and now_ns is not None else None
        if teleop is not None:  # the person's target is the candidate: the same wrapper judges it
            target = teleop
        # feed + tick: a fresh action answers this cycle and ends a run of missed ones
        self._last_cmd_t = now = self.clock()
        was = self.guard.estopped
        self.guard.feed(target, now)
        cmd, status = self.guard.tick(now, self.q, self.qd)
        self.order.went_out(stamp)
        if stamp in (0, self._state_stamp):  # the answer to the newest state (a late one does not close it)
            self._served_seq = self._state_seq
            self.ports.cancel_deadline()
            self.misses_in_row = 0
        self._send(cmd, stamp, int(meta.get("cycle", 0)), meta.get("version", ""), status.outcome.name.lower(),
                   status.summary[:240] if status.intervened else "", teleop)
        if self.guard.estopped and not was:
            self.ports.log("error", f"e-stop latched: {status.summary}")
            self.ports.estop_changed()
        elif status.outcome.name == "ESTOPPED":
            self.ports.log("warning", f"holding: {status.summary}")
        return True

    def policy_lifecycle(self, active: bool, label: str) -> None:
        """The policy reached a primary state: ``active`` or not (``label``: its name)."""
        if active != self.policy_active:  # a deactivated policy's silence is no fault; an activated one is waited for
            self.ports.expect_commands(active, False)
        if not active:
            self._policy_returning = True  # its next command starts through the ramp
            if self.policy_active:
                self.hold(f"policy {label}")
        self.policy_active = active

    def deadline(self) -> None:
        """The deadline of the newest state passed: a missed cycle unless it was served meanwhile."""
        self.ports.cancel_deadline()  # one shot per state
        if not self.active or self.q is None or self.untrusted or self._served_seq >= self._state_seq:
            return
        self._served_seq = self._state_seq  # this cycle is answered here
        if not self.policy_active:  # a deactivated policy: hold, no miss
            self.hold("policy inactive")
            return
        self.deadline_misses += 1
        self.misses_in_row += 1
        was = self.guard.estopped
        # the deadline decided the cycle is missed: the tick must see the last action as stale even when
        # states came close together (never run an action twice)
        now = max(self.clock(), self._last_cmd_t + self.guard.config.watchdog_timeout + 1e-3)
        cmd, status = self.guard.tick(now, self.q, self.qd)
        limit = self.guard.config.watchdog_misses_to_estop
        if self.misses_in_row >= limit and self._last_cmd_t and not self.guard.estopped:
            # backstop, should the guard stop counting misses after an action it has consumed: this count
            # (in a row, since the last action the guard saw) latches too
            self.guard.estop(f"watchdog: {self.misses_in_row} cycles in a row without a policy command")
        self.holds += status.outcome.name in ("HELD", "ESTOPPED")
        self._send(cmd, self._state_stamp, self._state_cycle, "", status.outcome.name.lower())
        self.order.went_out(self._state_stamp)  # this state's hold went out
        if self.guard.estopped != was:
            self.ports.log("error", f"e-stop latched: {status.summary}")
            self.ports.estop_changed()

    # --- stop and reset ---------------------------------------------------------------------------
    def hold(self, why: str) -> None:
        """The stop: hold at the measured pose, or at the last command sent while the state is not trusted."""
        if self.q is None:
            return
        if self.untrusted:
            self._hold_untrusted()
            return
        self.holds += 1
        status = "estopped" if self.guard is not None and self.guard.estopped else "held"
        self._send(self.q, self._state_stamp, self._state_cycle, "", status, why)

    def estop(self, why: str) -> None:
        self.guard.estop(why)
        self.hold("e-stop requested")
        self.ports.estop_changed()

    def reset(self) -> tuple[bool, str]:
        """Clear the e-stop from the trusted measured pose; (done, message for the operator)."""
        if self.guard is None or self.q is None:
            return False, "no joint state yet: reset needs a measured pose"
        if self.untrusted:
            return False, f"reset refused: the measured state is not trusted: {self.untrusted}"
        ok = self.guard.reset(self.q, self.qd)
        if ok:
            self.misses_in_row, self._last_cmd_t = 0, 0.0
        self.ports.estop_changed()
        return ok, ("e-stop cleared; the next targets ramp from the measured pose" if ok
                    else self.guard.last_reset_refusal)

    # --- internals --------------------------------------------------------------------------------
    def _start_ramp(self, q: np.ndarray, qd: np.ndarray) -> None:
        """A new safe start from the measured pose (only while no e-stop is latched: reset would clear it).
        The guard forgets the last action, so the miss count starts again with the next one."""
        self.guard.reset(q, qd)
        self.ramp_restarts += 1
        self.misses_in_row, self._last_cmd_t = 0, 0.0

    def _refuse_state(self, kind: str, why: str) -> None:
        """An untrusted state: not used; the robot holds at the last command sent (never at that state)."""
        self.refused_states[kind] = self.refused_states.get(kind, 0) + 1
        if not self.untrusted:
            self.ports.log("error", f"state refused, holding: {why}")
        self.untrusted = why
        self.ports.cancel_deadline()  # a refused state opens no cycle

    def _hold_untrusted(self) -> None:
        if self.last_sent is not None and self.active:
            self.holds += 1
            self._send(self.last_sent, self._state_stamp, self._state_cycle, "", "held", self.untrusted)

    def _send(self, cmd: np.ndarray | None, stamp: int, cycle: int, version: str, status: str, why: str = "",
              teleop: np.ndarray | None = None) -> None:
        if cmd is None:  # the guard has no valid measured state yet: nothing may be commanded
            self.no_command += 1
            return
        self.last_sent = np.array(cmd, dtype=np.float64)
        self.ports.send(Command(self.last_sent, stamp, cycle, version, status, why, teleop,
                                None if teleop is None else self.q.copy()))
