"""Multi-agent env ids: PettingZoo has no registry of its own, so tinker keeps one.

``register_parallel_env(id, factory)`` (tinker_sim.multi does it for tinker's envs on import);
``make_parallel_env(id_or_path, **kwargs)`` builds one. Besides registered ids it takes
``module:attr`` for any PettingZoo Parallel env factory, e.g. ``mpe2.simple_spread_v3:parallel_env``.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

from tinker_core.errors import ConfigError

_REGISTRY: dict[str, Callable[..., Any]] = {}


def register_parallel_env(env_id: str, factory: Callable[..., Any]) -> None:
    """Make ``env_id`` buildable by ``make_parallel_env`` (registering the same factory twice is fine)."""
    if env_id in _REGISTRY and _REGISTRY[env_id] is not factory:
        raise ConfigError(f"register_parallel_env: {env_id!r} is already registered to {_REGISTRY[env_id]!r}")
    _REGISTRY[env_id] = factory


def registered_ids() -> list[str]:
    return sorted(_REGISTRY)


def make_parallel_env(env: str, **kwargs: Any) -> Any:
    """A registered id, or ``module:attr`` naming a factory of a PettingZoo Parallel env."""
    if env in _REGISTRY:
        return _REGISTRY[env](**kwargs)
    module, sep, attr = env.partition(":")
    if not sep:
        raise ConfigError(f"env: {env!r} is not a registered multi-agent env ({registered_ids()}; tinker/ ids "
                          "need `import tinker_sim.multi`) nor module:attr of a PettingZoo Parallel env factory")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"env: cannot import {env!r} ({e})") from None
    return factory(**kwargs)
