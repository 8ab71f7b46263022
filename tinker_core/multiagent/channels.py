"""Declared channels between agents: what one agent says, the others hear one step later, checked like any edge.

```yaml
channels:
  signal: {from: spotter, to: [rover], size: 4}          # low/high default to -1/1
```

A channel is part of the agents' spaces, so the algorithms learn what to say and how to read it with nothing
of their own: the sender's continuous action grows by ``size`` values (its message), each receiver's
observation grows by the newest message of each channel it listens to (zeros before the first). The message
crosses an edge with a `Spec` (shape, float32, finite): a non-finite message is refused with a
`ValidationError` naming the channel; a finite one outside ``[low, high]`` is clipped to it, as an action is.
Delivery takes one env step, as over a network; on ROS 2 a channel is the topic ``/tinker/channels/NAME``
(`tinker_core.multiagent.channels.topic`).

`Channels` wraps any PettingZoo Parallel env this way; `MultiAgentTrainer` applies it when the agents file
declares channels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from tinker_core.errors import ConfigError
from tinker_core.spec import Spec

_KEYS = ("from", "to", "size", "low", "high")


@dataclass(frozen=True)
class ChannelSpec:
    """One declared channel: ``sender`` says ``size`` numbers in ``[low, high]`` each step; ``receivers`` hear it."""

    name: str
    sender: str
    receivers: tuple[str, ...]
    size: int
    low: float = -1.0
    high: float = 1.0

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
        return cls(name, sender, tuple(to), size, float(low), float(high))

    def to_yaml(self) -> dict[str, Any]:
        return {"from": self.sender, "to": list(self.receivers), "size": self.size, "low": self.low, "high": self.high}

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
    """The ROS 2 topic of a channel (absolute: it joins robots in different namespaces)."""
    return f"/tinker/channels/{channel if isinstance(channel, str) else channel.name}"


class Channels:
    """A PettingZoo Parallel env with ``channels`` built into its agents' spaces (see the module docstring)."""

    def __init__(self, env: Any, channels: Sequence[ChannelSpec]):
        from gymnasium import spaces

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
        self._inbox = {ch.name: np.zeros(ch.size, np.float32) for ch in self.channels}
        self.clipped = 0
        """messages that were outside their channel's bounds and were clipped"""

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
        for ch in self.channels:
            self._inbox[ch.name] = np.zeros(ch.size, np.float32)
        return self._with_messages(obs), infos

    def step(self, actions: Mapping[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        inner, said = {}, {}
        for a, act in actions.items():
            ch = self._says.get(a)
            if ch is None:
                inner[a] = act
                continue
            act = np.asarray(act, dtype=np.float32)
            n = self._act_dim[a]
            inner[a] = act[:n]
            said[ch.name] = self._deliverable(ch, act[n:])
        obs, rewards, terms, truncs, infos = self.env.step(inner)
        self._inbox.update(said)  # heard from the next observation on: one step, as over a network
        return self._with_messages(obs), rewards, terms, truncs, infos

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __getattr__(self, name: str) -> Any:  # the wrapped env's extras (e.g. a success flag)
        return getattr(self.env, name)

    # -- internals -----------------------------------------------------------------------------------
    def _deliverable(self, ch: ChannelSpec, msg: np.ndarray) -> np.ndarray:
        spec = ch.spec
        spec.check(msg, f"channel {ch.name!r} (from {ch.sender!r})", bounds=False)  # shape, dtype, finite
        clipped = np.clip(msg, ch.low, ch.high).astype(np.float32)
        self.clipped += int(not np.array_equal(clipped, msg))
        return clipped

    def messages(self) -> dict[str, np.ndarray]:
        """The newest message of each channel (what receivers see now)."""
        return {k: v.copy() for k, v in self._inbox.items()}

    def _with_messages(self, obs: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(obs)
        for a, o in obs.items():
            heard = self._hears.get(a)
            if not heard:
                continue
            if isinstance(o, Mapping):
                out[a] = {**o, **{f"channel/{ch.name}": self._inbox[ch.name].copy() for ch in heard}}
            else:
                out[a] = np.concatenate([np.asarray(o, np.float32), *(self._inbox[ch.name] for ch in heard)])
        return out


__all__ = ["ChannelSpec", "Channels", "parse_channels", "topic"]
