"""Hot intervention: change settings, pause, resume or checkpoint a run without restarting it.

`Control` is thread-safe and passive: any thread (a notebook, a signal handler, the ZeroMQ control
socket of the learner process via ``handle(message)``) records requests; the training loop applies
them between two updates by calling ``apply_pending(algo)``, so an update never sees half a change.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from tinker_core.errors import ConfigError

log = logging.getLogger("tinker.control")


class Control:
    """Requests for a running learner; ``settable`` names what ``set`` accepts (e.g. lr, ent_coef)."""

    def __init__(self, settable: dict[str, Callable[[float], None]] | None = None):
        self._lock = threading.Lock()
        self._resume = threading.Event()
        self._resume.set()
        self._pending: dict[str, float] = {}
        self._checkpoints: list[str] = []
        self._settable = dict(settable or {})
        self.history: list[dict[str, Any]] = []
        self.paused_since: float | None = None

    def bind(self, settable: dict[str, Callable[[float], None]]) -> None:
        self._settable = dict(settable)

    @property
    def settable(self) -> list[str]:
        return sorted(self._settable)

    # -- requests (any thread) ------------------------------------------------------------------
    def set(self, **values: float) -> None:
        """Request new values, e.g. ``set(lr=1e-4, ent_coef=0.01)``; applied before the next update."""
        unknown = sorted(set(values) - set(self._settable))
        if unknown:
            raise ConfigError(f"control.set: unknown setting(s) {unknown}; this algorithm accepts {self.settable}")
        for k, v in values.items():
            if not isinstance(v, (int, float)) or v != v or v < 0:
                raise ConfigError(f"control.set: {k} must be a finite number >= 0, got {v!r}")
        with self._lock:
            self._pending.update({k: float(v) for k, v in values.items()})

    def pause(self) -> None:
        """Hold training after the current update (collection stops too)."""
        self._resume.clear()

    def resume(self) -> None:
        self._resume.set()

    @property
    def paused(self) -> bool:
        return not self._resume.is_set()

    def checkpoint(self, path: str) -> None:
        """Request a checkpoint at ``path`` between two updates (also while paused)."""
        with self._lock:
            self._checkpoints.append(str(path))

    def handle(self, message: dict) -> dict:
        """One control message (as sent over a control socket): ``{"cmd": "set"|"pause"|"resume"|"checkpoint", ...}``."""
        cmd = message.get("cmd")
        try:
            if cmd == "set":
                self.set(**{k: v for k, v in message.items() if k != "cmd"})
            elif cmd == "pause":
                self.pause()
            elif cmd == "resume":
                self.resume()
            elif cmd == "checkpoint":
                self.checkpoint(message["path"])
            elif cmd == "status":
                pass
            else:
                raise ConfigError(f"control: unknown cmd {cmd!r}; expected set, pause, resume, checkpoint, status")
        except (ConfigError, KeyError) as e:
            return {"ok": False, "error": str(e)}
        return {"ok": True, "paused": self.paused, "settable": self.settable}

    # -- the training loop (learner thread) -----------------------------------------------------
    def apply_pending(self, save: Callable[[str], Any] | None = None, poll_s: float = 0.05) -> None:
        """Apply settings and checkpoint requests; block here while paused."""
        self._apply_once(save)
        if self.paused:
            self.paused_since = time.time()
            log.info("training paused")
            while not self._resume.wait(poll_s):
                self._apply_once(save)
            log.info("training resumed after %.1f s", time.time() - self.paused_since)
            self.paused_since = None
            self._apply_once(save)

    def _apply_once(self, save: Callable[[str], Any] | None) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
            ckpts, self._checkpoints = self._checkpoints, []
        for k, v in pending.items():
            self._settable[k](v)
            self.history.append({"time": time.time(), "set": k, "value": v})
            log.info("control: %s set to %g", k, v)
        for p in ckpts:
            if save is not None:
                save(p)
                self.history.append({"time": time.time(), "checkpoint": p})
