"""``tinker eval``'s figure: what it can measure in process, drawn by `tinker_core.report_plots`.

`StepTimer` times each step's policy call and the SafetyWrapper's filtering of that step's command (the
physics step is not counted), and `SafetyMarks` samples the wrapper's counters at each episode end; with the
per-episode success and return these fill the same figure the demo's report draws.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from tinker_core.module import FunctionModule, ModuleBase
from tinker_core.report_data import (EpisodeSeries, InterventionSeries, LatencyHistogram, ReportFigureData,
                                     safety_counts)


class StepTimer:
    """Wraps perception, the policy and the command filter; ``ms`` gets one value per step: perception + policy +
    SafetyWrapper time."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self._policy_ns = 0
        self.with_filter = False

    def policy(self, fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        timer = self

        class Timed:
            """The policy, timed (``reset`` passed through where the policy has one)."""

            def __call__(self, obs: Any) -> Any:
                return timer._timed(fn, obs, ends_step=True)

            def __getattr__(self, name: str) -> Any:
                return getattr(fn, name)

        return Timed()

    def module(self, m: ModuleBase, name: str, ends_step: bool = True) -> FunctionModule:
        """Module ``m`` timed, as a module with ``m``'s specs (its ``reset`` passed through); the step's time is
        complete after the module that ``ends_step`` (the policy) unless the SafetyWrapper's time follows."""
        def timed(x: Any) -> Any:
            return self._timed(m, x, ends_step)

        timed.reset = m.reset  # type: ignore[attr-defined]
        return FunctionModule(timed, m.input_spec, m.output_spec, name)

    def _timed(self, fn: Callable[[Any], Any], x: Any, ends_step: bool) -> Any:
        t = time.perf_counter_ns()
        out = fn(x)
        self._policy_ns += time.perf_counter_ns() - t
        if ends_step and not self.with_filter:
            self.ms.append(self._policy_ns / 1e6)
            self._policy_ns = 0
        return out

    def filter(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The SafetyWrapper as the env calls it (``command_filter``); its time is added to the step's policy time."""
        self.with_filter = True

        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter_ns()
            out = fn(*args, **kwargs)
            self.ms.append((self._policy_ns + time.perf_counter_ns() - t) / 1e6)
            self._policy_ns = 0
            return out

        return timed


def instrument(env: Any, policy: Any, perception: Any = None) -> tuple[Any, Any, StepTimer, Any]:
    """Time ``perception`` (a module, or None), ``policy`` (a module or a function) and the env's SafetyWrapper (if
    it has one) as one step; returns (timed perception or None, timed policy, timer, the wrapper or None). A module
    stays a module with its own specs, so the evaluation's pipeline checks its edges."""
    timer = StepTimer()
    u = env.unwrapped
    try:  # the SafetyWrapper's env wrapper, under whatever wraps it (gymnasium forwards no attributes)
        guard = env.get_wrapper_attr("guard") if hasattr(env, "get_wrapper_attr") else getattr(env, "guard", None)
    except AttributeError:
        guard = None
    if getattr(u, "command_filter", None) is not None:
        u.command_filter = timer.filter(u.command_filter)
    return (None if perception is None else timer.module(perception, "perception", ends_step=False),
            timer.module(policy, "policy") if isinstance(policy, ModuleBase) else timer.policy(policy), timer, guard)


class SafetyMarks:
    """The SafetyWrapper's counters at each episode end, as `InterventionSeries` intervals (one per episode)."""

    def __init__(self, guard: Any) -> None:
        self.guard = guard
        self.series = InterventionSeries() if guard is not None else None

    def episode_end(self, episode: int) -> None:
        if self.series is not None:
            self.series.mark(episode, self.guard.counters)

    def totals_now(self) -> dict[str, int] | None:
        """The wrapper's counters now, by kind (None without one): what the series' intervals add up to."""
        return None if self.guard is None else safety_counts(self.guard.counters)


def eval_figure_data(rows: list[dict], timer: StepTimer, marks: SafetyMarks, *, env_id: str, name: str,
                     version: Any, dynamics: str) -> ReportFigureData:
    episodes = EpisodeSeries()
    for r in rows:
        episodes.add(r["success"], version, ret=float(r["return"]), episode=r["episode"],
                     objects=r["objects_sorted"] / r["num_objects"] if r.get("num_objects") else None)
    k = sum(r["success"] for r in rows)
    measures = ("per step: policy inference + SafetyWrapper filtering, in process (ms; physics not counted)"
                if timer.with_filter else "per step: policy inference, in process (ms; no SafetyWrapper)")
    return ReportFigureData(
        title=f"tinker eval: {env_id}, policy {name} (v{version}), dynamics {dynamics}: success {k}/{len(rows)}",
        episodes=episodes, latency=LatencyHistogram.of(timer.ms, measures), interventions=marks.series,
        interventions_label="episode (commands the SafetyWrapper changed or held in it)")


def write_figure(path: str, rows: list[dict], timer: StepTimer, marks: SafetyMarks, **words: Any) -> dict:
    """Draw the figure to ``path``; returns what eval adds to its result: ``plot``, the step time's p50/p99 (ms)
    and ``figure``, the counts drawn beside what they were drawn from (steps, the wrapper's counters)."""
    from tinker_core.report_plots import draw_report

    data = eval_figure_data(rows, timer, marks, **words)
    drawn = draw_report(data, path)
    return {"plot": drawn["path"], "step_ms_p50": data.latency.percentile(50),
            "step_ms_p99": data.latency.percentile(99),
            "figure": {"steps_timed": data.latency.total, "steps": sum(r["steps"] for r in rows),
                       "episodes_drawn": len(drawn["success"].get("x", [])),
                       "interventions_drawn": {k: sum(v) for k, v in drawn["interventions"].items()
                                               if k not in ("x", "labels")},
                       "safety_counters": marks.totals_now()}}
