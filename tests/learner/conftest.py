"""Shared fixtures of the learner tests: free endpoints, a learner subprocess, a module-wide Ray."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def endpoints() -> dict[str, str]:
    from tinker_core.transport import free_endpoints

    return {f"{k}_endpoint": e for k, e in zip(("transitions", "weights", "params", "control"), free_endpoints(4))}


# Small, fast settings for Pendulum-v1 on two shared cores.
FAST = {"env_id": "Pendulum-v1", "batch_size": 64, "warmup": 200, "update_interval": 1, "publish_every": 0,
        "param_sync_every": 50, "checkpoint_every": 0, "replay_capacity": 20_000, "real_capacity": 5_000,
        "algo_kwargs": {"net_arch": [64, 64], "torch_threads": 1, "learning_rate": 1e-3}}


class LearnerProcess:
    """``python -m tinker_cli learner --config FILE`` in its own process, driven through ``ctl``."""

    def __init__(self, tmp: Path, **overrides: Any):
        self.cfg = {**FAST, **endpoints(), "bundle_dir": str(tmp / "bundles"), **overrides}
        self.config_path = tmp / f"learner-{len(list(tmp.glob('learner-*.yaml')))}.yaml"
        self.config_path.write_text(yaml.safe_dump({"learner": self.cfg}))
        self.log_path = self.config_path.with_suffix(".log")
        self.proc: subprocess.Popen | None = None

    def start(self, wait: bool = True) -> "LearnerProcess":
        """Launch the process; with ``wait`` return once it answers ``ctl status``."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "tinker_cli", "learner", "--config", str(self.config_path)],
                                     cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        if wait:
            self.wait(lambda s: True, timeout=90)
        return self

    def ctl(self, cmd: str, timeout_ms: int = 30_000, **values: Any) -> dict:
        from tinker_core.transport import ControlClient

        cli = ControlClient(self.cfg["control_endpoint"], timeout_ms=timeout_ms)
        try:
            req: dict = {"cmd": cmd}
            if values:
                req["values"] = values
            return cli.request(req)
        finally:
            cli.close()

    def status(self) -> dict:
        rep = self.ctl("status", timeout_ms=5000)
        assert rep["ok"], rep
        return rep

    def wait(self, pred: Callable[[dict], bool], timeout: float = 60.0) -> dict:
        from tinker_core.errors import TransportError

        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"learner exited with {self.proc.returncode}:\n{self.log()}")
            try:
                last = self.status()
                if pred(last):
                    return last
            except TransportError as e:
                last = str(e)
            time.sleep(0.2)
        raise AssertionError(f"condition not reached in {timeout} s; last status {last}\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        try:
            self.ctl("stop", timeout_ms=5000)
        except Exception:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)


@pytest.fixture
def learner_factory(tmp_path):
    started: list[LearnerProcess] = []

    def make(**overrides: Any) -> LearnerProcess:
        lp = LearnerProcess(tmp_path, **overrides)
        started.append(lp)
        return lp

    yield make
    for lp in started:
        if lp.proc is not None and lp.proc.poll() is None:
            lp.proc.kill()
            lp.proc.wait(timeout=10)


def pendulum_transitions(n: int, seed: int = 0, source: str = "sim", start_seq: int = 0) -> list:
    """``n`` random-action Pendulum transitions tagged with ``source`` and a running ``seq``."""
    import gymnasium as gym

    from tinker_core.transition import Transition

    env = gym.make("Pendulum-v1")
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    for i in range(n):
        a = env.action_space.sample()
        nxt, r, term, trunc, _ = env.step(a)
        out.append(Transition(obs, np.asarray(a, np.float32), float(r), term, trunc,
                              {"source": source, "seq": start_seq + i}, nxt))
        obs = env.reset()[0] if (term or trunc) else nxt
    env.close()
    return out


@pytest.fixture(scope="module")
def ray_local():
    """One local Ray per test module (2 CPUs, no dashboard, a short temp dir for its sockets)."""
    import ray

    tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    kw = dict(num_cpus=2, include_dashboard=False, _temp_dir=tmp, log_to_driver=False,
              runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}})
    try:
        ray.init(**kw)
    except Exception:  # Ray gives its raylet a fixed 30 s to register; on a loaded machine, try once more
        ray.shutdown()
        ray.init(**kw)
    yield ray
    ray.shutdown()


@pytest.fixture
def pendulum():
    """`pendulum_transitions` as a fixture (test modules cannot import conftest in importlib mode)."""
    return pendulum_transitions
