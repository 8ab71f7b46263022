"""`LearnerProcess`: ``tinker learner`` as the demo's child process, steered over its control socket."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from tinker.priority import background_child
from tinker_core.errors import TinkerError


class LearnerProcess:
    """``tinker learner`` as a child process, steered over its control socket."""

    def __init__(self, config: dict, out: Path):
        self.config = config
        self.path = out / "learner.yaml"
        self.path.write_text(yaml.safe_dump({"learner": config}, sort_keys=False))
        self.log_path = out / "learner.log"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "wb")
        # The robot loop comes first: the learner runs at a lower priority with one compute thread, so
        # on a small machine training slows down rather than the 50 ms cycle missing its deadline.
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "tinker_cli", "learner", "--config", str(self.path)],
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                                     preexec_fn=background_child)
        log.close()

    def ctl(self, cmd: str, timeout: float = 120.0, **values: Any) -> dict:
        from tinker_core.transport import ControlClient

        req: dict[str, Any] = {"cmd": cmd, "timeout_s": timeout}
        if values:
            req["values"] = values
        cli = ControlClient(self.config["control_endpoint"], timeout_ms=int(timeout * 1000))
        try:
            return cli.request(req)
        finally:
            cli.close()

    def wait_ready(self, timeout: float = 600.0) -> dict:
        """The learner's first status. At background priority on a loaded machine its start (torch, the pretrained
        replay) took over 180 s: three demos at load 20-25 (2 CPUs) gave up at 180 s with an empty learner log."""
        end = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < end:
            if self.proc is not None and self.proc.poll() is not None:
                raise TinkerError(f"the learner exited with code {self.proc.returncode}; its log "
                                  f"({self.log_path}) ends:\n{self.tail()}")
            try:
                return self.ctl("status", timeout=5.0)
            except TinkerError as e:
                last = e
                time.sleep(0.5)
        raise TinkerError(f"the learner did not answer within {timeout:.0f} s ({last}); log:\n{self.tail()}")

    def tail(self, n: int = 15) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").strip().splitlines()[-n:]) \
            if self.log_path.is_file() else ""

    def stop(self, grace: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
