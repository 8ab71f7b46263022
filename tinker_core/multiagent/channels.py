"""Declared channels between agents: what one agent says, the others hear one step later, checked like any edge.

```yaml
channels:
  signal: {from: spotter, to: [rover], size: 4}          # low/high default to -1/1
```

A channel is part of the agents' spaces, so the algorithms learn what to say and how to read it with nothing
of their own: the sender's continuous action grows by ``size`` values (its message), each receiver's
observation grows by the newest message of each channel it listens to (zeros before the first, and once the
newest is older than ``max_age`` s, default 0.5). The message crosses an edge with a `Spec` (shape, float32,
finite): a non-finite message is refused with a `ValidationError` naming the channel; a finite one outside
``[low, high]`` is clipped to it, as an action is. Delivery takes one env step, as over a network. Both ends
are `tinker_core.multiagent.channel_edge` (`ChannelOutbox`, `ChannelInbox`), the same classes the ROS 2
nodes run; on ROS 2 a channel is the topic ``/tinker/channels/NAME`` (`topic`), and a bundle's manifest
names each slot ``channel/NAME`` (`Channels.channel_terms`).

`Channels` wraps any PettingZoo Parallel env this way; `MultiAgentTrainer` applies it when the agents file
declares channels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.spec import Spec

_KEYS = ("from", "to", "size", "low", "high", "max_age")
TERM_PREFIX = "channel/"
"""a channel's observation term (and a sender's action term) in a bundle's manifest is ``channel/NAME``"""
DEFAULT_MAX_AGE = 0.5
"""s: a heard message older than this reads as zeros (a silent or dead sender)"""


@dataclass(frozen=True)
class ChannelSpec:
    """One declared channel: ``sender`` says ``size`` numbers in ``[low, high]`` each step; ``receivers`` hear it."""

    name: str
    sender: str
    receivers: tuple[str, ...]
    size: int
    low: float = -1.0
    high: float = 1.0
    max_age: float = DEFAULT_MAX_AGE
    """s: the newest message is heard until it is this old, zeros after (as when nothing came)"""

    @classmethod
    def parse(cls, name: str, raw: Any, where: str = "channels") -> "ChannelSpec":
        at = f"{where}.{name}"
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{at}: expected a mapping with 'from', 'to' and 'size', got {raw!r}")
        unknown = sorted(set(raw) - set(_KEYS))
        if unknown:
            raise ConfigError(f"{at}: unknown key(s) {unknown}; known: {sorted(_KEYS)}")
        sender = raw.get("from")
        if not isinstance(sender, str) or not sender:
            raise ConfigError(f"{at}.from: expected the sending agent's name, got {sender!r}")
        to = raw.get("to")
        to = [to] if isinstance(to, str) else to
        if not isinstance(to, (list, tuple)) or not to or not all(isinstance(t, str) and t for t in to):
            raise ConfigError(f"{at}.to: expected a receiving agent's name or a list of them, got {raw.get('to')!r}")
        if sender in to:
            raise ConfigError(f"{at}.to: {sender!r} sends on this channel; an agent does not listen to itself")
        size = raw.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"{at}.size: expected the number of values per message (an integer >= 1), got {size!r}")
        low, high = raw.get("low", -1.0), raw.get("high", 1.0)
        for k, v in (("low", low), ("high", high)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                raise ConfigError(f"{at}.{k}: expected a finite number, got {v!r}")
        if not low < high:
            raise ConfigError(f"{at}: expected low < high, got low={low}, high={high}")
        max_age = raw.get("max_age", DEFAULT_MAX_AGE)
        if isinstance(max_age, bool) or not isinstance(max_age, (int, float)) or not 0 < max_age < float("inf"):
            raise ConfigError(f"{at}.max_age: expected a finite number of seconds > 0, got {max_age!r}")
        return cls(name, sender, tuple(to), size, float(low), float(high), float(max_age))

    def to_yaml(self) -> dict[str, Any]:
        return {"from": self.sender, "to": list(self.receivers), "size": self.size, "low": self.low, "high": self.high,
                "max_age": self.max_age}

    @property
    def max_age_ns(self) -> int:
        return int(round(self.max_age * 1e9))

    @property
    def term(self) -> str:
        """Its observation term at a receiver, its action term at the sender (``channel/NAME``)."""
        return TERM_PREFIX + self.name

    def term_record(self) -> dict[str, Any]:
        """The manifest term of this channel's slot (unscaled: a message is already in its bounds)."""
        return {"name": self.term, "size": self.size, "unit": "", "scale": 1.0, "offset": 0.0}

    @property
    def spec(self) -> Spec:
        """The edge's spec: what a message must be before it is delivered."""
        return Spec((self.size,), "float32", self.low, self.high)


def parse_channels(raw: Any, where: str = "channels") -> tuple[ChannelSpec, ...]:
    """The ``channels`` section of an agents file (None or a mapping of channel name to its settings)."""
    if raw is None:
        return ()
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping of channel names to {{from, to, size}}, got {raw!r}")
    return tuple(ChannelSpec.parse(str(name), v, where) for name, v in raw.items())


def topic(channel: ChannelSpec | str) -> str:
    """The ROS 2 topic of a channel: one shared, absolute name (``/tinker/channels/NAME``), not under the sender's
    namespace, so a receiver subscribes by the channel's name alone and a second publisher on it shows."""
    return f"/tinker/channels/{channel if isinstance(channel, str) else channel.name}"


def channels_to_json(channels: Sequence[ChannelSpec]) -> str:
    """The ``channels`` section as one JSON string (a ROS parameter's value)."""
    import json

    return json.dumps({c.name: c.to_yaml() for c in channels})  # in order: a receiver hears them in this order


def channels_from_json(text: str, where: str = "channels") -> tuple[ChannelSpec, ...]:
    """`channels_to_json` read back ('' or '{}': none); ConfigError naming ``where`` on bad JSON."""
    import json

    if not text.strip():
        return ()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where}: expected the channels section as JSON, got {text[:80]!r} ({e})") from None
    return parse_channels(raw, where)


