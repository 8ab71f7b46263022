"""Run logging: TensorBoard scalars, a JSONL metrics file, a tqdm progress bar and the PNG learning curve."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tinker_core.module import _json_default

log = logging.getLogger("tinker.train")


def plot_learning_curves(curves: dict[str, Sequence[tuple[float, float]]], path: str | Path,
                         title: str = "learning curve", threshold: float | None = None, window: int = 10) -> Path:
    """PNG of episode return over env steps, one line per label (moving average over ``window`` episodes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    for label, pts in curves.items():
        if not pts:
            continue
        steps, rets = np.asarray(pts, dtype=np.float64).T
        k = min(window, len(rets))
        smooth = np.convolve(rets, np.ones(k) / k, mode="valid")
        ax.plot(steps[k - 1:], smooth, label=label)
    if threshold is not None:
        ax.axhline(threshold, color="gray", ls="--", lw=1, label=f"threshold {threshold:g}")
    ax.set_xlabel("environment steps")
    ax.set_ylabel(f"episode return (mean of {window})")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


class TrainingLogger:
    """Everything a run reports. ``out_dir=None`` keeps it in memory (tests, benchmarks)."""

    def __init__(self, out_dir: str | Path | None, total: int, start: int = 0, progress: bool = True,
                 tensorboard: bool = True, title: str = "training"):
        self.out_dir = None if out_dir is None else Path(out_dir)
        self.title = title
        self.curve: list[tuple[int, float]] = []
        self.successes: list[bool] = []
        self._t0, self._s0 = time.perf_counter(), start
        self._tb = None
        self._jsonl = None
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self._jsonl = open(self.out_dir / "metrics.jsonl", "a")
            if tensorboard:
                try:
                    from torch.utils.tensorboard import SummaryWriter

                    self._tb = SummaryWriter(str(self.out_dir / "tb"))
                except ImportError:  # tensorboard is in the train extra; without it, log to JSONL only
                    log.warning("tensorboard is not installed: writing metrics.jsonl only")
        self._bar = None
        if progress:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True, desc=title)

    def episodes(self, step: int, returns: Sequence[float], successes: Sequence[bool | None] = ()) -> None:
        for r in returns:
            self.curve.append((step, float(r)))
            if self._tb is not None:
                self._tb.add_scalar("rollout/ep_return", r, step)
        self.successes += [bool(s) for s in successes if s is not None]

    def mean_return(self, n: int = 10) -> float | None:
        return float(np.mean([r for _, r in self.curve[-n:]])) if self.curve else None

    def success_rate(self, n: int = 50) -> float | None:
        return float(np.mean(self.successes[-n:])) if self.successes else None

    def fps(self, step: int) -> float:
        return (step - self._s0) / max(1e-9, time.perf_counter() - self._t0)

    def scalars(self, step: int, values: dict[str, Any]) -> None:
        clean = {k: float(v) for k, v in values.items() if isinstance(v, (int, float, np.floating, np.integer))}
        if self._tb is not None:
            for k, v in clean.items():
                self._tb.add_scalar(k, v, step)
        if self._jsonl is not None:
            self._jsonl.write(json.dumps({"step": step, **clean}, default=_json_default) + "\n")
            self._jsonl.flush()

    def progress(self, step: int) -> None:
        if self._bar is not None:
            self._bar.n = step
            ret = self.mean_return()
            post = {"fps": f"{self.fps(step):.0f}"}
            if ret is not None:
                post["return"] = f"{ret:.1f}"
            sr = self.success_rate()
            if sr is not None:
                post["success"] = f"{sr:.2f}"
            self._bar.set_postfix(post, refresh=False)
            self._bar.refresh()

    def close(self, step: int) -> Path | None:
        if self._bar is not None:
            self.progress(step)
            self._bar.close()
        if self._tb is not None:
            self._tb.close()
        if self._jsonl is not None:
            self._jsonl.close()
        if self.out_dir is not None and self.curve:
            return plot_learning_curves({self.title: self.curve}, self.out_dir / "learning_curve.png", self.title)
        return None
