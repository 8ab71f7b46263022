"""`GuardSession`: one safety node's life without ROS, around its `GuardCycle`.

The cycle decides per state, command and deadline. What the node keeps across its lifecycle, and says about
itself, is decided here (the ROS node turns messages into calls, and the results back into messages):

- **configure** builds the SafetyWrapper from the safety YAML and URDF (``watchdog_timeout`` left at its
  default follows the node's control period), the `StateGate` and, where a teleop topic is named, the `Takeover`;
- **the e-stop outlives cleanup**: one latched before cleanup is latched again at the next configure; only
  `reset` with a trusted measured state clears it. No lifecycle transition does;
- **parameters**: ``urdf`` and ``config`` change only while unconfigured, and must name a file;
- **refused inputs** (a wire check failed): counted, the last one named; the cycle holds;
- **what goes out**: the target + measured pose recorded for a cycle served from a person's target (the command's
  wire metadata is `tinker.wire.command_meta`'s);
- **status**: the values and the level (with its message) the node reports in /diagnostics.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tinker_core.errors import ConfigError
from tinker_core.loop.edges import COMMAND_TYPES
from tinker_core.loop.input_ages import Level
from tinker_safety.guard_cycle import Command, GuardCycle, Ports
from tinker_safety.safety_wrapper import SafetyWrapper
from tinker_safety.state_gate import StateGate
from tinker_safety.takeover import Takeover

GATE_PARAMS = ("max_state_age", "max_state_future", "state_jump_tolerance", "state_quarantine")
"""the node parameters that are the `StateGate`'s limits, in its order"""
TAKEOVER_PARAMS = ("intervention_max_age", "intervention_max_future")
"""the node parameters that are the `Takeover`'s limits, in its order"""
FILE_PARAMS = ("urdf", "config")
"""the node parameters read at configure: changed only while unconfigured"""


def load_guard(config: str | None, urdf: str | None, period: float,
               clock: Callable[[], float] = time.monotonic, extra_scene: Sequence[dict] = ()) -> SafetyWrapper:
    """The SafetyWrapper of the safety YAML ``config`` (None: the shipped one) on ``urdf`` (None: the iiwa),
    at the node's control ``period``, its watchdog on ``clock``, ``extra_scene`` (scene items: a simulated task's
    table and bins) added to the YAML's known scene; a ``watchdog_timeout`` equal to the YAML's period follows
    ``period``."""
    from tinker_core.config import read_yaml
    from tinker_safety.config import DEFAULT_CONFIG_PATH

    cfg = read_yaml(config or DEFAULT_CONFIG_PATH)
    if float(cfg.get("watchdog_timeout", period)) == float(cfg.get("control_period", period)):
        cfg["watchdog_timeout"] = period
    cfg["control_period"] = period
    if extra_scene:
        cfg["scene"] = list(cfg.get("scene") or []) + [dict(item) for item in extra_scene]
    return SafetyWrapper.from_urdf(urdf or None, cfg, clock=clock)


def read_scene_items(text: str, where: str) -> list[dict]:
    """Scene items from JSON ``text`` ('' = none); ConfigError naming ``where`` when it is not a list of objects."""
    import json

    if not text:
        return []
    try:
        items = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{where}: not JSON ({e})") from None
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ConfigError(f"{where}: expected a JSON list of scene items (objects), got {type(items).__name__}")
    return items


