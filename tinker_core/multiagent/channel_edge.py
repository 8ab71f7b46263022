"""Both ends of a declared channel, without ROS: the sender's split of its output and the receiver's inbox.

The in-process `tinker_core.multiagent.channels.Channels` wrapper and the ROS 2 nodes (policy: sender,
perception: receiver) run these same classes, so a message is checked, held and zero-filled by one rule:

- `ChannelOutbox` (sender): the policy's output is ``[action, message]``; the message is checked (size,
  finite: a non-finite one raises `ValidationError`, the sender is broken) and clipped to ``[low, high]``
  (counted), as an action is. Only the action part goes on to the action chain and the robot.
- `ChannelInbox` (receiver): every message that arrives is checked against its channel's spec (known
  channel, declared sender, size, finite, within bounds); a refused one is counted by reason and never
  replaces the last good one. What the receiver reads is the newest accepted message of each channel it
  hears, in declaration order, or zeros when none came or the newest is older than the channel's
  ``max_age``. `ChannelInbox.append` extends an observation as training did: a flat vector gets the
  messages after its own values, a dict gets one ``channel/NAME`` key per channel.

Time is an integer clock in ns that the caller owns (the env's step count times its period in process,
the node's wall clock on ROS 2): the classes never read a clock of their own.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Mapping, Sequence

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.multiagent.channels import TERM_PREFIX, ChannelSpec

REFUSALS = ("channel", "sender", "size", "non_finite", "bounds")
"""the reasons a receiver refuses a message, as counted in `ChannelInbox.refused`"""


class ChannelOutbox:
    """The sender's end: ``split(output) -> (action, message)``; ``n_action`` values of action come first."""

    def __init__(self, channel: ChannelSpec, n_action: int):
        if n_action < 0:
            raise ConfigError(f"channels.{channel.name}: the sender's action has {n_action} values; expected >= 0")
        self.channel, self.n_action = channel, int(n_action)
        self.size = self.n_action + channel.size
        self.clipped = 0
        """messages outside ``[low, high]`` that were clipped to it"""

    def split(self, output: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The action part and the checked, clipped float32 message; raises ValidationError on a wrong size or a
        non-finite message (naming the channel and the sender)."""
        ch = self.channel
        out = np.asarray(output).reshape(-1)
        where = f"channel {ch.name!r} (from {ch.sender!r})"
        if out.shape[0] != self.size:
            raise ValidationError(where, f"{self.n_action} action + {ch.size} message values", f"{out.shape[0]} values")
        msg = out[self.n_action:].astype(np.float32)
        ch.spec.check(msg, where, bounds=False)  # shape, dtype, finite
        clipped = np.clip(msg, ch.low, ch.high).astype(np.float32)
        self.clipped += int(not np.array_equal(clipped, msg))
        return out[: self.n_action], clipped


class ChannelInbox:
    """The receiver's end for the channels ``heard`` (in the order the observation takes them)."""

    def __init__(self, heard: Sequence[ChannelSpec]):
        self.heard = tuple(heard)
        names = [ch.name for ch in self.heard]
        if len(set(names)) != len(names):
            raise ConfigError(f"channels: a receiver hears each channel once, got {names}")
        self._by_name = {ch.name: ch for ch in self.heard}
        self._zeros = {ch.name: np.zeros(ch.size, np.float32) for ch in self.heard}
        self._last: dict[str, tuple[int, np.ndarray]] = {}
        self.refused: Counter[str] = Counter()
        """refused messages by reason (`REFUSALS`)"""
        self.last_refusal = ""
        self.accepted = 0
        self.stale_reads = 0
        """reads that found a message older than its channel's max_age (zeros were read instead)"""

    @property
    def names(self) -> list[str]:
        return list(self._by_name)

    def clear(self) -> None:
        """Forget every message (a new episode)."""
        self._last.clear()

    def deliver(self, name: str, values: Any, now_ns: int, sender: str | None = None) -> str:
        """Take one message that arrived at ``now_ns``; '' when accepted, else the reason it was refused (counted,
        and the channel keeps its last accepted message). ``sender``: who the message says it is from (None:
        the transport cannot say, as in process)."""
        ch = self._by_name.get(name)
        if ch is None:
            return self._refuse("channel", f"channel {name!r}: not heard here (this receiver hears {self.names})")
        where = f"channel {name!r}"
        if sender is not None and sender != ch.sender:
            return self._refuse("sender", f"{where}: from {sender!r}, declared sender {ch.sender!r}")
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if v.shape[0] != ch.size:
            return self._refuse("size", f"{where}: expected {ch.size} values, got {v.shape[0]}")
        if not np.isfinite(v).all():
            return self._refuse("non_finite", f"{where}: NaN/inf at index {np.flatnonzero(~np.isfinite(v)).tolist()}")
        if (v < ch.low).any() or (v > ch.high).any():
            return self._refuse("bounds", f"{where}: values outside [{ch.low:g}, {ch.high:g}] "
                                          f"(min {v.min():.3g}, max {v.max():.3g})")
        self._last[name] = (int(now_ns), v.astype(np.float32))
        self.accepted += 1
        return ""

    def _refuse(self, reason: str, message: str) -> str:
        self.refused[reason] += 1
        self.last_refusal = message
        return message

    def read(self, now_ns: int) -> dict[str, np.ndarray]:
        """The newest accepted message of each channel heard (copies), zeros where none came or it is stale."""
        out = {}
        for name, ch in self._by_name.items():
            got = self._last.get(name)
            if got is None:
                out[name] = self._zeros[name].copy()
            elif now_ns - got[0] > ch.max_age_ns:
                self.stale_reads += 1
                out[name] = self._zeros[name].copy()
            else:
                out[name] = got[1].copy()
        return out

    def age_ns(self, name: str, now_ns: int) -> int | None:
        """How old channel ``name``'s newest accepted message is (None: none came)."""
        got = self._last.get(name)
        return None if got is None else int(now_ns) - got[0]

    def sources(self, now_ns: int) -> dict[str, np.ndarray]:
        """`read` keyed by observation term (``channel/NAME``), as an observation assembly takes its terms."""
        return {TERM_PREFIX + k: v for k, v in self.read(now_ns).items()}

    def append(self, obs: Any, now_ns: int) -> Any:
        """``obs`` extended with what is heard: a flat vector gets the messages after its values (declaration
        order), a mapping one ``channel/NAME`` key per channel."""
        heard = self.read(now_ns)
        if isinstance(obs, Mapping):
            return {**obs, **{TERM_PREFIX + k: v for k, v in heard.items()}}
        return np.concatenate([np.asarray(obs, np.float32), *heard.values()])

    def counters(self) -> dict[str, int]:
        """For diagnostics: accepted, stale reads and refusals by reason."""
        return {"accepted": self.accepted, "stale_reads": self.stale_reads,
                **{f"refused.{r}": int(self.refused.get(r, 0)) for r in REFUSALS}}

    def values(self, now_ns: int, publishers: Mapping[str, int], extra_publishers_seen: int) -> dict[str, object]:
        """The receiver's /diagnostics values (``channels.*``): the counters, each channel's newest message's age
        (ms; ``none``) and its publisher count (``publishers``: by channel name, as the host counts them on the
        graph), how often a second publisher was seen, the last refusal."""
        out: dict[str, object] = {f"channels.{k}": v for k, v in self.counters().items()}
        for ch in self.heard:
            age = self.age_ns(ch.name, now_ns)
            out[f"channels.{ch.name}.age_ms"] = "none" if age is None else f"{age / 1e6:.0f}"
            out[f"channels.{ch.name}.publishers"] = publishers.get(ch.name, 0)
        out["channels.extra_publishers_seen"] = extra_publishers_seen
        out["channels.last_refusal"] = self.last_refusal
        return out


def agent_channels(channels: Sequence[ChannelSpec], agent: str) -> tuple[ChannelSpec | None, tuple[ChannelSpec, ...]]:
    """(the channel ``agent`` sends on or None, the channels it hears in declaration order)."""
    says = [ch for ch in channels if ch.sender == agent]
    if len(says) > 1:
        raise ConfigError(f"channels: {agent!r} sends on {[c.name for c in says]}; one channel per sender "
                          "(give it a larger size instead)")
    return (says[0] if says else None), tuple(ch for ch in channels if agent in ch.receivers)


__all__ = ["REFUSALS", "ChannelInbox", "ChannelOutbox", "agent_channels"]
