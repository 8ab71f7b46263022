"""`HotSwapPolicy`: replace the running model with a new bundle without ever running a broken one.

``request_reload(path)`` validates the new bundle completely in a background thread (sha256 of every
file, manifest format, the expected specs and joints, the same I/O as the running model, session
creation, warm-up, and parity against the bundle's own recorded reference actions); only then does
the next call use it. The swap is one reference assignment, read once per call, so a call runs
entirely on the old or entirely on the new model, and a call never waits for a reload. A bundle that
fails any check is listed in ``rejected`` with the reason, and the previous model keeps running.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tinker_core.errors import BundleError, TinkerError
from tinker_core.module import ModuleBase

from tinker_deploy.bundle import ExpectedIO, load_bundle
from tinker_deploy.runtime import OnnxPolicy, OnnxPolicyConfig


def _background_thread() -> None:
    """The validation thread yields to the control loop: off real-time scheduling if the thread that
    started it had it (a node under SCHED_FIFO), and below the loop's threads."""
    if hasattr(os, "sched_setscheduler") and os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)  # Linux: this thread only
    except (AttributeError, OSError):
        pass


MAX_EXPORT_TOLERANCE = 1e-3
"""A bundle's parity is checked within the tolerance it was exported with (``manifest.parity.tolerance``) when that
is wider than ``parity_tolerance``, but never wider than this."""


@dataclass
class Rejection:
    """A bundle that was not swapped in, and why."""

    path: str
    reason: str


class HotSwapPolicy(ModuleBase[OnnxPolicyConfig]):
    """A policy whose model can be replaced while it runs. Call it like `OnnxPolicy`."""

    config_class = OnnxPolicyConfig
    input_name, output_name = "obs", "action"

    def __init__(self, initial_bundle: str | os.PathLike, expect: ExpectedIO | None = None,
                 config: OnnxPolicyConfig | None = None, parity_tolerance: float = 1e-5, warmup_calls: int = 50,
                 on_swap: Callable[[OnnxPolicy], None] | None = None):
        super().__init__(config)
        self.expect = expect
        self.parity_tolerance = parity_tolerance
        self.warmup_calls = warmup_calls
        self.on_swap = on_swap
        self._active: OnnxPolicy = self._validate(Path(initial_bundle))
        self.input_spec, self.output_spec = self._active.input_spec, self._active.output_spec
        self.reloads = 0
        self.rejected: list[Rejection] = []
        self._lock = threading.Lock()  # serializes reloads, never taken by __call__
        self._queue_lock = threading.Lock()
        self._worker: ThreadPoolExecutor | None = None
        self.name = "hot_swap_policy"

    # -- the hot path -------------------------------------------------------------------------
    def forward(self, obs: Any) -> np.ndarray:
        return self._active.forward(obs)

    @property
    def active(self) -> OnnxPolicy:
        return self._active

    @property
    def version(self) -> int:
        return self._active.version

    @property
    def sha256(self) -> str:
        return self._active.sha256

    # -- reloading ----------------------------------------------------------------------------
    def request_reload(self, path: str | os.PathLike) -> "Future[bool]":
        """Validate ``path`` in the background and swap it in if it passes; the future says which.
        Requests are handled one at a time in the order they came, so the last good one wins."""
        fut: Future[bool] = Future()
        with self._queue_lock:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinker-hot-reload",
                                                  initializer=_background_thread)
            self._worker.submit(self._reload, Path(path), fut)
        return fut

    def close(self) -> None:
        """Stop the reload worker after the requests already queued."""
        with self._queue_lock:
            if self._worker is not None:
                self._worker.shutdown(wait=True)
                self._worker = None

    def reload(self, path: str | os.PathLike, timeout: float | None = 60.0) -> bool:
        """Blocking `request_reload`: True if swapped in, False if rejected (see ``rejected``)."""
        return self.request_reload(path).result(timeout)

    def _reload(self, path: Path, fut: "Future[bool]") -> None:
        with self._lock:
            try:
                new = self._validate(path)
            except Exception as e:  # anything at all: the running model must keep running
                why = str(e) if isinstance(e, TinkerError) else f"{type(e).__name__}: {e}"
                self.rejected.append(Rejection(str(path), why))
                fut.set_result(False)
                return
            self._active = new  # one reference assignment: the next call uses the new model
            self.reloads += 1
        if self.on_swap is not None:
            self.on_swap(new)
        fut.set_result(True)

    def _validate(self, path: Path) -> OnnxPolicy:
        bundle = load_bundle(path, expect=self.expect)
        current = getattr(self, "_active", None)
        if current is not None:
            m, c = bundle.manifest, current.manifest
            if m.obs_spec != c.obs_spec or m.action_spec != c.action_spec:
                raise BundleError(f"{path}: I/O differs from the running model: obs {m.obs_spec.describe()} vs "
                                  f"{c.obs_spec.describe()}, action {m.action_spec.describe()} vs {c.action_spec.describe()}")
            if m.joint_names != c.joint_names:
                raise BundleError(f"{path}: joint names differ from the running model: {m.joint_names} vs {c.joint_names}")
        policy = OnnxPolicy(bundle, "policy", self.config)
        check_parity(policy, path, self.parity_tolerance if not self.config.quantized else np.inf)
        policy.warmup(self.warmup_calls)
        return policy


def parity_bound(bundle: Any, tolerance: float) -> float:
    """``tolerance``, or the bundle's own export tolerance where that is wider (it was verified within it at export:
    a CNN's float error exceeds an MLP's, a fine-tuned actor's its pretrained one's), capped at
    `MAX_EXPORT_TOLERANCE`."""
    exported = float((bundle.manifest.parity or {}).get("tolerance") or 0.0)
    return min(exported, MAX_EXPORT_TOLERANCE) if exported > tolerance else tolerance


def check_parity(policy: OnnxPolicy, path: str | os.PathLike, tolerance: float) -> None:
    """Raise BundleError unless ``policy`` reproduces its bundle's recorded reference actions within ``tolerance``
    (or the bundle's own export tolerance where that is wider, capped at `MAX_EXPORT_TOLERANCE`)."""
    bundle = policy.bundle
    obs, ref = bundle.recorded()
    if "action" not in ref:
        raise BundleError(f"{path}: recorded observations carry no reference actions to check parity with")
    got = policy.forward(obs)
    if got.shape != ref["action"].shape:
        raise BundleError(f"{path}: model output shape {got.shape} differs from its reference {ref['action'].shape}")
    diff = float(np.max(np.abs(got.astype(np.float64) - ref["action"]))) if got.size else 0.0
    tolerance = parity_bound(bundle, tolerance)
    if diff > tolerance:
        raise BundleError(f"{path}: model output differs from its own reference actions by {diff:.3g} "
                          f"(max abs), above {tolerance:g}")