class Channels:
    """A PettingZoo Parallel env with ``channels`` built into its agents' spaces (see the module docstring)."""

    def __init__(self, env: Any, channels: Sequence[ChannelSpec], step_seconds: float | None = None):
        """``step_seconds``: the time one env step stands for, the clock a message's ``max_age`` is measured on
        (None: the env's ``control_period`` or ``dt`` where it has one; an env with neither has no clock here,
        and a sender that stops acting is heard with its last message)."""
        from gymnasium import spaces

        from tinker_core.multiagent.channel_edge import ChannelInbox, ChannelOutbox

        self.env = env
        self.channels = tuple(channels)
        self.possible_agents = list(env.possible_agents)
        self.metadata = getattr(env, "metadata", {})
        known = set(self.possible_agents)
        self._says: dict[str, ChannelSpec] = {}
        self._hears: dict[str, list[ChannelSpec]] = {a: [] for a in self.possible_agents}
        for ch in self.channels:
            where = f"channels.{ch.name}"
            if ch.sender not in known:
                raise ConfigError(f"{where}.from: no agent {ch.sender!r} in the env (agents: {self.possible_agents})")
            for r in ch.receivers:
                if r not in known:
                    raise ConfigError(f"{where}.to: no agent {r!r} in the env (agents: {self.possible_agents})")
                self._hears[r].append(ch)
            if ch.sender in self._says:
                raise ConfigError(f"{where}.from: {ch.sender!r} already sends on channel {self._says[ch.sender].name!r}; "
                                  "one channel per sender (give it a larger size instead)")
            if not isinstance(env.action_space(ch.sender), spaces.Box) or len(env.action_space(ch.sender).shape) != 1:
                raise ConfigError(f"{where}.from: {ch.sender!r} acts with {env.action_space(ch.sender)}; a sender needs a "
                                  "flat continuous (Box) action space, which its message extends")
            self._says[ch.sender] = ch
        self._act_space, self._obs_space, self._act_dim = {}, {}, {}
        for a in self.possible_agents:
            act = env.action_space(a)
            if a in self._says:
                ch = self._says[a]
                self._act_dim[a] = act.shape[0]
                act = spaces.Box(np.concatenate([act.low, np.full(ch.size, ch.low)]).astype(np.float32),
                                 np.concatenate([act.high, np.full(ch.size, ch.high)]).astype(np.float32), dtype=np.float32)
            self._act_space[a] = act
            obs = env.observation_space(a)
            heard = self._hears[a]
            if heard:
                lo = [np.full(ch.size, ch.low, np.float32) for ch in heard]
                hi = [np.full(ch.size, ch.high, np.float32) for ch in heard]
                if isinstance(obs, spaces.Dict):
                    obs = spaces.Dict({**obs.spaces, **{f"channel/{ch.name}": spaces.Box(l, h, dtype=np.float32)
                                                       for ch, l, h in zip(heard, lo, hi)}})
                elif isinstance(obs, spaces.Box) and len(obs.shape) == 1:
                    obs = spaces.Box(np.concatenate([obs.low, *lo]).astype(np.float32),
                                     np.concatenate([obs.high, *hi]).astype(np.float32), dtype=np.float32)
                else:
                    raise ConfigError(f"channels.{heard[0].name}.to: {a!r} observes {obs}; a receiver needs a flat Box "
                                      "or a Dict observation, which the messages extend")
            self._obs_space[a] = obs
        self.outboxes = {a: ChannelOutbox(ch, self._act_dim[a]) for a, ch in self._says.items()}
        self.inboxes = {a: ChannelInbox(heard) for a, heard in self._hears.items() if heard}
        if step_seconds is None:
            step_seconds = getattr(env, "control_period", None) or getattr(env, "dt", None)
        self._step_ns = int(round(float(step_seconds) * 1e9)) if step_seconds else 0
        self._now_ns = 0
        self._said: dict[str, np.ndarray] = {}

    @property
    def clipped(self) -> int:
        """messages that were outside their channel's bounds and were clipped"""
        return sum(o.clipped for o in self.outboxes.values())

    # -- the PettingZoo Parallel API ---------------------------------------------------------------
    @property
    def agents(self) -> list[str]:
        return self.env.agents

    def observation_space(self, agent: str) -> Any:
        return self._obs_space[agent]

    def action_space(self, agent: str) -> Any:
        return self._act_space[agent]

    def state(self) -> np.ndarray:
        return self.env.state()

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        for inbox in self.inboxes.values():
            inbox.clear()
        self._said.clear()
        return self._with_messages(obs), infos

    def step(self, actions: Mapping[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        inner, said = {}, {}
        for a, act in actions.items():
            box = self.outboxes.get(a)
            if box is None:
                inner[a] = act
                continue
            inner[a], said[box.channel.name] = box.split(np.asarray(act, dtype=np.float32))
        obs, rewards, terms, truncs, infos = self.env.step(inner)
        self._now_ns += self._step_ns
        for a, inbox in self.inboxes.items():  # heard from the next observation on: one step, as over a network
            for ch in inbox.heard:
                if ch.name in said:
                    reason = inbox.deliver(ch.name, said[ch.name], self._now_ns)
                    if reason:  # the outbox clipped it: only a bug gets here
                        raise ValidationError(f"channel {ch.name!r}", "a deliverable message", reason)
        self._said.update(said)
        return self._with_messages(obs), rewards, terms, truncs, infos

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __getattr__(self, name: str) -> Any:  # the wrapped env's extras (e.g. a success flag)
        return getattr(self.env, name)

    def channel_terms(self, agent: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(observation terms, action terms) ``agent``'s spaces gain, as a bundle's manifest records them: one
        ``channel/NAME`` term per channel heard, after the env's own; the sent channel's after its action."""
        inbox, box = self.inboxes.get(agent), self.outboxes.get(agent)
        return ([ch.term_record() for ch in inbox.heard] if inbox else [],
                [box.channel.term_record()] if box else [])

    # -- internals -----------------------------------------------------------------------------------
    def messages(self) -> dict[str, np.ndarray]:
        """The newest message said on each channel (zeros before the first)."""
        return {ch.name: (self._said[ch.name].copy() if ch.name in self._said else np.zeros(ch.size, np.float32))
                for ch in self.channels}

    def _with_messages(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(obs)
        for a, o in obs.items():
            inbox = self.inboxes.get(a)
            if inbox is not None:
                out[a] = inbox.append(o, self._now_ns)
        return out


__all__ = ["DEFAULT_MAX_AGE", "TERM_PREFIX", "ChannelSpec", "Channels", "channels_from_json", "channels_to_json",
           "parse_channels", "topic"]
