"""`Takeover`: whether a person's teleoperation target replaces the policy's joint target this cycle.

Human-in-the-loop fine-tuning (HIL-SERL and the like) lets a person take over from the policy: their joint target
then goes to the robot, and the cycle is recorded as an intervention for the learner. The target is only a
*candidate*: it goes through the same `SafetyWrapper` as the policy's (joint limits, rate limits, workspace,
collision, watchdog, a latched e-stop), so a person cannot command more than the policy can.

The arbiter's rules, on the receiver's clock (the node's ROS clock, the one JointState stamps are on):

- a teleop message stamped more than ``max_future_s`` ahead of the clock, or more than ``max_age_s`` behind it, is
  refused and counted (``future``, ``too_old``); a wrong joint count is refused (``shape``);
- more than one publisher on the intervention topic refuses every message while it lasts (``publishers``: two
  people, or a replayed bag, must not take turns on the robot), as `StateGate` does for the robot's state;
- a cycle is served from teleop when the newest accepted target is still fresh (``now - stamp <= max_age_s``);
  once the person stops publishing, the target ages out and the policy's target is used again.

ROS-free: the safety node feeds it messages and asks it once per policy command; tests drive it with numbers.
"""

from __future__ import annotations

import numpy as np

REFUSAL_KINDS = ("future", "too_old", "publishers", "shape")


class Takeover:
    """The teleop arbiter of one robot. ``offer`` each teleop message; ``pick`` once per cycle."""

    def __init__(self, dof: int, topic: str = "intervention", max_age_s: float = 0.2, max_future_s: float = 0.1):
        self.dof, self.topic = int(dof), topic
        self.configure(max_age_s, max_future_s)
        self._target: np.ndarray | None = None
        self._stamp = 0
        self.refused: dict[str, int] = {k: 0 for k in REFUSAL_KINDS}
        self.last_refusal = ""
        self.served = 0
        """cycles whose candidate target came from teleop"""
        self.takeovers = 0
        """times control passed from the policy to teleop"""
        self.engaged = False
        """whether the last cycle asked was served from teleop"""

    def configure(self, max_age_s: float, max_future_s: float) -> None:
        """The freshness limits (s); take effect at once."""
        self.max_age_ns = int(max_age_s * 1e9)
        self.max_future_ns = int(max_future_s * 1e9)

    def offer(self, target: np.ndarray, stamp_ns: int, publishers: int, now_ns: int) -> str:
        """A teleop joint target (robot joint order) stamped ``stamp_ns``; ``publishers`` on its topic now.
        Returns '' when accepted, else why not (and counts the refusal by kind)."""
        t = np.asarray(target, dtype=np.float64).reshape(-1)
        why = ""
        if t.shape[0] != self.dof or not np.isfinite(t).all():
            kind, why = "shape", f"{self.topic}: expected {self.dof} finite joint targets, got {t.tolist()}"
        elif publishers > 1:
            kind, why = "publishers", (f"{self.topic}: {publishers} publishers (expected 1 teleoperator): every "
                                       f"teleop target refused while more than one publishes")
        elif stamp_ns > now_ns + self.max_future_ns:
            kind, why = "future", (f"{self.topic}: stamp {(stamp_ns - now_ns) / 1e9:.3f} s in the future "
                                   f"(intervention_max_future {self.max_future_ns / 1e9:g} s)")
        elif stamp_ns < now_ns - self.max_age_ns:
            kind, why = "too_old", (f"{self.topic}: stamp {(now_ns - stamp_ns) / 1e9:.3f} s old "
                                    f"(intervention_max_age {self.max_age_ns / 1e9:g} s)")
        if why:
            if kind == "publishers":
                self._target = None  # what either of them sent before is no longer trusted
            return self.refuse(kind, why)
        self._target, self._stamp = t, int(stamp_ns)
        return ""

    def refuse(self, kind: str, why: str) -> str:
        """A message the host could not read (``shape``: joints missing by name); counted, returns ``why``."""
        self.refused[kind] += 1
        self.last_refusal = why
        return why

    def pick(self, now_ns: int) -> np.ndarray | None:
        """The teleop target that replaces the policy's this cycle, or None (the policy's stands)."""
        fresh = self._target is not None and now_ns - self._stamp <= self.max_age_ns
        if fresh:
            self.served += 1
            self.takeovers += not self.engaged
        self.engaged = fresh
        return self._target.copy() if fresh else None

    def counters(self) -> dict[str, int]:
        """For diagnostics: served cycles, takeovers and refusals by kind."""
        return {"served": self.served, "takeovers": self.takeovers,
                **{f"refused.{k}": v for k, v in self.refused.items()}}


__all__ = ["Takeover", "REFUSAL_KINDS"]