class GuardSession:
    """The safety node's state outside the cycle; ``ports``: the host's publishers and timer (`Ports`); ``clock``:
    the monotonic clock of the cycle and the wrapper's watchdog (s)."""

    def __init__(self, ports: Ports, command_type: str = "float64_array", clock: Callable[[], float] = time.monotonic):
        if command_type not in COMMAND_TYPES:
            raise ConfigError(f"safety.command_type: expected one of {list(COMMAND_TYPES)}, got {command_type!r}")
        self.command_type = command_type
        self.clock = clock
        self.cycle = GuardCycle(ports, clock)
        self.estop_carry = ""  # an e-stop latched before cleanup: latched again at configure
        self.refused = 0
        self.last_error = ""
        self.names: list[str] = []

    # --- configuration --------------------------------------------------------------------------
    def configure(self, config: str | None, urdf: str | None, period: float, state_topic: str,
                  gate_limits: Sequence[float], teleop_topic: str = "", takeover_limits: Sequence[float] = (),
                  extra_scene: Sequence[dict] = ()) -> None:
        """Wrapper, gate and takeover (``teleop_topic`` '': none) for the next activation; raises on a bad file.
        ``extra_scene``: scene items added to the YAML's (`load_guard`). The node releases (`release`) what it made
        when this raises."""
        guard = load_guard(config, urdf, period, self.clock, extra_scene)
        self.cycle.configure(guard, StateGate(guard.limits.velocity, state_topic, *gate_limits))
        self.names = list(guard.limits.names)
        self.cycle.takeover = Takeover(len(self.names), teleop_topic, *takeover_limits) if teleop_topic else None
        if self.estop_carry:  # an e-stop latched before cleanup stays latched: only ~/reset clears it
            guard.estop(f"latched before cleanup ({self.estop_carry})")

    def configure_from(self, get: Callable[[str], Any], period: float, state_topic: str, teleop_topic: str = "") -> None:
        """`configure` from the node's parameters, ``get(name)``: ``config``, ``urdf``, the gate's and the takeover's
        limits and ``task_fixtures``."""
        self.configure(get("config") or None, get("urdf") or None, period, state_topic, [get(n) for n in GATE_PARAMS],
                       teleop_topic, [get(n) for n in TAKEOVER_PARAMS],
                       read_scene_items(get("task_fixtures"), "safety.task_fixtures"))

    def limits_from(self, get: Callable[[str], Any]) -> None:
        """`set_limits` from the node's parameters, ``get(name)``."""
        self.set_limits([get(n) for n in GATE_PARAMS], [get(n) for n in TAKEOVER_PARAMS])

    def set_limits(self, gate_limits: Sequence[float], takeover_limits: Sequence[float]) -> None:
        """The state checks and the takeover take changed limits at once."""
        if self.cycle.gate is not None:
            self.cycle.gate.configure(*gate_limits)
        if self.cycle.takeover is not None:
            self.cycle.takeover.configure(*takeover_limits)

    def param_refusal(self, name: str, value: object) -> str:
        """Why a change of parameter ``name`` cannot take effect now ('' = it can; ranges and read-only are rclpy's)."""
        if name not in FILE_PARAMS:
            return ""
        if self.cycle.guard is not None:
            return (f"safety.{name}: takes effect at configure; the node is configured: deactivate and "
                    f"cleanup first")
        v = str(value or "")
        if v and not Path(v).is_file():
            return f"safety.{name}: file not found: {v}"
        return ""

    def release(self) -> None:
        """Cleanup: a latched e-stop is carried to the next configure; wrapper, gate and state go."""
        if self.cycle.guard is not None and self.cycle.guard.estopped:
            self.estop_carry = self.estop_reason()
        self.cycle.release()

    # --- inputs and operator calls ----------------------------------------------------------------
    @property
    def takes_commands(self) -> bool:
        """A policy command can go on now (else only a hold answers it, and it is not even read)."""
        c = self.cycle
        return c.active and c.q is not None and not c.untrusted

    def refuse(self, err: Exception) -> None:
        """An input failed its wire check: counted, named in /diagnostics; the cycle holds."""
        self.refused += 1
        self.last_error = str(err)

    def estop(self, why: str) -> tuple[bool, str]:
        """``~/estop``: latch the e-stop (hold at the measured pose); (done, message for the operator)."""
        if self.cycle.guard is None:
            return False, "not configured"
        self.cycle.estop(why)
        return True, "e-stop latched"

    def reset(self) -> tuple[bool, str]:
        """``~/reset``: clear the e-stop from the trusted measured pose (the carried one too)."""
        ok, message = self.cycle.reset()
        if ok:
            self.estop_carry = ""
        return ok, message

    def estop_reason(self) -> str:
        """``cause: detail`` of the latched e-stop ('' = none latched)."""
        guard = self.cycle.guard
        if guard is None or not guard.estopped:
            return ""
        rep = guard.report()
        return f"{rep['estop_cause']}: {rep['estop_detail']}"

    # --- what goes out -----------------------------------------------------------------------------
    @staticmethod
    def intervened(command: Command) -> np.ndarray | None:
        """What a cycle served from a person's target records for the learner: target, then measured pose."""
        return None if command.teleop is None else np.concatenate([command.teleop, command.measured])

    def values(self, namesake: str = "") -> dict[str, object]:
        """The node's own /diagnostics values."""
        c = self.cycle
        vals: dict[str, object] = {"active": c.active, "holds": c.holds, "no_command": c.no_command,
                                   "refused_inputs": self.refused, "state_refusal": c.untrusted,
                                   "episode_starts": c.gate.episode_starts if c.gate else 0,
                                   "stale_commands": c.order.dropped,
                                   **{f"refused_states.{k}": v for k, v in c.refused_states.items()},
                                   "policy_active": c.policy_active, "ramp_restarts": c.ramp_restarts,
                                   "misses_in_row": c.misses_in_row,
                                   "namesake": namesake, "command_type": self.command_type,
                                   "last_error": self.last_error}
        if c.guard is not None:
            vals["estopped"] = c.guard.estopped
            rep = c.guard.report()
            vals["estop_cause"] = rep["estop_cause"] or ""
            vals["phase"] = rep["phase"]
            for k, v in rep["counters"].items():
                vals[f"interventions.{k}"] = v
        if c.takeover is not None:
            vals.update({f"teleop.{k}": v for k, v in c.takeover.counters().items()},
                        **{"teleop.engaged": c.takeover.engaged, "teleop.last_refusal": c.takeover.last_refusal})
        return vals

    def level(self, namesake: str = "") -> tuple[Level, str]:
        """The node's own level and why, the worst condition first."""
        c = self.cycle
        if namesake:
            return Level.ERROR, namesake
        if c.guard is not None and c.guard.estopped:
            return Level.ERROR, "e-stop latched"
        if c.untrusted:
            return Level.ERROR, f"holding: state refused: {c.untrusted}"
        if c.guard is None:
            return Level.WARN, f"unconfigured{': ' + self.last_error if self.last_error else ''}"
        if not c.active:
            return Level.WARN, "inactive: not commanding"
        if not c.policy_active:
            return Level.WARN, "holding: the policy is not active"
        if c.misses_in_row:
            return Level.WARN, f"holding: {c.misses_in_row} cycle(s) without a policy command"
        return Level.OK, "guarding"
