"""Stable-Baselines3 habits: the cheap ones work, the others get an error that says the tinker way.

``SAC(env, learning_rate=1e-3, policy_kwargs=dict(net_arch=[64, 64]))``, ``SAC.load(path)``,
``tensorboard_log=`` and ``learn(..., progress_bar=True)`` work as in SB3; ``SAC("MlpPolicy", env)``
and SB3-only keywords raise `ConfigError` with what to write instead (docs/migrating_from_sb3.md).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Mapping

from tinker_core.errors import ConfigError

SB3_POLICY_NAMES = {"MlpPolicy": "flatten", "CnnPolicy": "nature_cnn", "MultiInputPolicy": "dict"}
"""SB3's policy names and the tinker perception each corresponds to"""

_INIT_HINTS = {
    "action_noise": "tinker's SAC explores with its own stochastic policy and DQN with epsilon-greedy; "
                    "there is no action-noise setting",
    "replay_buffer_class": "tinker's off-policy algorithms build their replay themselves; there is no "
                           "replay buffer class to pass",
    "replay_buffer_kwargs": "the replay settings are config fields (buffer_size)",
    "_init_setup_model": "a tinker algorithm is built whole at construction",
    "stats_window_size": "tinker logs the mean of the last 10 episodes (rollout/ep_return_mean)",
    "create_eval_env": "use tinker_core.training.callbacks.EvalCallback",
    "policy": "tinker picks the networks from the observation space (the 'perception' field)",
}
_LEARN_HINTS = {
    "log_interval": "tinker logs every config.log_interval env steps (a config field, not a learn argument)",
    "tb_log_name": "TensorBoard goes to OUT_DIR/tb: name the run with learn(..., out_dir=OUT_DIR) or tensorboard_log=",
    "reset_num_timesteps": "tinker's learn(n) trains n more steps and keeps counting; learn(total, resume=True) "
                           "continues a loaded checkpoint up to total",
    "eval_env": "use tinker_core.training.callbacks.EvalCallback(eval_env, ...) as the callback",
}
_LOAD_HINTS = {
    "custom_objects": "tinker checkpoints hold no pickled objects to replace",
    "print_system_info": "the versions a checkpoint was written with are in its metadata ('versions')",
    "force_reset": "a loaded tinker algorithm continues the recorded episodes; pass a fresh env= to start anew",
}


class hybridmethod:
    """A method that is one function when called on the class (``SAC.load(path)``) and another when
    called on an instance (``algo.load(path)``)."""

    def __init__(self, on_class: Callable, on_instance: Callable):
        self.on_class, self.on_instance = on_class, on_instance

    def __get__(self, obj: Any, owner: type) -> Callable:
        if obj is None:
            return functools.partial(self.on_class, owner)
        return functools.partial(self.on_instance, obj)


def _refuse(where: str, keys: list[str], hints: Mapping[str, str], known: list[str]) -> None:
    lines = [f"{k}: {hints[k]}" for k in keys if k in hints]
    rest = [k for k in keys if k not in hints]
    msg = f"{where}: SB3 keyword(s) tinker does not take: " + "; ".join(lines) if lines else ""
    if rest:
        msg = (msg + "; " if msg else "") + f"{where}: unknown keyword(s) {rest}; known: {known}"
    raise ConfigError(msg)


def merge_sb3_arguments(cls: type, env_or_specs: Any, config: Any, hyperparameters: Mapping[str, Any],
                        policy_kwargs: Mapping | str | None) -> Any:
    """The config an algorithm is built with: ``config`` (or the defaults) with SB3-style keyword
    hyperparameters and ``policy_kwargs`` applied; SB3's positional policy name is refused."""
    name, ccls = cls.__name__, cls.config_class
    if isinstance(env_or_specs, str) and env_or_specs in SB3_POLICY_NAMES:
        raise ConfigError(
            f"{name}({env_or_specs!r}, env): tinker takes the env first and picks the networks from the "
            f"observation space (perception='auto'; {env_or_specs} is perception={SB3_POLICY_NAMES[env_or_specs]!r}); "
            f"write {name}(env) or {name}(env, {ccls.__name__}(...)), hyperparameters as keywords or config fields")
    if config is not None and not isinstance(config, ccls):
        raise ConfigError(f"{name}: expected a {ccls.__name__} as the config, got {type(config).__name__}")
    fields = {f.name for f in dataclasses.fields(ccls)}
    unknown = sorted(set(hyperparameters) - fields)
    if unknown:
        _refuse(name, unknown, _INIT_HINTS, sorted(fields | {"env_kwargs", "tensorboard_log", "verbose",
                                                             "policy_kwargs"}))
    changes = dict(hyperparameters)
    if policy_kwargs is not None:
        from tinker_core.rlzoo import policy_kwargs_to_fields

        changes.update(policy_kwargs_to_fields(policy_kwargs, cls.algo_name, "policy_kwargs"))
    if config is None:
        try:
            return ccls(**changes)
        except TypeError as e:
            raise ConfigError(f"{name}: {e}") from None
    return dataclasses.replace(config, **changes) if changes else config


def learn_arguments(algo: Any, kwargs: Mapping[str, Any]) -> None:
    """Refuse SB3's ``learn`` keywords that tinker does not take, saying what to write."""
    if kwargs:
        _refuse(f"{type(algo).__name__}.learn", sorted(kwargs), _LEARN_HINTS,
                ["total_timesteps", "callback", "progress", "progress_bar", "out_dir", "checkpoint_every", "resume",
                 "tensorboard"])


def load_arguments(cls: type, kwargs: Mapping[str, Any]) -> None:
    if kwargs:
        _refuse(f"{cls.__name__}.load", sorted(kwargs), _LOAD_HINTS, ["path", "env", "device"])


__all__ = ["SB3_POLICY_NAMES", "hybridmethod", "merge_sb3_arguments", "learn_arguments", "load_arguments"]
