"""Check a graph's parameters against what its nodes declare, before any node starts.

ROS 2 ignores a parameter a node does not declare (a typo, or a name from an older release, runs with the
default and nothing says so) and refuses a value of another type with a traceback from inside the node. Here
both are refused up front, naming the node, the parameter and what it expects: each node's own entries must be
its parameters, with a value of the declared type within the declared range; a ``/**`` entry must be a
parameter of at least one node. Settings of two nodes that must agree are checked together (`check_pairings`).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

from tinker_core.errors import ConfigError, TinkerError

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


def typed_argument(name: str, text: str) -> Any:
    """A launch argument (text) for parameter ``name``, as that parameter's type (its default's, in the nodes'
    tables) and checked against its range: ``latency_compensation:=4`` is 4, ``latency_auto:=maybe`` a ConfigError
    naming it."""
    prm = next((t[name] for t in declared().values() if name in t), None)
    if prm is None:
        raise _unknown(f"{name}:={text}", name, {p for t in declared().values() for p in t})
    value = text if isinstance(prm.default, str) else yaml.safe_load(text)
    check_value(f"{name}:={text}", prm, value)
    return value


def _builtin(where: str, name: str, value: Any) -> None:
    """rclpy's own parameters: ``use_sim_time: true`` is refused, as the node itself would refuse it."""
    if name == "use_sim_time" and value is True:
        from tinker.runtime import SIM_TIME_REFUSED

        raise ConfigError(f"{where}: {SIM_TIME_REFUSED}")


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
            _builtin(f"/**.{name}", name, value)
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
                _builtin(f"{node}.{name}", name, value)
                continue
            if name not in tables[node]:
                raise _unknown(f"{node}.{name}", name, set(tables[node]))
            check_value(f"{node}.{name}", tables[node][name], value)
    check_pairings(lambda node, name: own.get(node, {}).get(name, shared.get(name, tables[node][name].default)), nodes)


def check_pairings(value: Any, nodes: Any) -> None:
    """Refuse settings of two nodes that contradict each other; ``value(node, name)`` is what the node will run
    with (its own entry, else the ``/**`` one, else the default).

    The experience bridge's success sensor (``reward_source: sensors``) reads the located target from each state
    (``sensor_hold_target: false``) or holds the episode's first (``true``). Reading each state's is right where
    perception holds its estimate over the episode (`tinker_core.loop.held_estimate.holds_estimate`), holding the
    first is right where perception estimates per frame: the other two pairings reward the arm for one frame's
    noise in the estimate, or for the first frame's alone.

    Perception and the policy compensate the same command latency (``latency_compensation``, ``latency_auto``),
    the one safety compares with what it measures. Every node that
    sends, runs or hears the safe command takes one message type (``command_type``) and, for a Float64MultiArray,
    one joint order (``command_joints``)."""
    check_latency_pairing(value, nodes)
    check_command_type(value, nodes)
    if not {"perception", "experience_bridge"} <= set(nodes) or value("experience_bridge", "reward_source") != "sensors":
        return
    from tinker.bundle_io import resolve_bundle, top_manifest
    from tinker_core.loop.held_estimate import holds_estimate

    try:
        image_terms = top_manifest(resolve_bundle(value("perception", "bundle") or None)).image_terms or ()
    except (OSError, TinkerError):  # an unreadable bundle is the perception node's to report, with its own message
        return
    mode, synced = value("perception", "estimate"), value("perception", "task_synced")
    held = holds_estimate(mode, image_terms, synced, where="perception.estimate")
    if value("experience_bridge", "sensor_hold_target") == held:
        how = (f"holds its estimate over each episode (estimate: {mode})" if held else
               f"estimates per frame (estimate: {mode}" + (", task_synced: false" if mode == "auto" and not synced else "")
               + ")")
        raise ConfigError(f"experience_bridge.sensor_hold_target: {held} does not pair with perception, which {how}; "
                          f"set experience_bridge.sensor_hold_target: {not held}, or change perception.estimate")


def check_latency_pairing(value: Any, nodes: Any) -> None:
    """See `check_pairings`: perception, the policy and safety, those of them in the graph, take one
    ``latency_compensation`` and one ``latency_auto``."""
    present = [n for n in ("perception", "policy", "safety") if n in set(nodes)]
    if not {"perception", "policy"} <= set(present):
        return
    for name, why in (("latency_compensation", "the two must compensate the same latency, and safety compares it with "
                                               "the latency it measures"),
                      ("latency_auto", "safety sends the latency it measures to perception, and the policy follows "
                                       "perception")):
        values = {n: value(n, name) for n in present}
        if len(set(values.values())) > 1:
            said = ", ".join(f"{n} {v}" for n, v in values.items())
            raise ConfigError(f"{name}: {said}; {why} (set it once, in the launch YAML's /** section)")


def check_command_type(value: Any, nodes: Any) -> None:
    """See `check_pairings`."""
    from tinker_core.loop.edges import COMMAND_TYPES

    tables = declared()
    types = {n: value(n, "command_type") for n in nodes if "command_type" in tables.get(n, {})}
    for n, t in types.items():
        if t not in COMMAND_TYPES:
            raise ConfigError(f"{n}.command_type: expected one of {list(COMMAND_TYPES)}, got {t!r}")
    if len(set(types.values())) > 1:
        said = ", ".join(f"{n} {t}" for n, t in types.items())
        raise ConfigError(f"command_type: {said}; safety sends the safe command as one message type, and the robot "
                          f"and every node hearing it must take that one (set it once, in the launch YAML's /** "
                          f"section)")
    orders = {n: value(n, "command_joints") for n in nodes if "command_joints" in tables.get(n, {})}
    if len(set(orders.values())) > 1:
        said = ", ".join(f"{n} {o!r}" for n, o in orders.items())
        raise ConfigError(f"command_joints: {said}; safety sends the command's joints in one order and every node "
                          f"reading it must read that one (set it once, in the launch YAML's /** section)")
    if any(orders.values()) and "joint_trajectory" in types.values():
        raise ConfigError(f"command_joints: {next(o for o in orders.values() if o)!r} with command_type "
                          f"joint_trajectory, whose message names its joints; set command_joints '' (it orders a "
                          f"float64_array command)")


def check_params_file(path: str | os.PathLike, nodes: Sequence[str],
                      overrides: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """`check_graph` for a parameter file (its sections as `tinker.bringup.parameter_sections` reads them) with
    ``overrides`` (node or ``/**`` -> name -> value) on top."""
    from tinker.bringup import parameter_sections

    data = yaml.safe_load(Path(path).read_text()) or {}
    over = overrides or {}
    own = {n: {**parameter_sections(data, n)[1], **over.get(n, {})} for n in nodes}
    check_graph(own, {**parameter_sections(data, "")[0], **over.get("/**", {})}, nodes)
