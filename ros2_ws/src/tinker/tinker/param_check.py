"""Check a graph's parameters against what its nodes declare, before any node starts.

ROS 2 ignores a parameter a node does not declare (a typo, or a name from an older release, runs with the
default and nothing says so) and refuses a value of another type with a traceback from inside the node. Here
both are refused up front, naming the node, the parameter and what it expects: each node's own entries must be
its parameters, with a value of the declared type within the declared range; a ``/**`` entry must be a
parameter of at least one node.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from tinker_core.errors import ConfigError

ROS_BUILTIN = frozenset({"use_sim_time", "start_type_description_service"})
"""parameters rclpy declares on every node"""


def declared() -> dict[str, dict[str, Any]]:
    """node name -> its parameters (name -> `tinker.runtime.Param`), as the node declares them."""
    from tinker.node_params import (BRIDGE_PARAMS, PERCEPTION_PARAMS, POLICY_PARAMS, SAFETY_PARAMS,
                                    SIM_ROBOT_PARAMS)
    from tinker.runtime import RUNTIME_PARAMS
    from tinker.view import VIEW_PARAMS

    own = {"sim_robot": SIM_ROBOT_PARAMS, "perception": PERCEPTION_PARAMS, "policy": POLICY_PARAMS,
           "safety": SAFETY_PARAMS, "experience_bridge": BRIDGE_PARAMS, "view": VIEW_PARAMS}
    return {n: {**RUNTIME_PARAMS, **t} for n, t in own.items()}


def _kind(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}.get(type(value), type(value).__name__)


def check_value(where: str, prm: Any, value: Any) -> None:
    """Refuse ``value`` unless it has the type of ``prm``'s default (an integer serves a float) and lies in its
    range; ``where`` names the setting (``node.param``)."""
    default = prm.default
    ok = (isinstance(value, bool) if isinstance(default, bool)
          else isinstance(value, int) and not isinstance(value, bool) if isinstance(default, int)
          else isinstance(value, (int, float)) and not isinstance(value, bool) if isinstance(default, float)
          else isinstance(value, type(default)))
    if not ok:
        hint = " (quote it to pass text: 'true')" if isinstance(default, str) and isinstance(value, bool) else ""
        raise ConfigError(f"{where}: expected {_kind(default)} like its default {default!r}, got {value!r} "
                          f"({_kind(value)}){hint}")
    if prm.range is not None and not isinstance(value, (bool, str)):
        lo, hi = prm.range
        if not lo <= value <= hi:
            raise ConfigError(f"{where}: {value!r} is outside its range [{lo}, {hi}]")


def _unknown(where: str, name: str, known: set[str]) -> ConfigError:
    near = difflib.get_close_matches(name, sorted(known), n=2, cutoff=0.6)
    return ConfigError(f"{where}: no such parameter" + (f" (did you mean {' or '.join(near)}?)" if near else "")
                       + "; `ros2 param describe` or ros2_ws/src/tinker/config/bringup.yaml lists them")


def check_graph(own: Mapping[str, Mapping[str, Any]], shared: Mapping[str, Any], nodes: Any) -> None:
    """``own``: node -> the entries given for it alone (parameter file and overrides); ``shared``: the ``/**``
    entries; ``nodes``: those that will run (their values are checked). Raises `ConfigError` on the first entry no node would take."""
    tables = declared()
    for name, value in shared.items():
        if name in ROS_BUILTIN:
            continue
        if not any(name in t for t in tables.values()):
            raise _unknown(f"/**.{name}", name, {p for t in tables.values() for p in t})
        for n in nodes:
            if name in tables.get(n, {}):
                check_value(f"/**.{name} (for {n})", tables[n][name], value)
    for node, params in own.items():
        if node not in tables:
            continue
        for name, value in params.items():
            if name in ROS_BUILTIN:
                continue
            if name not in tables[node]:
                raise _unknown(f"{node}.{name}", name, set(tables[node]))
            check_value(f"{node}.{name}", tables[node][name], value)


def check_params_file(path: str | os.PathLike, nodes: Sequence[str],
                      overrides: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """`check_graph` for a parameter file (its sections as `tinker.bringup.parameter_sections` reads them) with
    ``overrides`` (node or ``/**`` -> name -> value) on top."""
    from tinker.bringup import parameter_sections

    data = yaml.safe_load(Path(path).read_text()) or {}
    over = overrides or {}
    own = {n: {**parameter_sections(data, n)[1], **over.get(n, {})} for n in nodes}
    check_graph(own, {**parameter_sections(data, "")[0], **over.get("/**", {})}, nodes)
