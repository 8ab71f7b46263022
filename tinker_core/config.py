"""Loading dataclass configs from YAML with errors that name the file and the key."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping, TypeVar

import yaml

from tinker_core.errors import ConfigError
from tinker_core.module import config_from_dict, config_to_dict

T = TypeVar("T")


def read_yaml(path: str | os.PathLike) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: file not found")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def load_config(cls: type[T], source: str | os.PathLike | Mapping[str, Any] | None, section: str | None = None) -> T:
    """Build dataclass ``cls`` from a YAML file or mapping (optionally one ``section`` of it)."""
    if source is None:
        return cls()
    where = str(source) if not isinstance(source, Mapping) else cls.__name__
    data = dict(source) if isinstance(source, Mapping) else read_yaml(source)
    if section is not None:
        if section not in data:
            raise ConfigError(f"{where}: no section {section!r}; sections: {sorted(data)}")
        data = data[section] or {}
        where = f"{where}:{section}"
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    return config_from_dict(cls, data, where)


def dump_config(config: Any) -> str:
    return yaml.safe_dump(config_to_dict(config), sort_keys=False)


__all__ = ["read_yaml", "load_config", "dump_config", "config_from_dict", "config_to_dict", "dataclasses"]
