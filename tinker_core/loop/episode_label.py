"""`EpisodeLabels`: a person's success / failure label on an episode, put on its last transition.

A real robot often cannot tell success by itself; a person watching it can (HIL-SERL asks them). The label
applies to the episode that ended within ``window_s`` (a person labels what they just saw end), else to the
running one. The labelled episode's last transition then says so, with ``info["human_label"]`` "success" or
"failure". A success is the task done: ``terminated=True`` with the reward ``success_reward``. A failure is not an
absorbing state (the arm is still somewhere, the task still open): the transition stays bootstrapped
(``truncated=True``) and ``failure_reward`` (<= 0, a penalty) is added to its own reward. Made terminal with a
fixed reward, a failure would look better to the learner than the negative per-step rewards of failing on.
A running episode's label ends it for the learner: its later transitions are dropped (counted in
``after_label``), as the transitions after a robot's own episode end are.

So that the learner never gets the same transition twice, each episode's newest transition is held back here:
until the episode's next transition comes (then it was not the last), until ``window_s`` after its episode
ended (its ``terminated``/``truncated``, or the next episode's first transition), or until a label takes it.
Without any label the transitions are the ones that came in, in their order per episode, each held back by at
most one transition or the window. ``window_s`` 0 turns labels off: every transition goes out at once. ROS-free: the experience bridge calls it; the clock is the caller's (s).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Mapping

from tinker_core.errors import ConfigError
from tinker_core.transition import Transition


@dataclass
class Labelled:
    """What a label did: the episode it applied to (None: none could take it) and the message for the person."""

    episode: int | None
    message: str


@dataclass
class LabelRecord:
    """A label as a recording keeps it (`tinker.recording`, ``/tinker/episode_label``): enough to give a re-imported
    run the labelled transitions the learner got live (`apply_labels`)."""

    episode: int
    """the robot's episode counter of the labelled episode"""
    cycle: int
    """the cycle its labelled (last) transition starts from (``info["cycle"]``)"""
    success: bool
    reward: float
    """the reward that transition got (``success_reward``, or its own plus ``failure_reward``, at the time)"""
    labelled_ns: int = 0
    """when the person labelled it (wall clock, ns)"""

    @classmethod
    def of(cls, episode: int, t: Transition, labelled_ns: int = 0) -> "LabelRecord":
        """The record of a transition `EpisodeLabels.label` just labelled."""
        info = t.info or {}
        return cls(int(episode), int(info.get("cycle", -1)), info.get("human_label") == "success", float(t.reward),
                   int(labelled_ns))


def labelled(t: Transition, success: bool, reward: float) -> Transition:
    """``t`` as a label leaves it: terminated on success, truncated (still bootstrapped) on failure, with ``reward``
    and ``info["human_label"]``."""
    return replace(t, terminated=success, truncated=not success, reward=float(reward),
                   info={**(t.info or {}), "human_label": "success" if success else "failure"})


def apply_labels(ts: Iterable[Transition], labels: Iterable[LabelRecord],
                 episode_of: Mapping[int, int]) -> list[Transition]:
    """What `EpisodeLabels` made of ``ts`` live, from the labels a recording kept: each labelled transition
    (matched by its ``info["cycle"]``) with the label's reward, ending (terminated on success, truncated on
    failure) and ``info["human_label"]``, the later
    transitions of its episode dropped. ``episode_of``: cycle -> episode, from the cycle records."""
    by_cycle = {int(lb.cycle): lb for lb in labels}
    cut = {int(lb.episode): int(lb.cycle) for lb in by_cycle.values()}
    out = []
    for t in ts:
        cycle = int((t.info or {}).get("cycle", -1))
        ep = episode_of.get(cycle)
        if ep in cut and cycle > cut[ep]:
            continue  # after the label: the live bridge dropped it (after_label)
        lb = by_cycle.get(cycle)
        out.append(t if lb is None else labelled(t, lb.success, lb.reward))
    return out


