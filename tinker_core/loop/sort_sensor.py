"""The sort task's reward and success from what a real sorting cell measures: a declared *success sensor*.

`SortSensor` computes, from one cycle's features (the policy input perception published), the reward the sort task
gives (`tinker_sim.tasks.sort.SortTask.evaluate`), from what a robot has instead of the simulator's state:

- the objects: where the camera sees them, of which kind, and whether each rests inside its bin (the features'
  ``obj<i>_pos``, ``obj<i>_kind``, ``obj<i>_bin_minus_obj`` and ``obj<i>_sorted`` terms, which the bundle's
  perception computes from the image: `tinker_core.nn.located_objects`, "an object detected in a bin by the
  camera"); an empty slot (no kind) is absent;
- the hand: forward kinematics of the measured joint positions (``joint_pos``); the suction cup's vacuum sensor
  (``suction_active``): while it holds, the object it holds is the one the camera sees nearest the hand;
- the cell: the bins' centres, inner half-width and rim height, measured once (an object seen inside another
  kind's bin, below its rim, is in a wrong bin).

Reward per state, as the task's: ``per_sorted`` per sorted object ("per_step"; "remaining": minus it per object
not yet sorted), minus ``wrong_bin_penalty`` per object in a wrong bin, plus ``success_bonus`` when every present
object is sorted, else minus the distances hand -> object -> its bin for the object held or the first unsorted one.
So it equals the env's reward when perception sees what the simulator has, and follows perception where it errs.
The numbers and the geometry are given by the composition root from the task that owns them
(`tinker_sim.tasks.sort.sensor_rule`); this layer does not import the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.observation import ObservationAssembly
from tinker_core.loop.sensor_reward import SensorReading

OBJECT_TERMS = ("pos", "kind", "bin_minus_obj", "sorted")
"""the perceived terms of each object slot the sensor reads"""


@dataclass(frozen=True)
class SortSensorConfig:
    """The sorting sensor's settings; the rule's numbers and the cell's geometry come from the env's task."""

    time_limit_cycles: int
    """cycles per episode before it is truncated (the env's time limit)"""
    bins: tuple[tuple[float, float], ...]
    """per kind, the (x, y) centre of its bin (base frame, m)"""
    bin_inner_half: float
    """m; an object within this of a bin's centre in x and y ..."""
    rim_z: float
    """... and with its centre below this height (m) is in that bin"""
    per_sorted: float = 2.0
    wrong_bin_penalty: float = 1.0
    success_bonus: float = 5.0
    sorted_reward: str = "per_step"
    """"per_step": +per_sorted per sorted object; "remaining": -per_sorted per object not yet sorted"""
    settle_cycles: int = 1
    """states in a row every object must be seen sorted before the episode ends (`SensorOutcome`)"""
    name: str = "sort_objects_seen_in_bins"
    """the sensor's declared name (in the bridge's diagnostics and the transitions' info)"""
    joint_term: str = "joint_pos"
    suction_term: str = "suction_active"
    hold_target: bool = field(default=False, init=False)
    """(`SensorOutcome` reads it: a sorter's objects move, so nothing is held)"""

    def __post_init__(self) -> None:
        if int(self.time_limit_cycles) < 1:
            raise ConfigError(f"SortSensorConfig.time_limit_cycles: expected >= 1, got {self.time_limit_cycles!r}")
        if int(self.settle_cycles) < 1:
            raise ConfigError(f"SortSensorConfig.settle_cycles: expected >= 1, got {self.settle_cycles!r}")
        if self.sorted_reward not in ("per_step", "remaining"):
            raise ConfigError(f"SortSensorConfig.sorted_reward: expected 'per_step' or 'remaining', got "
                              f"{self.sorted_reward!r}")
        if not self.bin_inner_half > 0 or len(self.bins) < 1:
            raise ConfigError(f"SortSensorConfig: expected bins and a positive bin_inner_half, got {self.bins!r}, "
                              f"{self.bin_inner_half!r}")


class SortSensor:
    """Reward and success of the sort task from one cycle's features (see the module docstring).

    ``obs_terms``: the bundle's observation terms; ``image_terms``: the names its perception computes from the
    image (every object term must be one: a sensor reward needs objects the robot perceives); ``fk``: joint
    positions -> end effector position (base frame, m)."""

    def __init__(self, config: SortSensorConfig, obs_terms: Sequence[Any], image_terms: Sequence[str],
                 fk: Callable[[np.ndarray], np.ndarray]):
        self.config, self.fk = config, fk
        self.assembly = asm = ObservationAssembly(list(obs_terms))
        self.slots = sum(1 for n in asm.names if n.startswith("obj") and n.endswith("_sorted"))
        want = [f"obj{i}_{t}" for i in range(self.slots) for t in OBJECT_TERMS]
        missing = [n for n in want + [config.joint_term, config.suction_term] if n not in asm.slots]
        if not self.slots or missing:
            raise ConfigError(f"success sensor {config.name!r}: the features lack {missing or 'object slots'} "
                              f"(terms: {asm.names})")
        told = [n for n in want if n not in image_terms]
        if told:
            raise ConfigError(f"success sensor {config.name!r}: {told} do not come from the camera (the bundle's "
                              f"image_terms are {list(image_terms)}); a sensor reward needs objects the robot "
                              f"perceives, not ones the simulator tells it")
        if np.any(asm.scale == 0):
            raise ConfigError(f"success sensor {config.name!r}: a term with scale 0 cannot be read back")
        self.size = asm.size
        self._bins = np.asarray(config.bins, dtype=np.float64)

    def _raw(self, f: np.ndarray, name: str) -> np.ndarray:
        return self.assembly.raw_term(f, name)

    def read(self, features: np.ndarray, target: np.ndarray | None = None) -> SensorReading:
        """The reading of one cycle's features (the scaled policy input); ``target`` is not used (nothing held)."""
        f = np.asarray(features, dtype=np.float64).reshape(-1)
        if f.shape[0] != self.size:
            raise ValidationError(f"{self.config.name}.features", f"{self.size} values (the bundle's terms)",
                                  f"{f.shape[0]} values")
        c = self.config
        ee = np.asarray(self.fk(self._raw(f, c.joint_term)), dtype=np.float64)
        seen = []  # (position, bin position, kind, seen sorted) of each object present
        for i in range(self.slots):
            onehot = self._raw(f, f"obj{i}_kind")
            if onehot.max() < 0.5:
                continue  # an empty slot: no object there
            p = self._raw(f, f"obj{i}_pos")
            seen.append((p, p + self._raw(f, f"obj{i}_bin_minus_obj"), int(np.argmax(onehot)),
                         bool(self._raw(f, f"obj{i}_sorted")[0] > 0.5)))
        if not seen:
            return SensorReading(c.success_bonus, True, 0.0, ee, ee)
        pos = np.array([o[0] for o in seen])
        held = None
        if self._raw(f, c.suction_term)[0] > 0.5:  # the cup holds: the object nearest the hand
            held = int(np.argmin(np.linalg.norm(pos - ee, axis=1)))
        free = np.arange(len(seen)) != held
        is_sorted = np.array([o[3] for o in seen]) & free
        inside = (np.all(np.abs(pos[:, None, :2] - self._bins[None]) < c.bin_inner_half, axis=2)
                  & (pos[:, 2:3] < c.rim_z))  # object x bin: resting inside it
        for j, o in enumerate(seen):
            inside[j, o[2]] = False  # its own bin is not a wrong one
        wrong = inside.any(axis=1) & free & ~is_sorted
        n = int(is_sorted.sum())
        sorted_term = n if c.sorted_reward == "per_step" else n - len(seen)
        reward = c.per_sorted * sorted_term - c.wrong_bin_penalty * int(wrong.sum())
        if n == len(seen):
            return SensorReading(reward + c.success_bonus, True, 0.0, ee, ee)
        j = held if held is not None else int(np.flatnonzero(~is_sorted)[0])
        d = float(np.linalg.norm(pos[j] - ee))
        reward -= d + float(np.linalg.norm(seen[j][1] - pos[j]))
        return SensorReading(reward, False, d, ee, pos[j])
