"""Unity ML-Agents adapter: a Unity environment (mlagents_envs 0.28 protocol) as gymnasium environments.

`MLAgentsVectorEnv` maps one behavior to a gymnasium ``VectorEnv`` whose sub-envs are the behavior's
agents (several agents per behavior); `MLAgentsEnv` is the single-agent ``gymnasium.Env`` over it.
Behavior specs become spaces: one vector observation -> ``Box``; several -> ``Dict`` keyed by sensor
name; continuous actions -> ``Box(-1, 1)``, discrete branches -> ``MultiDiscrete``, both -> ``Dict``.
Side channels: ``engine`` (`EngineSettings`, EngineConfigurationChannel), ``env_parameters`` (fixed
floats) and ``randomize`` (tinker `RandomizationRanges`: each reset draws a `DynamicsParams` from the
seeded RNG and sends every field as a float over EnvironmentParametersChannel); statistics the
environment sends on the StatsSideChannel land in ``last_stats``.

Agents are expected to request a decision every step (Decision Period 1). An agent that ends its
episode appears in TerminalSteps and, restarted, in DecisionSteps of the same step: the env autoresets
in the same step (``final_obs`` in the infos).

mlagents_envs 0.28's generated protobuf code needs the pure-python protobuf implementation, which must be
chosen before protobuf is first imported: this module sets ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``
and refuses to load in a process that already imported the fast one (run the adapter in its own process).
"""

from __future__ import annotations

import os
import sys

