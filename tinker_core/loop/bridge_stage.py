"""`BridgeStage`: the experience bridge's stage of the loop, on every runtime (no ROS).

Each edge into the bridge (the state's outcome, features, raw action, joint target, safe command, a person's
cycles, the e-stop state) becomes one call of `tinker_core.loop.bridge.ExperienceBridge`, which joins, labels and
sends. Where a success sensor rewards, the first state of an episode it sees done goes out as ``episode_end``: the
episode ends there on the robot too (the simulated robot resets on it), not only for the learner. Without it the
robot would go on acting in a task already done, in states its policy never met in training (the camera sorter,
fine-tuned from its sensor, latched all its e-stops there: 36 in 15 episodes measured). ``now``: the host's
monotonic clock in s (the label window's).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from tinker_core.errors import TinkerError
from tinker_core.loop.bridge import ExperienceBridge
from tinker_core.loop.edges import Action, EpisodeEnd, EstopState, Features, Intervened, SafeCommand, TaskReport
from tinker_core.loop.stage import LoopStage


class BridgeStage(LoopStage):
    name = "experience_bridge"

    def __init__(self, bridge: ExperienceBridge, now: Callable[[], float] = time.monotonic):
        super().__init__()
        self.bridge, self.now = bridge, now
        self.estopped = False
        bridge.on_success = lambda stamp, episode: self.emit("episode_end", EpisodeEnd(int(stamp), str(episode)))

    def inputs(self) -> dict[str, Callable[[Any], Any]]:
        return {"task": self.on_task, "features": self.on_features, "raw_action": self.on_action,
                "joint_target": self.on_target, "command": self.on_command, "intervened": self.on_intervened,
                "estop_state": self.on_estop}

    def on_task(self, t: TaskReport) -> None:
        self.bridge.task(t.stamp_ns, t.cycle, int(t.episode), t.reward, t.success, t.done, self.now())

    def on_features(self, f: Features) -> None:
        self.bridge.features(f.stamp_ns, f.features, self.now())

    def on_action(self, a: Action) -> None:
        self.bridge.action(a.stamp_ns, a.values, str(a.version))

    def on_target(self, a: Action) -> None:
        self.bridge.target(a.stamp_ns, a.values)

    def on_command(self, c: SafeCommand) -> None:
        self.bridge.command(c.stamp_ns, c.q, c.status, c.intervention)

    def on_intervened(self, i: Intervened) -> None:
        try:
            self.bridge.intervened(i.stamp_ns, i.values)
        except TinkerError as e:  # no action chain known yet, or a target it cannot invert: no transition
            self.refuse(e)

    def on_estop(self, e: EstopState) -> None:
        self.estopped = e.estopped

    def refuse(self, err: Exception, port: str = "") -> None:
        super().refuse(err, port)
        self.bridge.last_error = str(err)
