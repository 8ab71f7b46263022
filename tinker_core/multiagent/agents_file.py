"""The agents file: which agents a multi-agent run trains, with which algorithm, on which spaces.

```yaml
env: tinker/SwarmFormation-v0      # a registered multi-agent env id (or given on the command line)
total_timesteps: 200000            # env steps (one step moves every live agent)
centralized_critic: false          # PPO groups: the critic sees the env's global state (MAPPO)
agents:
  robot1: {policy: PPO, obs_space: [84, 84, 3], action_space: {discrete: 5}, perception: nature_cnn}
  robot2: {policy: DQN, obs_space: [10], hyperparameters: {learning_rate: 0.0005}}
  "drone_*": {policy: PPO, group: swarm}   # a pattern: every env agent it matches
channels:                          # optional: messages between agents (tinker_core.multiagent.channels)
  signal: {from: robot2, to: [robot1], size: 4}   # low: -1, high: 1, max_age: 0.5 s by default
```

An entry's key is an agent name, or an ``fnmatch`` pattern (``*``, ``?``, ``[``) for many agents
(exact names win over patterns). Agents with the same ``group`` share one policy (its parameters,
optimizer and normalization); they must agree on policy, spaces, perception and hyperparameters.
Spaces are optional; given, they are checked against the env's. ``load_agents_file`` /
``AgentsConfig.from_dict`` parse it, ``AgentsConfig.to_dict`` writes it back (a round trip).
Every error names the agent and the field.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from tinker_core.errors import ConfigError
from tinker_core.multiagent.channels import ChannelSpec, parse_channels

POLICIES = ("PPO", "SAC", "DQN")
"""The algorithms an agent can train with (tinker_core.algos)."""

_TOP_KEYS = ("env", "env_kwargs", "total_timesteps", "seed", "centralized_critic", "channels", "agents")
_AGENT_KEYS = ("policy", "obs_space", "action_space", "perception", "group", "hyperparameters", "bundle")


def _is_pattern(name: str) -> bool:
    return any(ch in name for ch in "*?[")


@dataclass(frozen=True)
class SpaceSpec:
    """What an agent expects of one of its spaces: a ``Discrete(n)``, or a ``Box`` of ``shape``
    (``dtype``, ``low``, ``high`` checked only when given)."""

    shape: tuple[int, ...] = ()
    discrete: int | None = None
    dtype: str | None = None
    low: float | None = None
    high: float | None = None

    @classmethod
    def parse(cls, raw: Any, where: str) -> "SpaceSpec":
        """``[84, 84, 3]`` (a Box of that shape), ``{discrete: 5}`` or ``{shape: [2], low: -1, high: 1,
        dtype: float32}``."""
        if isinstance(raw, (list, tuple)):
            return cls(shape=_shape(raw, where))
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{where}: expected a shape list like [10] or a mapping with 'shape' or 'discrete', "
                              f"got {raw!r}")
        unknown = sorted(set(raw) - {"shape", "discrete", "dtype", "low", "high"})
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}; known: ['discrete', 'dtype', 'high', 'low', 'shape']")
        if "discrete" in raw:
            n = raw["discrete"]
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ConfigError(f"{where}.discrete: expected a number of actions >= 1, got {n!r}")
            if set(raw) - {"discrete"}:
                raise ConfigError(f"{where}: a discrete space takes only 'discrete', got {sorted(raw)}")
            return cls(discrete=n)
        if "shape" not in raw:
            raise ConfigError(f"{where}: expected 'shape' or 'discrete', got keys {sorted(raw)}")
        dtype = raw.get("dtype")
        if dtype is not None:
            try:
                dtype = np.dtype(dtype).name
            except TypeError:
                raise ConfigError(f"{where}.dtype: expected a numpy dtype name like float32, got {dtype!r}") from None
        bounds = {}
        for k in ("low", "high"):
            v = raw.get(k)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ConfigError(f"{where}.{k}: expected a number, got {v!r}")
            bounds[k] = None if v is None else float(v)
        return cls(shape=_shape(raw["shape"], f"{where}.shape"), dtype=dtype, **bounds)

    def to_yaml(self) -> Any:
        if self.discrete is not None:
            return {"discrete": self.discrete}
        extra = {k: v for k, v in (("dtype", self.dtype), ("low", self.low), ("high", self.high)) if v is not None}
        return {"shape": list(self.shape), **extra} if extra else list(self.shape)

    def check(self, space: Any, where: str) -> None:
        """Raise ConfigError naming ``where`` unless the gymnasium ``space`` is what this describes."""
        from gymnasium import spaces

        if self.discrete is not None:
            if not isinstance(space, spaces.Discrete) or int(space.n) != self.discrete:
                raise ConfigError(f"{where}: expected Discrete({self.discrete}), the env gives {space}")
            return
        if not isinstance(space, spaces.Box):
            raise ConfigError(f"{where}: expected a Box of shape {list(self.shape)}, the env gives {space}")
        if tuple(space.shape) != self.shape:
            raise ConfigError(f"{where}: expected shape {list(self.shape)}, the env gives {list(space.shape)}")
        if self.dtype is not None and np.dtype(space.dtype).name != self.dtype:
            raise ConfigError(f"{where}: expected dtype {self.dtype}, the env gives {np.dtype(space.dtype).name}")
        for k in ("low", "high"):
            want = getattr(self, k)
            if want is not None and not np.allclose(getattr(space, k), want):
                raise ConfigError(f"{where}.{k}: expected {want}, the env gives {getattr(space, k)}")


def _shape(raw: Any, where: str) -> tuple[int, ...]:
    if not isinstance(raw, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1
                                                     for d in raw):
        raise ConfigError(f"{where}: expected a list of positive integers like [84, 84, 3], got {raw!r}")
    return tuple(int(d) for d in raw)


@dataclass(frozen=True)
class AgentSpec:
    """One entry of the agents file (one agent, or every agent its pattern matches)."""

    name: str
    """The agent's name in the env (or an fnmatch pattern)."""
    policy: str = "PPO"
    """PPO, SAC or DQN."""
    obs_space: SpaceSpec | None = None
    """Checked against the env's observation space when given."""
    action_space: SpaceSpec | None = None
    """Checked against the env's action space when given."""
    perception: str = "auto"
    """Encoder from tinker_core.nn ('auto': by the observation's shape)."""
    group: str | None = None
    """Agents of one group share one policy's parameters (None: a group of its own, named after it)."""
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    """The algorithm's config fields (PPOConfig, SACConfig, DQNConfig), e.g. learning_rate."""
    bundle: str = ""
    """The deploy bundle this agent's robot runs on ROS 2 (``tinker bringup --agents``, ``agents:=FILE``); empty:
    the shipped default policy. A relative path is taken from the agents file's folder."""

    @property
    def group_name(self) -> str:
        return self.group if self.group is not None else self.name

    def algo_config(self, seed: int) -> Any:
        """The algorithm config this entry asks for (``seed`` unless the entry sets one)."""
        from tinker_core.algos import ALGOS
        from tinker_core.module import config_from_dict

        cls = ALGOS[self.policy.lower()].config_class
        hp = {"seed": seed, **dict(self.hyperparameters)}
        if self.perception != "auto":
            hp.setdefault("perception", self.perception)
        return config_from_dict(cls, hp, f"agents.{self.name}.hyperparameters")

    def to_yaml(self) -> dict[str, Any]:
        d: dict[str, Any] = {"policy": self.policy}
        if self.obs_space is not None:
            d["obs_space"] = self.obs_space.to_yaml()
        if self.action_space is not None:
            d["action_space"] = self.action_space.to_yaml()
        if self.perception != "auto":
            d["perception"] = self.perception
        if self.group is not None:
            d["group"] = self.group
        if self.hyperparameters:
            d["hyperparameters"] = dict(self.hyperparameters)
        if self.bundle:
            d["bundle"] = self.bundle
        return d


