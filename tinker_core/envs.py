"""`EnvConfig`: how to make a training env from any package, recorded so a checkpoint or bundle can
make the same wrapped env again.

An env is an id (``Pendulum-v1``; ``panda_gym:PandaReach-v3``, gymnasium's form that imports the
package first; or ``package.module:EnvClass`` naming the class itself), constructor keyword
arguments, modules to import first (``env_import``, for packages that register their ids on import)
and a list of wrappers, each ``"module.Wrapper"`` or ``{"module.Wrapper": {kwarg: value}}`` (RL Zoo's
``env_wrapper`` form). Errors name the key and the value that failed.
"""

from __future__ import annotations

import importlib
import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from tinker_core.errors import ConfigError

WRAPPER_PACKAGES = ("gymnasium.wrappers",)
"""where a wrapper given by its bare class name (``TimeLimit``) is looked up"""


def _import(name: str, key: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ConfigError(f"{key}: cannot import module {name!r} ({e})") from None


def resolve_object(path: str, key: str, packages: Sequence[str] = ()) -> Any:
    """``package.module.Name``, ``package.module:Name`` or a bare ``Name`` found in ``packages``."""
    if not isinstance(path, str) or not path:
        raise ConfigError(f"{key}: expected 'package.module.Name', got {path!r}")
    if ":" in path:
        mod, _, attr = path.partition(":")
    elif "." in path:
        mod, _, attr = path.rpartition(".")
    else:
        for pkg in packages:
            obj = getattr(importlib.import_module(pkg), path, None)
            if obj is not None:
                return obj
        raise ConfigError(f"{key}: {path!r} is not in {list(packages)}; write it as 'package.module.{path}'")
    module = _import(mod, key)
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ConfigError(f"{key}: module {mod!r} has no {attr!r} (from {path!r})")
    return obj


def _wrapper_entry(item: Any, key: str) -> tuple[str, dict]:
    if isinstance(item, str):
        return item, {}
    if isinstance(item, Mapping) and len(item) == 1:
        (name, kwargs), = item.items()
        if kwargs is None:
            kwargs = {}
        if not isinstance(name, str) or not isinstance(kwargs, Mapping):
            raise ConfigError(f"{key}: expected {{'module.Wrapper': {{arg: value}}}}, got {dict(item)!r}")
        return name, dict(kwargs)
    raise ConfigError(f"{key}: expected 'module.Wrapper' or {{'module.Wrapper': {{arg: value}}}}, got {item!r}")


@dataclass
class EnvConfig:
    """A gymnasium env as data: id, kwargs, modules to import first, wrappers with their arguments."""

    id: str
    """A registered id, ``package:Id-vN`` (imports ``package`` first) or ``package.module:EnvClass``."""
    kwargs: dict = field(default_factory=dict)
    """Keyword arguments of the env's constructor (``gym.make(id, **kwargs)``)."""
    env_import: list[str] = field(default_factory=list)
    """Modules to import before making the env (packages that register their ids on import)."""
    wrappers: list = field(default_factory=list)
    """Applied in order, innermost first: ``"module.Wrapper"`` or ``{"module.Wrapper": {arg: value}}``."""

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ConfigError(f"env: expected an env id string, got {self.id!r}")
        if not isinstance(self.kwargs, Mapping):
            raise ConfigError(f"env_kwargs: expected a mapping, got {self.kwargs!r}")
        self.kwargs = dict(self.kwargs)
        if isinstance(self.env_import, str):
            self.env_import = [self.env_import]
        if not isinstance(self.env_import, (list, tuple)) or not all(isinstance(m, str) for m in self.env_import):
            raise ConfigError(f"env_import: expected a list of module names, got {self.env_import!r}")
        self.env_import = list(self.env_import)
        if isinstance(self.wrappers, (str, Mapping)):
            self.wrappers = [self.wrappers]
        if not isinstance(self.wrappers, (list, tuple)):
            raise ConfigError(f"env_wrappers: expected a list of wrappers, got {self.wrappers!r}")
        # one canonical form: [{"module.Wrapper": {kwargs}}, ...]
        self.wrappers = [dict([_wrapper_entry(w, f"env_wrappers[{i}]")]) for i, w in enumerate(self.wrappers)]

    # -- making -------------------------------------------------------------------------------------
    def import_modules(self) -> None:
        for i, name in enumerate(self.env_import):
            _import(name, f"env_import[{i}]")

    def check(self) -> None:
        """Import what the config names and check that the id resolves, without making the env."""
        import gymnasium as gym

        self.import_modules()
        if self._entry_point() is not None:
            return
        try:
            gym.spec(self.id.split(":", 1)[1] if ":" in self.id else self.id)
        except gym.error.Error as e:
            raise ConfigError(self._not_found(e)) from None
        for i, w in enumerate(self.wrappers):
            resolve_object(next(iter(w)), f"env_wrappers[{i}]", WRAPPER_PACKAGES)

    def _entry_point(self) -> Any:
        """The env class when the id is ``package.module:EnvClass`` (not a registered id), else None."""
        import gymnasium as gym

        if ":" not in self.id:
            return None
        mod, _, name = self.id.partition(":")
        module = _import(mod, "env")
        obj = getattr(module, name, None)
        if obj is not None and (callable(obj) and (not inspect.isclass(obj) or issubclass(obj, gym.Env))):
            return obj
        return None

    def _not_found(self, e: Exception) -> str:
        msg = f"env: cannot make {self.id!r} ({e})"
        if self.id.startswith("tinker/"):
            return msg + "; tinker/ ids are registered by importing tinker_sim: add env_import: [tinker_sim]"
        if ":" not in self.id:
            return (msg + "; if a package registers it, name the package: env_import: [package], or write "
                    "the id as 'package:" + self.id + "'")
        return msg

    def make(self) -> Any:
        """The wrapped env."""
        import gymnasium as gym

        self.import_modules()
        entry = self._entry_point()
        try:
            if entry is not None:
                env = entry(**self.kwargs)
                if not isinstance(env, gym.Env):
                    raise ConfigError(f"env: {self.id!r} made a {type(env).__name__}, not a gymnasium.Env")
            else:
                env = gym.make(self.id, **self.kwargs)
        except gym.error.Error as e:
            raise ConfigError(self._not_found(e)) from None
        except TypeError as e:
            raise ConfigError(f"env_kwargs: {self.id!r} does not take {sorted(self.kwargs)} ({e})") from None
        for i, w in enumerate(self.wrappers):
            (name, kwargs), = w.items()
            key = f"env_wrappers[{i}]"
            cls = resolve_object(name, key, WRAPPER_PACKAGES)
            try:
                env = cls(env, **kwargs)
            except Exception as e:  # a wrapper's own check of its arguments or of the env
                raise ConfigError(f"{key}: {name}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())}) "
                                  f"failed on {self.id!r}: {type(e).__name__}: {e}") from None
        return env

    # -- records ------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"id": self.id, "kwargs": dict(self.kwargs), "env_import": list(self.env_import),
                "wrappers": [dict(w) for w in self.wrappers]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "env") -> "EnvConfig":
        unknown = sorted(set(d) - {"id", "kwargs", "env_import", "wrappers"})
        if unknown or "id" not in d:
            raise ConfigError(f"{where}: expected keys id, kwargs, env_import, wrappers, got {sorted(d)}")
        return cls(d["id"], d.get("kwargs") or {}, d.get("env_import") or [], d.get("wrappers") or [])

    @classmethod
    def from_env(cls, env: Any) -> "EnvConfig | None":
        """What gymnasium recorded about a made env (its id, kwargs, a changed time limit and the
        wrappers added after ``make`` that record their arguments), or None when it cannot be rebuilt."""
        spec = getattr(env, "spec", None)
        if spec is None or not spec.id:
            return None
        import gymnasium as gym

        kwargs = dict(spec.kwargs)
        try:
            registered = gym.spec(spec.id)
        except gym.error.Error:
            return None
        if spec.max_episode_steps != registered.max_episode_steps:
            kwargs["max_episode_steps"] = spec.max_episode_steps
        wrappers = []
        for w in spec.additional_wrappers:
            if not isinstance(w.entry_point, str) or w.kwargs is None:
                return None
            wrappers.append({w.entry_point: dict(w.kwargs)})
        try:  # a record holds data only (a wrapper given a function cannot be rebuilt from it)
            json.dumps([kwargs, wrappers], allow_nan=True)
        except (TypeError, ValueError):
            return None
        return cls(spec.id, kwargs, [], wrappers)

    def __str__(self) -> str:
        s = self.id
        if self.wrappers:
            s += " + " + ", ".join(next(iter(w)) for w in self.wrappers)
        return s


def make_env(env: str | EnvConfig | Mapping[str, Any], **kwargs: Any) -> Any:
    """``EnvConfig`` from an id (with ``kwargs``), a mapping or itself, made."""
    if isinstance(env, str):
        return EnvConfig(env, kwargs).make()
    if isinstance(env, Mapping):
        return EnvConfig.from_dict(env).make()
    return env.make()


__all__ = ["EnvConfig", "make_env", "resolve_object"]
