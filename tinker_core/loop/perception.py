"""`PerceptionCycle`: which inputs make one perception cycle, and the features it gives (no ROS).

Inputs arrive one by one (the node converts messages and hands them here): the robot's joint state, a
camera frame, task terms, the policy's last raw action. A cycle runs once per joint state, never on two
states' inputs mixed:

- task terms ``synced`` (the simulated robot publishes this state's terms with the state's stamp): a
  cycle waits for the terms of its own stamp;
- not synced (a goal a real system publishes when it changes): the newest terms serve every state, and
  terms that follow from the state are derived: ``ee_pos`` by forward kinematics (``ee_fn``), and
  ``<x>_minus_ee`` as ``<x>_pos - ee_pos``;
- frames: ``sync_frames`` waits for the frame of the state's stamp; otherwise the newest frame serves,
  and one older than ``max_frame_age_ns`` is refused. A frame taken before the current episode's first
  state (the synced task terms declare episodes) shows the scene before the reset: the cycle waits for one
  of this episode;
- channels (`tinker_core.multiagent.channel_edge.ChannelInbox`): a bundle trained hearing channels has a
  ``channel/NAME`` term per channel; a cycle never waits for one: it takes the newest accepted message, or
  zeros when none came or it is older than the channel's ``max_age`` (on ``clock``), as in training;
- ``image_terms`` (a bundle's ``image_terms``: what its perception model computes from the image, e.g. the
  target a locator finds): never taken from the task input, never waited for; their slots in the model's
  state input hold the term's offset (0 once scaled), so the simulator's value of them cannot reach the policy;
- ``estimate`` (`tinker_core.loop.held_estimate.ESTIMATE_MODES`): ``auto`` (the default) holds the image terms
  wherever the episodes are known (the synced task terms declare them): averaged over the episode's frames that
  show the target (`tinker_core.loop.held_estimate.EstimateHold`), or, for things that move (the manifest's
  ``image_terms_static: false``: the sorter's objects), each over the frames it has rested for
  (`tinker_core.loop.resting_hold.RestingHold`); ``per_frame`` uses each frame's own;
- ``hand`` (a bundle's ``hand`` model: the end effector the camera sees): with a held estimate, it calibrates a
  moved camera (`EstimateHold`'s ``camera_offset``); with ``per_frame`` it is not run;
- ``compensation`` (`tinker_core.loop.latency_compensation.LatencyCompensation`, on a robot whose commands land
  late): the arm's terms are put at the pose the newest safe command (``on_command``; one answering a state of
  this episode) brings the arm to. Where the model computes image terms (its output keeps the state's layout) it
  is applied to the model's output, after the hold, so that what the camera sees is judged at the measured pose;
  otherwise to the state the model reads.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from tinker_core.errors import ConfigError, ValidationError
from tinker_core.loop.held_estimate import CALIBRATION_DEADBAND_M, estimate_hold, holds_estimate
from tinker_core.loop.latency_compensation import NewestCommand
from tinker_core.loop.observation import ObservationAssembly
from tinker_core.multiagent.channels import TERM_PREFIX
from tinker_core.spec import DictSpec

STATE_TERMS = ("joint_pos", "joint_vel", "last_action")
"""terms that come from the joint state and the policy, not from the task input"""


@dataclass(slots=True)
class PerceivedCycle:
    """One cycle's output: the features, and what the cycle was made of."""

    stamp_ns: int
    cycle: int
    episode: str
    features: np.ndarray
    extra: dict[str, int] = field(default_factory=dict)
    """trace fields: ``frame_age_us`` when a camera frame was used"""