def _where_torch_is(check: Any) -> None:
    """Run ``check`` of a training setting (encoder, hyperparameters) where torch is installed; skip it where
    not: a robot that only runs bundles (an edge computer reading the agents file in ``ros2 launch``) has no
    torch and no use for these settings."""
    try:
        check()
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise


def _check_encoder(perception: Any, where: str) -> None:
    from tinker_core.nn.encoders import ENCODERS

    if perception not in ENCODERS:
        raise ConfigError(f"{where}.perception: expected 'auto' or one of {sorted(ENCODERS)}, got {perception!r}")


def parse_agent(name: str, raw: Any) -> AgentSpec:
    """One agent entry; errors read ``agents.NAME.FIELD: ...``."""
    where = f"agents.{name}"
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping with 'policy' and the agent's settings, got {raw!r}")
    unknown = sorted(set(raw) - set(_AGENT_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; known: {sorted(_AGENT_KEYS)}")
    policy = raw.get("policy", "PPO")
    if not isinstance(policy, str) or policy.upper() not in POLICIES:
        raise ConfigError(f"{where}.policy: expected one of {', '.join(POLICIES)}, got {policy!r}")
    perception = raw.get("perception", "auto")
    if perception != "auto":
        _where_torch_is(lambda: _check_encoder(perception, where))
    group = raw.get("group")
    if group is not None and (not isinstance(group, str) or not group):
        raise ConfigError(f"{where}.group: expected a non-empty name, got {group!r}")
    hp = raw.get("hyperparameters") or {}
    if not isinstance(hp, Mapping):
        raise ConfigError(f"{where}.hyperparameters: expected a mapping, got {hp!r}")
    bundle = raw.get("bundle") or ""
    if not isinstance(bundle, str):
        raise ConfigError(f"{where}.bundle: expected a bundle directory path, got {bundle!r}")
    spec = AgentSpec(
        name=name, policy=policy.upper(), bundle=bundle,
        obs_space=None if raw.get("obs_space") is None else SpaceSpec.parse(raw["obs_space"], f"{where}.obs_space"),
        action_space=(None if raw.get("action_space") is None
                      else SpaceSpec.parse(raw["action_space"], f"{where}.action_space")),
        perception=perception, group=group, hyperparameters=dict(hp))
    _where_torch_is(lambda: spec.algo_config(0))  # unknown or invalid hyperparameters fail here, named
    if spec.policy == "DQN" and spec.action_space is not None and spec.action_space.discrete is None:
        raise ConfigError(f"{where}.action_space: DQN needs a discrete action space, got {spec.action_space.to_yaml()}")
    if spec.policy == "SAC" and spec.action_space is not None and spec.action_space.discrete is not None:
        raise ConfigError(f"{where}.action_space: SAC needs a continuous (Box) action space, got "
                          f"{spec.action_space.to_yaml()}")
    return spec


@dataclass
class AgentsConfig:
    """A parsed agents file (also what the Python API takes)."""

    agents: dict[str, AgentSpec]
    """Entries by name (or pattern), in file order."""
    env: str | None = None
    """The multi-agent env id (see tinker_sim.multi) or None when the caller passes the env."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the env."""
    total_timesteps: int = 100_000
    """Env steps to train (each moves every live agent once)."""
    seed: int = 0
    """Seeds the env and every agent whose hyperparameters do not set one."""
    centralized_critic: bool = False
    """PPO groups learn a critic on the env's global ``state()`` (MAPPO-style) instead of their own observation."""
    channels: tuple[ChannelSpec, ...] = ()
    """Declared messages between agents (`tinker_core.multiagent.channels`), built into their spaces."""

    def __post_init__(self) -> None:
        if not self.agents:
            raise ConfigError("agents: expected at least one agent, got none")
        if isinstance(self.total_timesteps, bool) or not isinstance(self.total_timesteps, int) or self.total_timesteps < 1:
            raise ConfigError(f"total_timesteps: expected an integer >= 1, got {self.total_timesteps!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ConfigError(f"seed: expected an integer, got {self.seed!r}")
        if not isinstance(self.centralized_critic, bool):
            raise ConfigError(f"centralized_critic: expected true or false, got {self.centralized_critic!r}")
        if self.env is not None and not isinstance(self.env, str):
            raise ConfigError(f"env: expected an env id string, got {self.env!r}")
        if not isinstance(self.env_kwargs, Mapping):
            raise ConfigError(f"env_kwargs: expected a mapping, got {self.env_kwargs!r}")
        for name, a in self.agents.items():
            if not isinstance(a, AgentSpec) or a.name != name:
                raise ConfigError(f"agents.{name}: expected an AgentSpec named {name!r}, got {a!r}")
        self._check_groups()

    def _check_groups(self) -> None:
        first: dict[str, AgentSpec] = {}
        for a in self.agents.values():
            g = a.group_name
            if g not in first:
                first[g] = a
                continue
            ref = first[g]
            for f in ("policy", "obs_space", "action_space", "perception", "hyperparameters"):
                if getattr(a, f) != getattr(ref, f):
                    raise ConfigError(f"agents.{a.name}.{f}: group {g!r} shares one policy, so it needs the same {f} "
                                      f"as {ref.name} ({getattr(ref, f)!r}), got {getattr(a, f)!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "agents file") -> "AgentsConfig":
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping with 'agents', got {type(data).__name__}")
        unknown = sorted(set(data) - set(_TOP_KEYS))
        if unknown:
            raise ConfigError(f"{where}: unknown top-level key(s) {unknown}; known: {sorted(_TOP_KEYS)}")
        raw_agents = data.get("agents")
        if not isinstance(raw_agents, Mapping) or not raw_agents:
            raise ConfigError(f"{where}: 'agents' must map agent names to their settings, got {raw_agents!r}")
        agents = {}
        for name, raw in raw_agents.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"agents: expected agent names as strings, got {name!r}")
            agents[name] = parse_agent(name, raw)
        kw = {k: data[k] for k in ("env", "total_timesteps", "seed", "centralized_critic") if k in data}
        return cls(agents=agents, env_kwargs=dict(data.get("env_kwargs") or {}),
                   channels=parse_channels(data.get("channels")), **kw)

    def to_dict(self) -> dict[str, Any]:
        """The agents file as plain data (``from_dict(to_dict())`` gives an equal config)."""
        out: dict[str, Any] = {}
        if self.env is not None:
            out["env"] = self.env
        if self.env_kwargs:
            out["env_kwargs"] = dict(self.env_kwargs)
        out.update(total_timesteps=self.total_timesteps, seed=self.seed, centralized_critic=self.centralized_critic)
        if self.channels:
            out["channels"] = {c.name: c.to_yaml() for c in self.channels}
        out["agents"] = {n: a.to_yaml() for n, a in self.agents.items()}
        return out

    def entry_for(self, agent: str) -> AgentSpec:
        """The entry that configures env agent ``agent``: its exact name, else the first pattern that matches."""
        if agent in self.agents and not _is_pattern(agent):
            return self.agents[agent]
        for key, a in self.agents.items():
            if _is_pattern(key) and fnmatch.fnmatchcase(agent, key):
                return a
        raise ConfigError(f"agents: the env has an agent {agent!r} that no entry names or matches; "
                          f"entries: {sorted(self.agents)}")

    def resolve(self, possible_agents: list[str]) -> dict[str, AgentSpec]:
        """Env agent -> its entry, for every agent the env can have; every exact entry must be one of them."""
        missing = [n for n in self.agents if not _is_pattern(n) and n not in possible_agents]
        if missing:
            raise ConfigError(f"agents.{missing[0]}: the env has no agent of that name; its agents: {possible_agents}")
        return {a: self.entry_for(a) for a in possible_agents}


def load_agents_file(path: str | os.PathLike) -> AgentsConfig:
    """Parse an agents YAML file."""
    from tinker_core.config import read_yaml

    return AgentsConfig.from_dict(read_yaml(path), str(path))


def dump_agents_file(config: AgentsConfig, path: str | os.PathLike) -> None:
    """Write ``config`` as an agents YAML file that ``load_agents_file`` reads back equal."""
    import yaml

    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(config.to_dict(), f, sort_keys=False)


def is_agents_file(data: Mapping[str, Any]) -> bool:
    """Whether a config mapping is an agents file (it has an ``agents`` section)."""
    return isinstance(data, Mapping) and "agents" in data


__all__ = ["AgentSpec", "AgentsConfig", "POLICIES", "SpaceSpec", "dump_agents_file", "is_agents_file",
           "load_agents_file", "parse_agent"]
