"""Policy evaluation: success rate with a Wilson confidence interval, time to success, interventions.

It runs the framework's own `Pipeline` (env -> perception -> policy -> env, each edge spec-checked and measured),
so the CLI can compose any env (sim, with a fixed dynamics file and the SafetyWrapper as command filter) with any
policy (an ONNX bundle's modules, a torch checkpoint, a scripted controller as a function).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from tinker_core.module import FunctionModule, ModuleBase


def objects_summary(got: int, total: int) -> dict[str, Any]:
    """A sorting evaluation's objects: ``got`` of ``total`` in their right bin, the rate and its 95% Wilson interval
    (objects counted as independent trials), under the keys every report uses (``objects_sorted_rate`` ...)."""
    lo, hi = wilson_interval(got, total)
    return {"objects_sorted": int(got), "objects_total": int(total),
            "objects_sorted_rate": got / total if total else 0.0, "objects_ci_low": lo, "objects_ci_high": hi}


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (well-behaved at 0% and 100%)."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class EvalResult:
    episodes: int
    successes: int
    success_rate: float
    ci_low: float
    ci_high: float
    mean_time_to_success_s: float | None
    mean_return: float
    safety_interventions: int
    per_episode: list[dict] = field(default_factory=list)
    safety_estops: int = 0
    """e-stops the SafetyWrapper latched (an env without one reports 0)"""
    safety_violations: int = 0
    """steps in which the simulated robot reached an unsafe state (beyond a URDF limit, touching the ground
    or an obstacle), counted from the physics by the env (``info['safety_violations']``)"""
    objects_sorted: int | None = None
    """sorting tasks (the env's info has ``sorted`` and ``num_objects``): objects in the right bin at episode end"""
    objects_total: int | None = None
    objects_sorted_rate: float | None = None
    """objects in the right bin / objects, over all episodes"""
    objects_ci_low: float | None = None
    """95% Wilson interval of ``objects_sorted_rate`` (objects counted as independent trials)"""
    objects_ci_high: float | None = None
    flow: dict = field(default_factory=dict)
    """the pipeline's flow monitor per edge (`tinker_core.monitor.FlowMonitor.snapshot`: messages, bytes, latency)"""

    def to_dict(self, with_episodes: bool = False) -> dict:
        d = asdict(self)
        if not with_episodes:
            d.pop("per_episode")
        if self.objects_total is None:
            for k in ("objects_sorted", "objects_total", "objects_sorted_rate", "objects_ci_low", "objects_ci_high"):
                d.pop(k)
        return d

    def format(self) -> str:
        tts = "n/a" if self.mean_time_to_success_s is None else f"{self.mean_time_to_success_s:.2f} s"
        return (f"success rate {self.success_rate * 100:.1f}% ({self.successes}/{self.episodes}), "
                f"95% CI [{self.ci_low * 100:.1f}%, {self.ci_high * 100:.1f}%]; "
                f"mean time to success {tts}; mean return {self.mean_return:.2f}; "
                f"safety interventions {self.safety_interventions}, e-stops {self.safety_estops}, "
                f"unsafe states reached {self.safety_violations}"
                + ("" if self.objects_total is None else
                   f"\nobjects sorted {self.objects_sorted_rate * 100:.1f}% ({self.objects_sorted}/{self.objects_total})"
                   f", 95% CI [{self.objects_ci_low * 100:.1f}%, {self.objects_ci_high * 100:.1f}%]"))


def evaluate(env: Any, policy: Callable[[Any], np.ndarray] | ModuleBase, episodes: int, seed: int = 0,
             control_period: float = 0.05, on_episode: Callable[[int, dict], None] | None = None,
             perception: ModuleBase | None = None) -> EvalResult:
    """Run ``episodes`` episodes (episode k reset with ``seed + k``) through a `Pipeline`: ``env`` (a gymnasium env
    or an env module) -> ``perception`` (None: the observation as it is) -> ``policy`` -> ``env``, every edge
    spec-checked at connect and on every value, and measured by the pipeline's flow monitor (``EvalResult.flow``).
    A plain function as ``policy`` runs as a `FunctionModule` with the specs of the edges around it.

    An episode succeeds if ``info['is_success']`` was ever true. For a sorting task (``info`` has ``sorted`` and
    ``num_objects``) the objects in the right bin at episode end are counted too."""
    from tinker_core.env_adapter import EnvModule
    from tinker_core.pipeline import Pipeline

    env_m = env if isinstance(env, ModuleBase) else EnvModule(env)
    into_policy = perception.output_spec if perception is not None else env_m.output_spec
    if not isinstance(policy, ModuleBase):
        policy = FunctionModule(policy, into_policy, env_m.input_spec, "policy")
    pipe = Pipeline(validate=True, seed=seed, seed_each_episode=True).connect(env_m, perception, policy)
    rows = _EpisodeRows(pipe, control_period, on_episode)
    pipe.callbacks.append(rows)
    for m in pipe.modules.values():  # the pipeline resets its modules after each episode; this is the first
        m.reset()
    if episodes > 0:
        pipe.run(episodes=episodes)
    return _result(rows.rows, {k: v for k, v in pipe.monitor.snapshot().items() if v["messages"]})


class _EpisodeRows:
    """One row per episode from the pipeline's transitions: return, steps, time to success, the SafetyWrapper's
    counters (``info['safety_*']``, cumulative over the env's life) and a sorting task's objects."""

    def __init__(self, pipe: Any, control_period: float, on_episode: Callable[[int, dict], None] | None):
        self.pipe, self.period, self.on_episode = pipe, control_period, on_episode
        self.rows: list[dict] = []
        self.steps = 0

    def __call__(self, t: Any, metrics: Any) -> None:
        info = t.info
        if self.steps == 0:
            self.ret, self.t_success, self.interventions, self.violations = 0.0, None, 0, 0
            self.estops_before = self.estops = int(self.pipe.reset_info.get("safety_estops", 0))
        self.ret += float(t.reward)
        self.steps += 1
        self.interventions = int(info.get("safety_interventions", self.interventions))
        self.estops = int(info.get("safety_estops", self.estops))
        self.violations = int(info.get("safety_violations", 0))
        if self.t_success is None and info.get("is_success", False):
            self.t_success = self.steps * self.period
        if not (t.terminated or t.truncated):
            return
        ep = len(self.rows)
        row = {"episode": ep, "success": self.t_success is not None, "return": self.ret, "steps": self.steps,
               "time_to_success_s": self.t_success, "safety_interventions": self.interventions,
               "safety_estops": self.estops - self.estops_before, "safety_violations": self.violations}
        if "sorted" in info and "num_objects" in info:
            row.update(objects_sorted=int(info["sorted"]), num_objects=int(info["num_objects"]))
        self.rows.append(row)
        self.steps = 0
        if self.on_episode:
            self.on_episode(ep, row)


def _result(rows: list[dict], flow: dict) -> EvalResult:
    n = len(rows)
    k = sum(r["success"] for r in rows)
    lo, hi = wilson_interval(k, n)
    tts = [r["time_to_success_s"] for r in rows if r["time_to_success_s"] is not None]
    objects: dict[str, Any] = {}
    if rows and all("num_objects" in r for r in rows):
        objects = objects_summary(sum(r["objects_sorted"] for r in rows), sum(r["num_objects"] for r in rows))
    return EvalResult(
        episodes=n, successes=k, success_rate=k / n if n else 0.0, ci_low=lo, ci_high=hi,
        mean_time_to_success_s=float(np.mean(tts)) if tts else None,
        mean_return=float(np.mean([r["return"] for r in rows])) if rows else 0.0,
        safety_interventions=sum(r["safety_interventions"] for r in rows), per_episode=rows,
        safety_estops=sum(r["safety_estops"] for r in rows),
        safety_violations=sum(r["safety_violations"] for r in rows), flow=flow, **objects)
