"""Callbacks as classes: periodic evaluation (with the best model kept) and periodic checkpoints.

A callback is anything called as ``callback(algo, info) -> bool | None`` after each learn iteration
(returning False stops training); these classes also get ``on_training_start(algo)``. Pass one,
or a list, to ``algo.learn(n, callback=...)``: the SB3 ``EvalCallback`` / ``CheckpointCallback``
equivalents, counted in env steps (SB3 counts calls, which is env steps / n_envs).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tinker_core.errors import ConfigError

log = logging.getLogger("tinker.train")


class Callback:
    """Base: ``on_training_start`` once, then ``on_step`` after each iteration (False stops)."""

    def on_training_start(self, algo: Any) -> None:
        pass

    def on_step(self, algo: Any, info: dict) -> bool:
        return True

    def __call__(self, algo: Any, info: dict) -> bool:
        return self.on_step(algo, info) is not False


class CallbackList(Callback):
    """Runs callbacks in order; training stops if any returns False."""

    def __init__(self, callbacks: Sequence[Callable[[Any, dict], Any]]):
        self.callbacks = list(callbacks)

    def on_training_start(self, algo: Any) -> None:
        for c in self.callbacks:
            if hasattr(c, "on_training_start"):
                c.on_training_start(algo)

    def on_step(self, algo: Any, info: dict) -> bool:
        go = True
        for c in self.callbacks:
            go = (c(algo, info) is not False) and go
        return go


class _Every(Callback):
    def __init__(self, every: int, key: str):
        if not isinstance(every, int) or every < 1:
            raise ConfigError(f"{type(self).__name__}.{key}: expected env steps >= 1, got {every!r}")
        self.every = every
        self._next = every

    def on_training_start(self, algo: Any) -> None:
        self._next = (algo.num_timesteps // self.every + 1) * self.every

    def _due(self, algo: Any) -> bool:
        if algo.num_timesteps < self._next:
            return False
        self._next = (algo.num_timesteps // self.every + 1) * self.every
        return True


class CheckpointCallback(_Every):
    """Save a checkpoint every ``save_freq`` env steps to ``save_path/{name_prefix}_{steps}``."""

    def __init__(self, save_freq: int, save_path: str | Path, name_prefix: str = "step", include_replay: bool = True):
        super().__init__(save_freq, "save_freq")
        self.save_path, self.name_prefix, self.include_replay = Path(save_path), name_prefix, include_replay
        self.saved: list[Path] = []

    def on_step(self, algo: Any, info: dict) -> bool:
        if self._due(algo):
            p = self.save_path / f"{self.name_prefix}_{algo.num_timesteps}"
            if self.include_replay:
                algo.save_checked(p)
            else:
                algo.save(p, include_replay=False)
            self.saved.append(p)
        return True


@dataclass
class Evaluation:
    step: int
    mean_return: float
    std_return: float
    success_rate: float | None


class EvalCallback(_Every):
    """Every ``eval_freq`` env steps, run ``n_eval_episodes`` of the deterministic policy on a separate
    env (an id, an `EnvConfig`, or a gymnasium env); log ``eval/mean_return``; keep the best model in
    ``best_model_save_path``; append each evaluation to ``log_path`` (JSON lines); stop once the mean
    return reaches ``stop_at_return``."""

    def __init__(self, eval_env: Any, eval_freq: int = 10_000, n_eval_episodes: int = 5, deterministic: bool = True,
                 best_model_save_path: str | Path | None = None, log_path: str | Path | None = None,
                 seed: int = 10_000, stop_at_return: float | None = None):
        super().__init__(eval_freq, "eval_freq")
        if n_eval_episodes < 1:
            raise ConfigError(f"EvalCallback.n_eval_episodes: expected >= 1, got {n_eval_episodes}")
        if isinstance(eval_env, str):
            from tinker_core.envs import EnvConfig

            eval_env = EnvConfig(eval_env)
        self._env_source = eval_env
        self.env: Any = None
        self.n_eval_episodes, self.deterministic, self.seed = n_eval_episodes, deterministic, seed
        self.best_model_save_path = None if best_model_save_path is None else Path(best_model_save_path)
        self.log_path = None if log_path is None else Path(log_path)
        self.stop_at_return = stop_at_return
        self.evaluations: list[Evaluation] = []
        self.best_mean_return = -np.inf

    def _env(self) -> Any:
        if self.env is None:
            src = self._env_source
            self.env = src.make() if hasattr(src, "make") else src
        return self.env

    def evaluate(self, algo: Any) -> Evaluation:
        from tinker_core.evaluate import evaluate

        res = evaluate(self._env(), lambda o: algo.predict(o, deterministic=self.deterministic),
                       self.n_eval_episodes, seed=self.seed)
        rets = [r["return"] for r in res.per_episode]
        any_success = any("is_success" in r for r in res.per_episode) or res.successes > 0
        return Evaluation(algo.num_timesteps, float(np.mean(rets)), float(np.std(rets)),
                          res.success_rate if any_success else None)

    def on_step(self, algo: Any, info: dict) -> bool:
        if not self._due(algo):
            return True
        ev = self.evaluate(algo)
        self.evaluations.append(ev)
        lg = getattr(algo, "_logger", None)
        if lg is not None:
            vals = {"eval/mean_return": ev.mean_return, "eval/std_return": ev.std_return}
            if ev.success_rate is not None:
                vals["eval/success_rate"] = ev.success_rate
            lg.scalars(algo.num_timesteps, vals)
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "a") as f:
                f.write(json.dumps(ev.__dict__) + "\n")
        if ev.mean_return > self.best_mean_return:
            self.best_mean_return = ev.mean_return
            if self.best_model_save_path is not None:
                algo.save(self.best_model_save_path / "best_model", include_replay=False)
        log.info("eval at %d steps: return %.2f +- %.2f over %d episodes", ev.step, ev.mean_return, ev.std_return,
                 self.n_eval_episodes)
        return self.stop_at_return is None or ev.mean_return < self.stop_at_return


__all__ = ["Callback", "CallbackList", "CheckpointCallback", "EvalCallback", "Evaluation"]