class PerceptionCycle:
    """The observation of each joint state, through ``model`` (obs -> features)."""

    def __init__(self, obs_spec: Any, obs_terms: list, model: Callable[[Any], np.ndarray], n_action: int,
                 synced: bool = True, sync_frames: bool = False, max_frame_age_ns: int = 250_000_000,
                 ee_fn: Callable[[np.ndarray], np.ndarray] | None = None, channels: Any = None,
                 clock: Callable[[], int] = time.time_ns, image_terms: Sequence[str] = (),
                 estimate: str = "auto", hand: Callable[[Any], np.ndarray] | None = None,
                 deadband_m: float = CALIBRATION_DEADBAND_M, image_terms_static: bool = True,
                 located_geometry: Mapping[str, Any] | None = None, compensation: Any = None):
        """``channels``: the `ChannelInbox` of the channels this robot hears (None: none); it must match the
        bundle's ``channel/NAME`` terms, name and size. ``clock``: ns, the inbox's clock (a message's age).
        ``deadband_m``: the held estimate's calibration deadband (`EstimateHold`). ``image_terms_static``: what
        the image terms locate stays put within an episode (a bundle manifest's field): False, the hold is a
        `tinker_core.loop.resting_hold.RestingHold`, which corrects a moved camera through ``located_geometry`` (a
        manifest's field) where there is a ``hand``."""
        self.image_key = self.state_key = None
        state_spec, self.image_shape = obs_spec, None
        if isinstance(obs_spec, DictSpec):
            state_spec = None
            for k, s in obs_spec.items():
                if len(s.shape) == 3:
                    self.image_key, self.image_shape = k, tuple(s.shape)
                else:
                    self.state_key, state_spec = k, s
        terms = [t for t in obs_terms if _name(t) != self.image_key]
        self.assembly = ObservationAssembly.from_spec(terms, state_spec)
        self.image_terms = {_name(t): np.broadcast_to(np.asarray(_field(t, "offset"), np.float64),
                                                      (int(_field(t, "size")),))
                            for t in terms if _name(t) in set(image_terms)}
        """term name -> the raw value its slot holds (its offset): the model computes these from the image"""
        missing = sorted(set(image_terms) - set(self.image_terms))
        if missing or (image_terms and not self.image_key):
            raise ConfigError(f"perception.image_terms: {sorted(image_terms)} must be state terms of a model that "
                              f"takes an image; " + (f"no such terms: {missing}" if missing else "this one takes none"))
        self.model, self.synced, self.sync_frames = model, bool(synced), bool(sync_frames)
        self.max_frame_age_ns, self.ee_fn = int(max_frame_age_ns), ee_fn
        held = holds_estimate(estimate, list(self.image_terms), synced, where="perception.estimate")
        self.hold = (estimate_hold(terms, list(self.image_terms), static=image_terms_static,
                                   calibrate=hand is not None, deadband_m=deadband_m,
                                   geometry=located_geometry) if held else None)
        self.hand = hand if held else None
        names = set(self.assembly.names) - set(self.image_terms)
        self.derived = {} if synced else {n: n[: -len("_minus_ee")] + "_pos" for n in names
                                          if n.endswith("_minus_ee") and n[: -len("_minus_ee")] + "_pos" in names}
        if not synced and ee_fn is not None:
            self.derived["ee_pos"] = ""
        self.channels, self.clock = channels, clock
        self.compensation = (compensation if compensation is not None and (compensation.steps or compensation.follows)
                             else None)
        self._commanded = NewestCommand(self.compensation.dof if self.compensation else 0, "perception")
        self._check_channels(terms)
        self.needed = names - set(STATE_TERMS) - set(self.derived) - {n for n in names if n.startswith(TERM_PREFIX)}
        if not synced and ("ee_pos" in names or self.derived) and ee_fn is None:
            raise ConfigError("perception: the bundle's terms need ee_pos; with an unsynced task input it comes from "
                              "forward kinematics, and no robot model (urdf) was given")
        self.last_action = np.zeros(int(n_action))
        self._js: tuple[int, int, np.ndarray, np.ndarray] | None = None
        self._img: tuple[int, np.ndarray] | None = None
        self._task: dict[str, np.ndarray] = {}
        self._task_stamp = -1
        self._done_stamp = -1
        self._episode_start_ns = -1
        self._count = 0
        self.episode = "0"
        self.frame_age_ns = 0

    def _check_channels(self, terms: list) -> None:
        """The bundle's channel slots and the channels declared for this robot must be the same, sizes included."""
        slots = {_name(t): int(t["size"] if isinstance(t, Mapping) else t.size) for t in terms
                 if _name(t).startswith(TERM_PREFIX)}
        declared = {} if self.channels is None else {ch.term: ch.size for ch in self.channels.heard}
        for term, size in slots.items():
            if term not in declared:
                raise ConfigError(f"perception: the bundle was trained hearing {term!r} ({size} values) but this robot "
                                  f"hears {sorted(declared) or 'no channel'}; declare the channel in the agents file "
                                  f"(channels: {term[len(TERM_PREFIX):]}: {{from: ..., to: [this robot], size: {size}}})")
            if declared[term] != size:
                raise ConfigError(f"perception: channel {term!r} is declared with {declared[term]} values, the bundle "
                                  f"was trained with {size}")
        extra = sorted(set(declared) - set(slots))
        if extra:
            raise ConfigError(f"perception: this robot hears {extra} but its bundle has no slot for them (its "
                              f"observation terms: {[_name(t) for t in terms]}); run a bundle trained with the channel")

    def on_channel(self, name: str, values: np.ndarray, sender: str | None = None) -> str:
        """A message heard on channel ``name`` now (``clock``): '' when accepted, else why it was refused
        (counted in ``channels.refused``). Never runs a cycle: a cycle waits for no message."""
        if self.channels is None:
            raise ConfigError(f"perception: a message on channel {name!r}, but this robot hears no channel")
        return self.channels.deliver(name, values, self.clock(), sender)

    def take_inputs(self, other: "PerceptionCycle") -> None:
        """Continue from ``other``'s inputs (a reloaded model: the goal and the last state stay)."""
        self._js, self._img, self._task = other._js, other._img, dict(other._task)
        self._task_stamp, self._done_stamp, self._count, self.episode = (other._task_stamp, other._done_stamp,
                                                                         other._count, other.episode)
        if self.channels is not None and other.channels is not None:
            self.channels = other.channels  # the messages heard (and the counters) stay with the robot
        self._episode_start_ns = other._episode_start_ns
        self._commanded = other._commanded
        if self.compensation is not None and other.compensation is not None and self.compensation.follows:
            self.compensation.follow(other.compensation.steps)  # the latency measured so far stays
        if type(self.hold) is type(other.hold) and self.hold is not None:  # a reload keeps the episode's estimate
            self.hold.continue_from(other.hold)
        if other.last_action.shape == self.last_action.shape:
            self.last_action = other.last_action

    # --- inputs: each returns the cycle it completed, if any ------------------------------------
    def on_state(self, stamp_ns: int, q: np.ndarray, qd: np.ndarray, cycle: int | None = None) -> PerceivedCycle | None:
        self._count = self._count + 1 if cycle is None else int(cycle)
        self._js = (int(stamp_ns), self._count, q, qd)
        return self.run()

    def on_frame(self, stamp_ns: int, image: np.ndarray) -> PerceivedCycle | None:
        self._img = (int(stamp_ns), image)
        return self.run()  # a cycle that waited for its (or the first) frame runs now

    def on_task(self, stamp_ns: int, terms: Mapping[str, np.ndarray], episode: str | None = None) -> PerceivedCycle | None:
        self._task.update(terms)
        self._task_stamp = int(stamp_ns)
        if episode is not None and str(episode) != self.episode:
            self.episode = str(episode)
            self._episode_start_ns = int(stamp_ns)  # earlier frames show the scene before the reset
        return self.run() if self.synced else None  # a state waiting for this stamp's terms runs now

    def on_command(self, stamp_ns: int, q: np.ndarray) -> None:
        """The safe command answering state ``stamp_ns`` (joint targets, the bundle's joint order): the newest one
        sent toward the motors, from which ``compensation`` predicts the pose."""
        self._commanded.note(stamp_ns, q)

    def on_action(self, raw: np.ndarray) -> None:
        if raw.shape != self.last_action.shape:
            raise ValidationError("perception.last_action", f"{self.last_action.shape[0]} values", f"{raw.shape[0]} values")
        self.last_action = np.clip(raw, -1.0, 1.0)

    # --- the cycle ----------------------------------------------------------------------------
    def run(self) -> PerceivedCycle | None:
        """The features of the newest state when all of its inputs are in (None: still waiting);
        raises ValidationError on an input that must not be used (a stale frame, non-finite features)."""
        js, img = self._js, self._img
        if js is None or (self.image_key and img is None) or not self.needed <= self._task.keys():
            return None  # the first messages of each input are still on their way
        stamp, cycle, q, qd = js
        if stamp == self._done_stamp or (self.image_key and self.sync_frames and img[0] != stamp):
            return None
        if self.synced and self.needed and self._task_stamp != stamp:
            return None  # this state's task terms (target, target - ee) are still on their way: never mix two states
        extra: dict[str, int] = {}
        if self.image_key:
            age = stamp - img[0]
            if age > self.max_frame_age_ns:
                self._done_stamp = stamp
                raise ValidationError("perception.image", f"a frame at most {self.max_frame_age_ns / 1e9:g} s "
                                      f"older than the joint state", f"{age / 1e9:.3f} s old")
            if img[0] < self._episode_start_ns <= stamp:
                return None  # the frame shows the scene before this episode's reset: wait for one after it
            self.frame_age_ns = age
            extra["frame_age_us"] = age // 1000
        self._done_stamp = stamp
        sources = {**self._task, "joint_pos": q, "joint_vel": qd, "last_action": self.last_action,
                   **self.image_terms}
        if self.channels is not None:
            sources.update(self.channels.sources(self.clock()))
        if self.derived:
            ee = sources["ee_pos"] = self.ee_fn(q) if "ee_pos" in self.derived else sources["ee_pos"]
            for name, pos in self.derived.items():
                if pos:
                    sources[name] = sources[pos] - ee
        state = self.assembly.from_sources(sources)
        if self.compensation is not None and not self.image_terms:
            state = self.compensation(state, self._commanded.since(self._episode_start_ns))
        obs = state
        if self.image_key:
            if tuple(img[1].shape) != self.image_shape:
                raise ValidationError(f"obs.{self.image_key}", f"uint8{list(self.image_shape)}",
                                      f"{img[1].dtype}{list(img[1].shape)}")
            obs = {self.image_key: img[1], **({self.state_key: state} if self.state_key else {})}
        feats = self.model(obs)
        if not np.isfinite(feats).all():
            raise ValidationError("perception.features", "finite values", "NaN/inf from the model")
        if self.hold is not None:
            feats = self.hold(feats, self.episode, img[1], None if self.hand is None else self.hand(obs))
        if self.compensation is not None and self.image_terms:
            feats = self.compensation(np.asarray(feats, dtype=np.float32).reshape(-1),
                                      self._commanded.since(self._episode_start_ns))
        return PerceivedCycle(stamp, cycle, self.episode, feats, extra)


def _name(t: Any) -> str:
    return t["name"] if isinstance(t, Mapping) else t.name


def _field(t: Any, key: str) -> Any:
    return t[key] if isinstance(t, Mapping) else getattr(t, key)
