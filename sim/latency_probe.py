"""`CommandLatencyProbe`: measure a simulated arm's command latency from its commands and joint states.

A gymnasium wrapper around an `ArmEnv` (under any other wrappers) that feeds `tinker_core.loop.LatencyEstimator`
what a robot's driver reports: the joint target sent each step (after the command filter, before the latency:
``commanded_target``) and the measured joint positions. It reads nothing the robot would not have; the simulator's
``action_latency_steps`` is what it must find, not an input.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from tinker_core.errors import ConfigError
from tinker_core.loop.latency_estimate import LatencyEstimate, LatencyEstimator


class CommandLatencyProbe(gym.Wrapper):
    """``episodes``: how many episodes from the first feed the estimate (None: all); ``until_known``: feeding also
    stops at the first episode end where the estimate stands (what a calibration needs, no more). `estimate` reads
    it; ``episodes_fed`` says how many went in."""

    def __init__(self, env: gym.Env, episodes: int | None = None, until_known: bool = False):
        super().__init__(env)
        arm = env.unwrapped
        if not hasattr(arm, "commanded_target") or not hasattr(arm, "joint_state"):
            raise ConfigError(f"CommandLatencyProbe: {type(arm).__name__} reports no commanded joint target "
                              f"(commanded_target) and joint state; it needs an arm env (tinker_sim.arm_env.ArmEnv)")
        if episodes is not None and episodes < 1:
            raise ConfigError(f"CommandLatencyProbe.episodes: expected >= 1 or None, got {episodes}")
        self.estimator = LatencyEstimator(len(arm.joint_state[0]), where="CommandLatencyProbe")
        self.episodes, self.until_known = episodes, until_known
        self.episodes_fed, self.feeding = 0, True

    def reset(self, **kwargs: Any):
        out = self.env.reset(**kwargs)
        if self.feeding and self.episodes_fed and (
                self.episodes_fed == self.episodes or (self.until_known and self.estimate().periods is not None)):
            self.feeding = False
        if self.feeding:
            self.episodes_fed += 1
            q0 = self.env.unwrapped.joint_state[0]
            self.estimator.break_sequence(rest=q0)  # the reset moved the arm, and holds it there
            self.estimator.state(q0)
        return out

    def step(self, action: Any):
        out = self.env.step(action)
        if self.feeding:
            arm = self.env.unwrapped
            self.estimator.command(arm.commanded_target)  # this step's command answered the state before it
            self.estimator.state(arm.joint_state[0])
        return out

    def estimate(self) -> LatencyEstimate:
        return self.estimator.estimate()
