"""`StateGate`: whether a measured joint state that arrived over a topic may be trusted.

The SafetyWrapper's own `StateCheck` judges one state's values (shape, finite, limits, stamp, jump since the
last accepted state on its injected clock). A state that crosses a middleware topic can also come from the
wrong source, so the gate adds what only the receiving side sees, on the receiver's clocks:

- **publishers**: more than one publisher on the state topic (a spoofer, a second graph, a bag played into a
  live robot) refuses every state while it lasts;
- **stamps**: a stamp more than ``max_future_s`` ahead of the receiver's clock or more than ``max_age_s`` behind
  it;
- **plausible motion**: a joint moved further from the previous state than its URDF velocity limit allows in the
  time between their arrivals (receiver's monotonic clock) plus ``jump_tolerance``; a second such jump within
  ``quarantine_s`` (two sources, interleaved) refuses every state for ``quarantine_s``;
- **declared episode starts**: a simulator that teleports its arm at an episode reset says so by a new episode
  number on the state (``episode`` of `check`). That state skips the motion check only; the publisher and stamp
  checks still apply, so the declaration is worth no more than the sole publisher that makes it. The caller
  then rebases the SafetyWrapper on it (`SafetyWrapper.rebase`). A real driver never declares one.

ROS-free: the safety node feeds it; tests drive it with plain numbers.
"""

from __future__ import annotations

import numpy as np

REFUSAL_KINDS = ("implausible", "future", "too_old", "publishers", "quarantine")


class StateGate:
    """Trust decisions for one state topic; ``check`` once per arriving state."""

    def __init__(self, velocity_limits: np.ndarray, topic: str, max_age_s: float, max_future_s: float,
                 jump_tolerance: float, quarantine_s: float):
        self.vmax = np.asarray(velocity_limits, dtype=np.float64)
        self.topic = topic
        self.configure(max_age_s, max_future_s, jump_tolerance, quarantine_s)
        self._prev_q: np.ndarray | None = None
        self._prev_t = 0
        self._quarantine_until = 0
        self._last_jump = -(1 << 62)
        self._episode: int | None = None
        self.new_episode = False
        """whether the last trusted state was a declared episode start (the caller rebases on it)"""
        self.episode_starts = 0

    def configure(self, max_age_s: float, max_future_s: float, jump_tolerance: float, quarantine_s: float) -> None:
        """The limits (s, s, rad, s); takes effect with the next state."""
        self.max_age_ns = int(max_age_s * 1e9)
        self.max_future_ns = int(max_future_s * 1e9)
        self.jump_tolerance = float(jump_tolerance)
        self.quarantine_ns = int(quarantine_s * 1e9)

    def check(self, q: np.ndarray, stamp: int, publishers: int, now_ns: int, mono_ns: int,
              episode: int | None = None) -> tuple[str, str]:
        """``("", "")`` when the state can be used; else (kind, why not): kind is one of `REFUSAL_KINDS`, the
        reason names the topic. ``stamp``/``now_ns``: ns on the stamp clock; ``mono_ns``: the receiver's
        monotonic clock; ``episode``: the driver's episode counter if it has one (a simulator), else None."""
        self.new_episode = False
        t = self.topic
        prev_q, prev_t = self._prev_q, self._prev_t
        self._prev_q, self._prev_t = q, mono_ns
        declared = episode is not None and self._episode is not None and episode != self._episode
        if prev_q is not None and not declared:
            allowed = self.vmax * ((mono_ns - prev_t) / 1e9) + self.jump_tolerance
            jump = np.abs(q - prev_q)
            if np.any(jump > allowed):
                j = int(np.argmax(jump - allowed))
                repeated = mono_ns - self._last_jump < self.quarantine_ns
                self._last_jump = mono_ns
                if repeated:  # states from two sources, interleaved: refuse all of them for a while
                    self._quarantine_until = mono_ns + self.quarantine_ns
                return "implausible", (f"{t}: implausible state: joint {j} moved {jump[j]:.3f} rad in "
                                       f"{(mono_ns - prev_t) / 1e6:.1f} ms (velocity limit allows {allowed[j]:.3f} "
                                       f"rad)" + (f"; states refused for {self.quarantine_ns / 1e9:g} s" if repeated
                                                  else ""))
        if stamp > now_ns + self.max_future_ns:
            return "future", (f"{t}: stamp {(stamp - now_ns) / 1e9:.3f} s in the future "
                              f"(max_state_future {self.max_future_ns / 1e9:g} s)")
        if stamp < now_ns - self.max_age_ns:
            return "too_old", (f"{t}: stamp {(now_ns - stamp) / 1e9:.3f} s old "
                               f"(max_state_age {self.max_age_ns / 1e9:g} s)")
        if publishers > 1:
            return "publishers", (f"{t}: {publishers} publishers (expected 1, the robot driver): a second source "
                                  f"of robot state")
        if mono_ns < self._quarantine_until:
            return "quarantine", (f"{t}: {(self._quarantine_until - mono_ns) / 1e9:.2f} s of quarantine left after "
                                  f"an implausible state")
        if episode is not None:
            self.new_episode = declared
            self.episode_starts += declared
            self._episode = episode
        return "", ""