class EpisodeLabels:
    def __init__(self, window_s: float = 3.0, success_reward: float = 1.0, failure_reward: float = -1.0):
        self.configure(window_s, success_reward, failure_reward)
        self._held: dict[int, Transition] = {}
        self._ended: dict[int, float] = {}  # episode -> when it ended (caller's clock, s)
        self._running: int | None = None
        self._labelled: dict[int, str] = {}
        self.after_label = 0
        """transitions dropped because their episode was labelled before they came"""
        self.after_label_interventions = 0
        """of those, a person's (``info["intervention"]``)"""
        self.labels = 0

    def configure(self, window_s: float, success_reward: float, failure_reward: float) -> None:
        if failure_reward > 0:
            raise ConfigError(f"label_failure_reward: expected <= 0 (a penalty added to the labelled transition's own "
                              f"reward), got {failure_reward}")
        self.window_s, self.success_reward, self.failure_reward = float(window_s), float(success_reward), float(failure_reward)

    def add(self, t: Transition, episode: int, now: float) -> list[Transition]:
        """A transition of ``episode``; returns the transitions now released for the learner."""
        episode = int(episode)
        if self.window_s <= 0:  # labels off: nothing waits
            return self.flush() + [t]
        if episode in self._labelled:
            self.after_label += 1
            self.after_label_interventions += bool((t.info or {}).get("intervention"))
            return self.release(now)
        if episode != self._running:
            if self._running is not None and self._running not in self._ended:
                self._ended[self._running] = now  # the next episode started: the previous one has ended
            self._running = episode
        out = [self._held.pop(episode)] if episode in self._held else []
        self._ended.pop(episode, None)  # (it went on after a reported end: its end is this transition's, if any)
        self._held[episode] = t
        if t.terminated or t.truncated:
            self._ended[episode] = now
        return out + self.release(now)

    def release(self, now: float) -> list[Transition]:
        """The held transitions whose episode ended more than ``window_s`` ago (call it now and then)."""
        out = []
        for ep, ended in list(self._ended.items()):
            if now - ended >= self.window_s:
                del self._ended[ep]
                if ep in self._held:
                    out.append(self._held.pop(ep))
        return out

    def label(self, success: bool, now: float) -> tuple[Labelled, list[Transition]]:
        """Label the episode that ended within the window, else the running one; returns what was done and the
        transitions released (the labelled one first)."""
        out = self.release(now)
        if self.window_s <= 0:
            return Labelled(None, "labels are off (label_window 0)"), out
        ended = [ep for ep in self._ended if ep in self._held]
        if ended:
            ep = max(ended, key=lambda e: self._ended[e])
        elif self._running is not None and self._running in self._held:
            ep = self._running
        else:
            why = ("no episode to label: none ended within the last "
                   f"{self.window_s:g} s (label_window) and the running one has no transition yet")
            if self._running is not None and self._running in self._labelled:
                why = f"episode {self._running} is labelled already ({self._labelled[self._running]})"
            return Labelled(None, why), out
        word = "success" if success else "failure"
        t = self._held.pop(ep)
        self._ended.pop(ep, None)
        done = labelled(t, success, self.success_reward if success else float(t.reward) + self.failure_reward)
        self._labelled[ep] = word
        while len(self._labelled) > 64:  # episodes only go forward: the oldest labels are no longer asked about
            self._labelled.pop(next(iter(self._labelled)))
        self.labels += 1
        ending = "terminal" if success else "bootstrapped, penalised"
        return Labelled(ep, f"episode {ep} labelled {word} (reward {done.reward:g}, its last transition "
                            f"{ending})"), [done] + out

    def flush(self) -> list[Transition]:
        """Every held transition (at shutdown)."""
        out = list(self._held.values())
        self._held.clear()
        self._ended.clear()
        return out


__all__ = ["EpisodeLabels", "LabelRecord", "Labelled", "apply_labels", "labelled"]
