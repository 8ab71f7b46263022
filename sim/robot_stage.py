"""`SimRobotStage`: the simulated robot's stage of the loop, on every runtime (no ROS).

Its cycle is a tick of the host's clock (a timer in the node, one call per cycle in one process): the state goes
out as ``task`` (its outcome and terms, first: perception has this state's terms when its state arrives),
``joint_states`` and, rendered in line, ``image``. The safe ``command`` and the policy's ``tool_command`` (the
suction) come back as edges into `tinker_sim.robot_loop.SimRobotLoop`, which executes them, holds on stale and
foreign commands and keeps the episodes; ``episode_end`` (the success sensor saw the task done) ends one.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from tinker_core.loop.edges import Action, EpisodeEnd, Frame, Goal, SafeCommand, joint_vector
from tinker_core.loop.graph import ROBOT
from tinker_core.loop.stage import LoopStage
from tinker_sim.robot_loop import SimRobotLoop, SimState


class SimRobotStage(LoopStage):
    """``loop``: the arm and its bookkeeping; ``answered(command, sent_ns)``: the host's note of a safe command
    that answered a state published at ``sent_ns`` (wall ns), e.g. the loop's end-to-end span."""

    name = ROBOT

    def __init__(self, loop: SimRobotLoop, answered: Callable[[SafeCommand, int], None] | None = None,
                 wall_ns: Callable[[], int] = time.time_ns):
        super().__init__()
        self.loop, self.answered, self.wall_ns = loop, answered, wall_ns

    def inputs(self) -> dict[str, Callable[[Any], Any]]:
        return {"command": self.on_command, "tool_command": self.on_tool_command, "episode_end": self.on_episode_end,
                "goal": self.on_goal}

    def tick(self, t0: int) -> tuple[SimState, bool]:
        """One cycle at ``t0`` (monotonic ns): the state out; (the state, whether the cycle began late). The host
        calls `end_cycle` once the state is out (a node at once; one process once the cycle's answers are in)."""
        loop = self.loop
        s, missed = loop.step(t0)
        items = [("task", loop.report(s)), ("joint_states", loop.robot_state(s))]
        if s.image is not None:
            items.append(("image", Frame(s.stamp, s.image, s.cycle)))
        # e2e starts just before the first publish of the state: waking the subscribers is the loop's latency
        self.emit_batch(items, before=lambda: loop.sent(s.stamp, self.wall_ns()))
        return s, missed

    def end_cycle(self, s: SimState, t0: int) -> None:
        """After the state went out: the camera's frame, success and episode bookkeeping, a reset when it ended."""
        self.loop.end_cycle(s, t0)

    def on_command(self, c: SafeCommand) -> None:
        q = joint_vector(c.q, self.loop.dof, "sim_robot.command", "finite joint positions")
        sent = self.loop.command(q, {"stamp_ns": str(c.stamp_ns), "status": c.status})
        if sent is not None and self.answered is not None:
            self.answered(c, sent)
        self.loop.take_frame()  # the cycle's loop is done: the camera renders in the quiet window

    def on_tool_command(self, a: Action) -> None:
        self.loop.tool_command(a.values, {"stamp_ns": str(a.stamp_ns)})

    def on_goal(self, g: Goal) -> None:
        self.loop.set_goal(g.point)

    def on_episode_end(self, e: EpisodeEnd) -> None:
        self.loop.end_episode(e.episode, e.stamp_ns)

    def refuse(self, err: Exception, port: str = "") -> None:
        super().refuse(err, port)
        if port == "goal":  # a goal's wire check (another frame): refused as a goal, not a command
            self.loop.refuse_goal(err)
        else:
            self.loop.reject(err)
