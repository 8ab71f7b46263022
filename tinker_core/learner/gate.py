"""The evaluation gate: a candidate policy runs in simulation before it may be published.

This is the only path from the learner to a robot: the learner publishes bundles, never commands,
and only bundles whose policy passed this gate. On the robot the SafetyWrapper still filters every
command the policy node sends, so a published policy cannot bypass it either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tinker_core.evaluate import evaluate


@dataclass
class GateResult:
    """What the gate measured and whether the candidate passed."""

    passed: bool
    success_rate: float
    mean_return: float
    episodes: int
    reason: str
    estops: int = 0
    """e-stops the gate env's SafetyWrapper latched during the candidate's episodes"""

    def to_dict(self) -> dict:
        return {"passed": self.passed, "success_rate": self.success_rate, "mean_return": self.mean_return,
                "episodes": self.episodes, "estops": self.estops, "reason": self.reason}


def run_gate(algo: Any, env_factory: Callable[[], Any], episodes: int, min_success: float,
             min_return: float | None, seed: int, max_estops: int = 0) -> GateResult:
    """Run ``episodes`` deterministic episodes of ``algo`` in a fresh env from ``env_factory`` (built with
    the SafetyWrapper by the CLI, as on the robot); it passes with no more than ``max_estops`` e-stops and
    the least success rate and return asked for."""
    env = env_factory()
    try:
        res = evaluate(env, lambda obs: np.asarray(algo.predict(obs, deterministic=True)), episodes, seed=seed)
    finally:
        env.close()
    why = []
    if res.success_rate < min_success:
        why.append(f"success rate {res.success_rate:.2f} < {min_success:.2f}")
    if min_return is not None and res.mean_return < min_return:
        why.append(f"mean return {res.mean_return:.2f} < {min_return:.2f}")
    if res.safety_estops > max_estops:
        why.append(f"{res.safety_estops} safety e-stop(s) > {max_estops}")
    return GateResult(passed=not why, success_rate=res.success_rate, mean_return=res.mean_return,
                      episodes=res.episodes, reason="; ".join(why) or "passed", estops=res.safety_estops)