os.environ["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"

from tinker_core.errors import ConfigError, TinkerError, TransportError  # noqa: E402

if "google.protobuf" in sys.modules:
    from google.protobuf.internal import api_implementation

    if api_implementation.Type() != "python":
        raise ConfigError(
            "tinker_sim.mlagents_adapter: protobuf was already imported with the "
            f"{api_implementation.Type()!r} implementation; mlagents_envs 0.28 needs 'python'. "
            "Import the adapter before anything that imports protobuf, or run it in its own process.")

import warnings  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass, fields  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any, Mapping  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium import spaces  # noqa: E402
from gymnasium.vector import AutoresetMode  # noqa: E402
from gymnasium.vector.utils import batch_space  # noqa: E402



@contextmanager
def _legacy_map_entries():
    """Let protobuf 6's python implementation see the map fields of mlagents_envs 0.28's generated code.

    That code (protoc 3.x style) marks map entry types only through ``options=MessageOptions(map_entry=True)``;
    protobuf 6 decides map-ness from the descriptor's ``is_map_entry`` argument alone, so without this
    ``UnityRLOutputProto.agentInfos[name]`` and ``UnityRLInputProto.agent_actions[name]`` are plain repeated
    fields and mlagents_envs fails with "list indices must be integers or slices, not str". While the
    generated modules are imported, descriptors whose options say map_entry are created with is_map_entry=True.
    """
    from google.protobuf import descriptor as _d

    original = _d.Descriptor.__init__

    def init(self, *args: Any, **kwargs: Any) -> None:
        opts = kwargs.get("options")
        if not kwargs.get("is_map_entry") and opts is not None and getattr(opts, "map_entry", False):
            kwargs["is_map_entry"] = True
        original(self, *args, **kwargs)

    _d.Descriptor.__init__ = init
    try:
        yield
    finally:
        _d.Descriptor.__init__ = original


if "mlagents_envs.communicator_objects" in sys.modules:
    from mlagents_envs.communicator_objects.unity_rl_output_pb2 import UnityRLOutputProto as _Out

    if not _Out.DESCRIPTOR.fields_by_name["agentInfos"].message_type._is_map_entry:
        raise ConfigError("tinker_sim.mlagents_adapter: mlagents_envs was imported before the adapter, so its protobuf map "
                          "fields are broken under protobuf 6; import tinker_sim.mlagents_adapter first")

with warnings.catch_warnings(), _legacy_map_entries():
    warnings.simplefilter("ignore", DeprecationWarning)  # the 0.28 generated code uses deprecated descriptor calls
    from mlagents_envs.base_env import ActionTuple, BehaviorSpec
    from mlagents_envs.environment import UnityEnvironment
    from mlagents_envs.exception import UnityException
    from mlagents_envs.side_channel.engine_configuration_channel import EngineConfigurationChannel
    from mlagents_envs.side_channel.environment_parameters_channel import EnvironmentParametersChannel
    from mlagents_envs.side_channel.stats_side_channel import StatsSideChannel

from tinker_sim.dynamics import DynamicsParams, RandomizationRanges, resolve_ranges  # noqa: E402


@dataclass
class EngineSettings:
    """Unity engine settings sent over the EngineConfigurationChannel before the first reset."""

    width: int = 84
    """window width, pixels"""
    height: int = 84
    """window height, pixels"""
    quality_level: int = 1
    """Unity quality level"""
    time_scale: float = 20.0
    """simulation speed-up over real time"""
    target_frame_rate: int = -1
    """frames per second Unity aims for (-1: unlimited)"""
    capture_frame_rate: int = 60
    """fixed frame rate for capture"""

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ConfigError(f"EngineSettings.time_scale: expected > 0, got {self.time_scale}")
        if self.width < 1 or self.height < 1:
            raise ConfigError(f"EngineSettings.width/height: expected >= 1, got {self.width}x{self.height}")


def observation_space_of(spec: BehaviorSpec) -> spaces.Space:
    """One agent's observation space: ``Box`` for one sensor, ``Dict`` by sensor name for several."""
    boxes = {}
    for i, o in enumerate(spec.observation_specs):
        visual = len(o.shape) == 3
        box = spaces.Box(0.0 if visual else -np.inf, 1.0 if visual else np.inf, tuple(o.shape), np.float32)
        boxes[o.name or f"obs_{i}"] = box
    if len(boxes) == 1:
        return next(iter(boxes.values()))
    return spaces.Dict(boxes)


def action_space_of(spec: BehaviorSpec) -> spaces.Space:
    a = spec.action_spec
    cont = spaces.Box(-1.0, 1.0, (a.continuous_size,), np.float32) if a.continuous_size else None
    disc = spaces.MultiDiscrete(list(a.discrete_branches)) if a.discrete_size else None
    if cont is not None and disc is not None:
        return spaces.Dict({"continuous": cont, "discrete": disc})
    if cont is None and disc is None:
        raise ConfigError("ML-Agents behavior has neither continuous nor discrete actions")
    return cont if cont is not None else disc


class MLAgentsVectorEnv(gym.vector.VectorEnv):
    """One ML-Agents behavior as a vector env: sub-env i is agent i (agents ordered by id at reset)."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, file_name: str | None = None, behavior_name: str | None = None, base_port: int = 5004,
                 worker_id: int = 0, seed: int = 0, timeout_wait: int = 60, no_graphics: bool = True,
                 engine: EngineSettings | Mapping[str, Any] | None = None,
                 env_parameters: Mapping[str, float] | None = None,
                 randomize: bool | str | os.PathLike | RandomizationRanges = False,
                 additional_args: list[str] | None = None):
        if isinstance(engine, Mapping):
            engine = EngineSettings(**engine)
        self.engine = engine if engine is not None else EngineSettings()
        self.env_parameters = {str(k): float(v) for k, v in (env_parameters or {}).items()}
        self.ranges = resolve_ranges(randomize)
        self._rng = np.random.default_rng(seed)
        self.engine_channel = EngineConfigurationChannel()
        self.params_channel = EnvironmentParametersChannel()
        self.stats_channel = StatsSideChannel()
        self.engine_channel.set_configuration_parameters(**{f.name: getattr(self.engine, f.name) for f in fields(self.engine)})
        for k, v in self.env_parameters.items():
            self.params_channel.set_float_parameter(k, v)
        self.last_stats: dict[str, list[float]] = {}
        self.dynamics: DynamicsParams | None = None
        try:
            self.unity = UnityEnvironment(
                file_name=file_name, worker_id=worker_id, base_port=base_port, seed=seed, no_graphics=no_graphics,
                timeout_wait=timeout_wait, additional_args=additional_args,
                side_channels=[self.engine_channel, self.params_channel, self.stats_channel])
        except UnityException as e:
            raise TransportError(f"ML-Agents environment on port {base_port + worker_id}: {e}") from e
        self._send_randomization()
        self.unity.reset()
        names = list(self.unity.behavior_specs.keys())
        if not names:
            self.close()
            raise TransportError("ML-Agents environment: no behavior connected")
        if behavior_name is None:
            behavior_name = names[0]
        if behavior_name not in names:
            self.close()
            raise ConfigError(f"MLAgentsVectorEnv.behavior_name: expected one of {names}, got {behavior_name!r}")
        self.behavior_name = behavior_name
        self.spec_ml = self.unity.behavior_specs[behavior_name]
        decision, _ = self.unity.get_steps(behavior_name)
        self.agent_ids = [int(i) for i in sorted(decision.agent_id)]
        if not self.agent_ids:
            self.close()
            raise TransportError(f"ML-Agents behavior {behavior_name!r}: no agent requested a decision after reset")
        self.num_envs = len(self.agent_ids)
        self.single_observation_space = observation_space_of(self.spec_ml)
        self.single_action_space = action_space_of(self.spec_ml)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._obs = self._gather(decision, self.agent_ids)
        self._collect_stats()

    # ---- side channels ---------------------------------------------------------------------------
    def _send_randomization(self) -> None:
        if self.ranges is None:
            return
        self.dynamics = self.ranges.sample(self._rng)
        for k, v in self.dynamics.to_dict().items():
            self.params_channel.set_float_parameter(k, float(v))

    def _collect_stats(self) -> None:
        stats = self.stats_channel.get_and_reset_stats()
        self.last_stats = {k: [float(v) for v, _ in vals] for k, vals in stats.items()}

    # ---- observation mapping ---------------------------------------------------------------------
    def _gather(self, steps: Any, ids: list[int]) -> Any:
        idx = [steps.agent_id_to_index[i] for i in ids]
        if isinstance(self.single_observation_space, spaces.Dict):
            return {k: np.asarray(o[idx], dtype=np.float32)
                    for k, o in zip(self.single_observation_space.spaces, steps.obs)}
        return np.asarray(steps.obs[0][idx], dtype=np.float32)

    def _action_tuple(self, actions: Any, ids: list[int]) -> ActionTuple:
        a = self.spec_ml.action_spec
        if isinstance(actions, Mapping):
            cont, disc = actions.get("continuous"), actions.get("discrete")
        elif a.continuous_size:
            cont, disc = actions, None
        else:
            cont, disc = None, actions
        order = [self.agent_ids.index(i) for i in ids]
        out = ActionTuple()
        if a.continuous_size:
            c = np.asarray(cont, dtype=np.float32).reshape(self.num_envs, a.continuous_size)
            out.add_continuous(np.clip(np.nan_to_num(c[order]), -1.0, 1.0))
        if a.discrete_size:
            out.add_discrete(np.asarray(disc, dtype=np.int32).reshape(self.num_envs, a.discrete_size)[order])
        return out

    # ---- gymnasium API ---------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self._send_randomization()
        self._exchange(self.unity.reset)
        decision, _ = self.unity.get_steps(self.behavior_name)
        missing = set(self.agent_ids) - {int(i) for i in decision.agent_id}
        if missing:
            raise TransportError(f"ML-Agents behavior {self.behavior_name!r}: agents {sorted(missing)} missing after reset")
        self._obs = self._gather(decision, self.agent_ids)
        self._collect_stats()
        return self._obs, {"agent_id": np.array(self.agent_ids)}

    def step(self, actions: Any):
        decision, _ = self.unity.get_steps(self.behavior_name)
        ids = [int(i) for i in decision.agent_id if int(i) in self.agent_ids]
        self.unity.set_actions(self.behavior_name, self._action_tuple(actions, ids))
        self._exchange(self.unity.step)
        decision, terminal = self.unity.get_steps(self.behavior_name)
        n = self.num_envs
        rewards = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        term_ids = {int(i) for i in terminal.agent_id}
        dec_ids = {int(i) for i in decision.agent_id}
        missing = [i for i in self.agent_ids if i not in dec_ids]
        if missing:
            raise TransportError(f"ML-Agents behavior {self.behavior_name!r}: agents {missing} did not request a "
                                 "decision this step (the adapter needs Decision Period 1)")
        for k, agent in enumerate(self.agent_ids):
            if agent in term_ids:
                t = terminal[agent]
                rewards[k] = t.reward + t.group_reward
                truncated[k] = bool(t.interrupted)
                terminated[k] = not t.interrupted
            else:
                d = decision[agent]
                rewards[k] = d.reward + d.group_reward
        infos: dict[str, Any] = {"agent_id": np.array(self.agent_ids)}
        done = terminated | truncated
        if done.any():
            done_ids = [a for a in self.agent_ids if a in term_ids]
            final = self._gather(terminal, done_ids)
            final_obs = np.empty(n, dtype=object)
            for j, a in enumerate(done_ids):
                k = self.agent_ids.index(a)
                final_obs[k] = ({key: v[j] for key, v in final.items()} if isinstance(final, dict) else final[j])
            infos["final_obs"], infos["_final_obs"] = final_obs, done
        self._obs = self._gather(decision, self.agent_ids)
        self._collect_stats()
        return self._obs, rewards, terminated, truncated, infos

    def _exchange(self, call) -> None:
        try:
            call()
        except UnityException as e:
            raise TransportError(f"ML-Agents behavior {self.behavior_name!r}: {e}") from e

    def close_extras(self, **kwargs: Any) -> None:
        """Tell the environment to shut down (header status 400) and stop the gRPC server."""
        if getattr(self, "unity", None) is not None:
            self.unity.close()
            self.unity = None


class MLAgentsEnv(gym.Env):
    """A single-agent behavior as a plain ``gymnasium.Env`` (same-step autoreset hidden behind ``reset``)."""

    def __init__(self, **kwargs: Any):
        self.vec = MLAgentsVectorEnv(**kwargs)
        if self.vec.num_envs != 1:
            n = self.vec.num_envs
            self.vec.close()
            raise ConfigError(f"MLAgentsEnv: expected a behavior with 1 agent, got {n}; use MLAgentsVectorEnv")
        self.observation_space = self.vec.single_observation_space
        self.action_space = self.vec.single_action_space
        self._pending: Any = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if self._pending is not None and seed is None:  # Unity already restarted the agent
            obs, self._pending = self._pending, None
            return obs, {}
        self._pending = None
        obs, info = self.vec.reset(seed=seed)
        return self._one(obs), {}

    def step(self, action: Any):
        batched = {k: np.asarray(v)[None] for k, v in action.items()} if isinstance(action, Mapping) else np.asarray(action)[None]
        obs, rew, term, trunc, infos = self.vec.step(batched)
        obs = self._one(obs)
        if term[0] or trunc[0]:
            self._pending, obs = obs, infos["final_obs"][0]
        return obs, float(rew[0]), bool(term[0]), bool(trunc[0]), {}

    @staticmethod
    def _one(obs: Any) -> Any:
        return {k: v[0] for k, v in obs.items()} if isinstance(obs, dict) else obs[0]

    def close(self) -> None:
        self.vec.close()


__all__ = ["EngineSettings", "MLAgentsVectorEnv", "MLAgentsEnv", "observation_space_of", "action_space_of",
           "TinkerError"]
