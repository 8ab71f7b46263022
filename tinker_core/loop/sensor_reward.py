"""The reach task's reward and success from what a real robot measures: a declared *success sensor*.

`ReachSensor` computes, from one cycle's features (the policy input perception published), the reward the
reach task gives (`tinker_sim.tasks.reach.ReachTask.evaluate`: ``-distance``, plus ``success_bonus`` within
``success_distance``), with two inputs a real robot has instead of the simulator's state:

- the end effector: forward kinematics (``fk``, from the URDF: `tinker_core.loop.kinematics`) of the measured
  joint positions (the features' ``joint_pos`` term, unscaled: what perception read from ``joint_states``);
- the target: where the camera sees it (the features' ``target_pos`` term, which the bundle's perception model
  computes from the image: a term of its ``image_terms``), not where the simulator put it.

So it equals the env's reward exactly when perception finds the true target, and is off by the perception's
error otherwise: with a moved camera the sensor rewards reaching the *perceived* target, which perception corrects
where the bundle can see the hand (`tinker_core.loop.held_estimate.EstimateHold`'s camera offset); a bias left
over is one fine-tuning from the sensor cannot remove, and human labels can. The success rule (distance, bonus) and the time limit are the env's, passed
in by the composition root (this layer does not import the simulator).

`SensorOutcome` turns readings into the outcome of each state the experience bridge joins: it pairs a state's
counters (cycle, episode: what a real driver gives with its state) with the features of the same stamp, reads
the target from them (or, with ``hold_target``, on the episode's first state and holds it), ends an episode on the sensor's success
(terminated) or at the time limit (truncated), and keeps reporting that end for the episode's later states (the
joiner starts no transition from them).

Why a held target: with the target of every frame's own estimate, the sensor declared 49 of 60 episodes
successful where the simulator counted 36 (14 false successes, at true distances of 5.4 to 10.6 cm: the
locator's estimate wanders when the arm hides the target); with the first frame's target held, 33 (1 false
success, 4 missed). Vision reach on far_latency_reach, seeds 1000-1059, 50 cycles each:
docs/sim2real/sensor_reward.md. Perception now holds the estimate itself by default (the mean over the frames
that show the target), so the sensor reads each state's features as they are unless told otherwise.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.observation import ObservationAssembly


@dataclass(frozen=True)
class SensorConfig:
    """The success sensor's settings; the rule's numbers come from the env's task (never a second constant)."""

    success_distance: float
    """m; success when the end effector is closer than this to the perceived target (the task's own)"""
    success_bonus: float
    """added to ``-distance`` on success (the task's own)"""
    time_limit_cycles: int
    """cycles per episode before it is truncated (the env's time limit, e.g. its ``max_episode_steps``)"""
    name: str = "reach_perceived_target"
    """the sensor's declared name (in the bridge's diagnostics and the transitions' info)"""
    target_term: str = "target_pos"
    """the features' term holding the perceived target (base frame, m); must be one of the bundle's image_terms"""
    joint_term: str = "joint_pos"
    """the features' term holding the measured joint positions (rad, the manifest's joint order)"""
    settle_cycles: int = 1
    """states in a row the target must be reached before the episode ends (`SensorOutcome`; 1: at once)"""
    hold_target: bool = False
    """True: read the target on an episode's first state and hold it for the episode (`SensorOutcome`), for
    perception that estimates per frame: the reach target does not move within an episode, and near it the arm
    hides it from the camera, where a target read on every frame wanders by centimetres just when the sensor
    decides. False (the default): the target in each state's own features, which carry perception's held
    estimate (its default: the mean over the frames that show the target,
    `tinker_core.loop.held_estimate.EstimateHold`)"""

    def __post_init__(self) -> None:
        if not self.success_distance > 0:
            raise ConfigError(f"SensorConfig.success_distance: expected > 0 m, got {self.success_distance!r}")
        if int(self.time_limit_cycles) < 1:
            raise ConfigError(f"SensorConfig.time_limit_cycles: expected >= 1, got {self.time_limit_cycles!r}")
        if int(self.settle_cycles) < 1:
            raise ConfigError(f"SensorConfig.settle_cycles: expected >= 1, got {self.settle_cycles!r}")


@dataclass(frozen=True)
class SensorReading:
    """What the sensor read from one state."""

    reward: float
    success: bool
    distance: float
    """m, end effector (FK of the measured joints) to the perceived target"""
    ee: np.ndarray
    target: np.ndarray


