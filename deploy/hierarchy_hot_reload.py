"""`HotSwapHierarchy`: replace a running hierarchical policy with a new export without running a broken one.

As `tinker_deploy.hot_reload.HotSwapPolicy` does for one bundle: ``request_reload(path)`` validates the new export
completely in a background thread (``hierarchy.json`` and every level's manifest digest, every level's files and
session, each level's parity against its own recorded reference actions, and the same observation, action and
joints as the running one). A valid export then waits, and goes live at the next episode start (`reset`): the
running option is state of the old levels (its index, its age), so an option never runs on the levels of two
exports. A rejected export is listed in ``rejected`` with the reason, and the running one keeps running.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from tinker_core.errors import BundleError, TinkerError
from tinker_deploy.hierarchy_runtime import HierarchicalOnnxPolicy
from tinker_deploy.hot_reload import Rejection, _background_thread, check_parity


class HotSwapHierarchy:
    """A `HierarchicalOnnxPolicy` whose export can be replaced while it runs; call it like the policy."""

    def __init__(self, path: str | os.PathLike, parity_tolerance: float = 1e-5, threads: int = 1):
        self.parity_tolerance = parity_tolerance
        self.threads = threads
        self.policy: HierarchicalOnnxPolicy = self._validate(Path(path), None)
        self.reloads = 0
        self.rejected: list[Rejection] = []
        self._pending: HierarchicalOnnxPolicy | None = None
        self._handover = threading.Lock()  # held only to pass the pending export on, never while validating
        self._worker: ThreadPoolExecutor | None = None

    def forward(self, obs: Any) -> np.ndarray:
        return self.policy.forward(obs)

    def reset(self) -> None:
        """An episode starts: a validated export waiting goes live here, then the next call decides afresh."""
        if self._pending is not None:
            with self._handover:
                new, self._pending = self._pending, None
            if new is not None:
                new.calls, new.high_calls = self.policy.calls, self.policy.high_calls  # counts of the node's life
                self.policy = new  # one reference assignment
                self.reloads += 1
        self.policy.reset()

    def request_reload(self, path: str | os.PathLike) -> "Future[bool]":
        """Validate ``path`` in the background; the future says whether it will go live at the next episode start.
        Requests are handled in the order they came: the last valid one is the one that goes live."""
        fut: Future[bool] = Future()
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinker-hierarchy-reload",
                                              initializer=_background_thread)
        self._worker.submit(self._reload, Path(path), fut)
        return fut

    def _reload(self, path: Path, fut: "Future[bool]") -> None:
        try:  # one validation at a time: the worker has one thread
            new = self._validate(path, self._pending or self.policy)
        except Exception as e:  # anything at all: the running export keeps running
            self.rejected.append(Rejection(str(path), str(e) if isinstance(e, TinkerError)
                                           else f"{type(e).__name__}: {e}"))
            fut.set_result(False)
            return
        with self._handover:
            self._pending = new
        fut.set_result(True)

    def _validate(self, path: Path, current: HierarchicalOnnxPolicy | None) -> HierarchicalOnnxPolicy:
        new = HierarchicalOnnxPolicy(path, threads=self.threads)  # hierarchy.json and level digests checked
        levels = {"high": new.high, "low": new.low, **({"termination": new.termination} if new.termination else {})}
        for name, level in levels.items():
            check_parity(level, f"{path} (level {name!r})", self.parity_tolerance)
        if current is not None:
            if new.input_spec != current.input_spec or new.output_spec != current.output_spec:
                raise BundleError(f"{path}: observation or action differs from the running hierarchy: obs "
                                  f"{new.input_spec.describe()} vs {current.input_spec.describe()}, action "
                                  f"{new.output_spec.describe()} vs {current.output_spec.describe()}")
            m, c = new.high.manifest, current.high.manifest
            if list(m.obs_terms or []) != list(c.obs_terms or []):
                raise BundleError(f"{path}: its observation terms differ from the running hierarchy's (perception "
                                  "assembles the running layout)")
            if m.joint_names != c.joint_names:
                raise BundleError(f"{path}: joint names differ from the running hierarchy: {m.joint_names} vs "
                                  f"{c.joint_names}")
        return new

    def close(self) -> None:
        """Stop the validation worker after the requests already queued."""
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None
