"""`resolve_env`: what an algorithm was given to learn from (an id, an EnvConfig, an env, a factory, a VecEnv or
specs alone), turned into a VecEnv, its specs and how to make the env again."""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple

from tinker_core.algos.vec_env import VecEnv
from tinker_core.envs import EnvConfig
from tinker_core.errors import ConfigError
from tinker_core.spec import AnySpec, DictSpec, Spec
from tinker_core.transition import TransitionSpec


class EnvSource(NamedTuple):
    vec_env: VecEnv | None
    """None when built from specs only"""
    env_id: str | None
    obs_spec: AnySpec
    action_spec: Spec
    env_config: EnvConfig | None
    """how to make the env again (recorded in checkpoints and bundles); None when unknown"""
    env_kwargs: dict | None
    """the kwargs the env was made with, where this call decided them; None: keep the caller's"""


def resolve_env(src: Any, n_envs: int, env_kwargs: Mapping) -> EnvSource:
    """``src`` with ``n_envs`` copies; ``env_kwargs`` apply to an id or an EnvConfig."""
    import gymnasium as gym

    if isinstance(src, TransitionSpec):
        return EnvSource(None, None, src.obs, src.action, None, None)  # type: ignore[arg-type]
    if isinstance(src, tuple) and len(src) == 2 and all(isinstance(s, (Spec, DictSpec)) for s in src):
        return EnvSource(None, None, src[0], src[1], None, None)
    if isinstance(src, VecEnv):
        return EnvSource(src, src.env_id, src.obs_spec, src.action_spec, None, None)  # type: ignore[arg-type]
    if isinstance(src, (str, EnvConfig)):
        cfg = EnvConfig(src, dict(env_kwargs)) if isinstance(src, str) else src
        if isinstance(src, EnvConfig) and env_kwargs:
            cfg = EnvConfig(src.id, {**src.kwargs, **env_kwargs}, src.env_import, src.wrappers)
        vec = VecEnv.make(cfg.make, n_envs)
        return EnvSource(vec, cfg.id, vec.obs_spec, vec.action_spec, cfg, dict(cfg.kwargs))  # type: ignore[arg-type]
    if isinstance(src, gym.Env):
        env_config = EnvConfig.from_env(src)
        envs = [src]
        if n_envs > 1:
            if env_config is None:
                raise ConfigError(f"n_envs={n_envs} needs an env id to make copies (this env has no gymnasium spec, "
                                  "or a wrapper that does not record its arguments); pass an EnvConfig instead")
            envs += [env_config.make() for _ in range(n_envs - 1)]
        vec = VecEnv(envs)
        return EnvSource(vec, vec.env_id, vec.obs_spec, vec.action_spec, env_config, None)  # type: ignore[arg-type]
    if callable(src):
        vec = VecEnv.make(src, n_envs)
        return EnvSource(vec, vec.env_id, vec.obs_spec, vec.action_spec, None, None)  # type: ignore[arg-type]
    raise ConfigError("env_or_specs: expected an env id, a gymnasium.Env, an env factory, a VecEnv, a "
                      f"TransitionSpec or (obs_spec, action_spec), got {type(src).__name__}")