class ReachSensor:
    """Reward and success of the reach task from one cycle's features (see the module docstring).

    ``obs_terms``: the bundle's observation terms (the features' layout: name, size, scale, offset);
    ``image_terms``: the names its perception model computes from the image; ``fk``: joint positions -> end
    effector position (base frame, m).
    """

    def __init__(self, config: SensorConfig, obs_terms: Sequence[Any], image_terms: Sequence[str],
                 fk: Callable[[np.ndarray], np.ndarray]):
        self.config, self.fk = config, fk
        self.asm = ObservationAssembly(obs_terms)
        self.size = self.asm.size
        for term in (config.joint_term, config.target_term):
            if term not in self.asm.slots:
                raise ConfigError(f"success sensor {config.name!r}: the features have no term {term!r} "
                                  f"(terms: {self.asm.names})")
        if config.target_term not in image_terms:
            raise ConfigError(f"success sensor {config.name!r}: the features' {config.target_term!r} does not come "
                              f"from the camera (the bundle's image_terms are {list(image_terms)}); a sensor reward "
                              f"needs a target the robot perceives, not one the simulator tells it")
        if any(np.any(self.asm.scale[self.asm.slots[t]] == 0) for t in (config.target_term, config.joint_term)):
            raise ConfigError(f"success sensor {config.name!r}: a term with scale 0 cannot be read back")

    def read(self, features: np.ndarray, target: np.ndarray | None = None) -> SensorReading:
        """The reading of one cycle's features (the scaled policy input); ``target``: a held target (base frame,
        m) read instead of the features' own."""
        f = np.asarray(features).reshape(-1)
        if f.shape[0] != self.size:
            raise ValidationError(f"{self.config.name}.features", f"{self.size} values (the bundle's terms)",
                                  f"{f.shape[0]} values")
        ee = np.asarray(self.fk(self.asm.raw_term(f, self.config.joint_term)), dtype=np.float64)
        target = (self.asm.raw_term(f, self.config.target_term) if target is None
                  else np.asarray(target, dtype=np.float64))
        d = float(np.linalg.norm(target - ee))
        success = d < self.config.success_distance
        return SensorReading(-d + (self.config.success_bonus if success else 0.0), bool(success), d, ee, target)


@dataclass(frozen=True)
class Outcome:
    """The outcome of reaching the state stamped ``stamp``, as `tinker_core.loop.cycle_join.CycleJoiner.outcome`
    takes it."""

    stamp: int
    cycle: int
    episode: int
    reward: float
    terminated: bool
    truncated: bool
    ends_here: bool = False
    """the sensor ended the episode at this state (the later states of it repeat ``terminated``/``truncated``)"""


class SuccessSensor(Protocol):
    """What `SensorOutcome` reads: `ReachSensor`, `tinker_core.loop.sort_sensor.SortSensor`."""

    config: Any
    """its ``name``, ``time_limit_cycles``, ``settle_cycles``, ``success_bonus`` and ``hold_target``"""

    def read(self, features: np.ndarray, target: np.ndarray | None = None) -> SensorReading: ...


class SensorOutcome:
    """Pairs a state's counters and its features by stamp; gives each state's `Outcome` from the sensor."""

    def __init__(self, sensor: SuccessSensor, keep: int = 64):
        self.sensor, self.keep = sensor, int(keep)
        self._counters: OrderedDict[int, tuple[int, int]] = OrderedDict()
        self._features: OrderedDict[int, np.ndarray] = OrderedDict()
        self._episode, self._first_cycle, self._ended = None, 0, None  # ended: (terminated, truncated)
        self._seen_done = 0  # states in a row the sensor has seen the task done
        self._held: np.ndarray | None = None  # the episode's target, with config.hold_target
        self.successes = 0
        """episodes the sensor declared successful"""
        self.last: SensorReading | None = None

    def counters(self, stamp: int, cycle: int, episode: int) -> Outcome | None:
        """The state's cycle and episode counters; its outcome once its features are in too."""
        feats = self._features.pop(stamp, None)
        if feats is None:
            self._put(self._counters, stamp, (int(cycle), int(episode)))
            return None
        return self._outcome(stamp, int(cycle), int(episode), feats)

    def features(self, stamp: int, values: np.ndarray) -> Outcome | None:
        """The state's features; its outcome once its counters are in too."""
        cnt = self._counters.pop(stamp, None)
        if cnt is None:
            self._put(self._features, stamp, np.asarray(values))
            return None
        return self._outcome(stamp, cnt[0], cnt[1], values)

    def _put(self, d: OrderedDict, stamp: int, value: Any) -> None:
        d[stamp] = value
        while len(d) > self.keep:
            d.popitem(last=False)  # the other half never came: that state has no outcome

    def _outcome(self, stamp: int, cycle: int, episode: int, features: np.ndarray) -> Outcome:
        c = self.sensor.config
        if episode != self._episode:
            self._episode, self._first_cycle, self._ended, self._held = episode, cycle, None, None
            self._seen_done = 0
        r = self.last = self.sensor.read(features, self._held)
        if c.hold_target and self._held is None:
            self._held = r.target  # the episode's first state with features: the arm at its start pose
        reward, ends_here = r.reward, False
        if self._ended is None:
            self._seen_done = self._seen_done + 1 if r.success else 0
            if r.success and self._seen_done >= c.settle_cycles:
                self._ended = (True, False)
                self.successes += 1
            elif r.success:  # done as seen, not yet settled: the success bonus is paid once, where it ends
                reward -= c.success_bonus
            if self._ended is None and cycle - self._first_cycle + 1 >= c.time_limit_cycles:
                self._ended = (False, True)
            terminated, truncated = self._ended or (False, False)
            ends_here = self._ended is not None
        else:
            terminated, truncated = self._ended  # the episode ended: every later state says so
        return Outcome(stamp, cycle, episode, reward, terminated, truncated, ends_here)
