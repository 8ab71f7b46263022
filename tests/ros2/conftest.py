"""Shared fixtures for the ROS 2 tests: real bundles, a probe node, graphs on their own ROS domain.

Every test here runs real nodes in real processes over real DDS (Fast DDS, loopback only). Each
graph gets its own ROS_DOMAIN_ID so graphs of different modules (or a stale one) never cross-talk.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

TEST_PERIOD = 0.1
"""Control period of the test graphs: 100 ms instead of the 50 ms default, so that the shared 2-core
machine (camera rendering alone takes ~25 ms of CPU per cycle) does not trip the watchdog; the 50 ms
loop's timing is measured in benchmarks/control_loop.py, never asserted in a test."""
TESTS_DOMAIN_BASE = int(os.environ.get("ROS_DOMAIN_ID", "0") or 0)
_used_domains: set[int] = set()


def fresh_domain() -> int:
    """A ROS domain for one graph: different from the suite's and from every other graph's here."""
    while True:
        d = random.randint(1, 232)  # Fast DDS's valid range on the default ports
        if d != TESTS_DOMAIN_BASE and d not in _used_domains:
            _used_domains.add(d)
            return d


@pytest.fixture(scope="session")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """v1 and v2 of the hand-built reaching policy (same perception, different actor) and v3 with
    another perception model; exported once with the real deploy exporter."""
    from tinker.reach_bundle import build_reach_bundle

    root = tmp_path_factory.mktemp("bundles")
    return {
        "v1": build_reach_bundle(root / "v1", gain=0.5, policy_version=1, control_period=TEST_PERIOD),
        "v2": build_reach_bundle(root / "v2", gain=0.4, policy_version=2, control_period=TEST_PERIOD),
    }


class Probe:
    """A test-side rclpy node in its own context and domain, spun in a background thread."""

    def __init__(self, domain: int, name: str = "probe"):
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        self.ctx = Context()
        rclpy.init(context=self.ctx, domain_id=domain, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(f"tinker_test_{name}", context=self.ctx)
        self.ex = SingleThreadedExecutor(context=self.ctx)
        self.ex.add_node(self.node)
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            try:
                self.ex.spin_once(timeout_sec=0.02)
            except Exception:  # context shut down under us at close
                return

    def collect(self, msg_type, topic: str, qos) -> list[tuple[int, Any]]:
        """Subscribe; returns the live list of (receive time ns, message)."""
        box: list[tuple[int, Any]] = []

        def cb(msg):
            with self.lock:
                box.append((time.time_ns(), msg))

        self.node.create_subscription(msg_type, topic, cb, qos)
        return box

    def publisher(self, msg_type, topic: str, qos):
        return self.node.create_publisher(msg_type, topic, qos)

    def statuses(self, name: str, since_ns: int = 0) -> list[dict[str, str]]:
        """Every status of node ``name`` (fully qualified) in ``self.diag`` (the /diagnostics list the test
        collects into it) since ``since_ns``, oldest first, as ``{"level", "message", key: value...}``."""
        return [{"level": st.level, "message": st.message, **{kv.key: kv.value for kv in st.values}}
                for t, arr in list(self.diag) if t >= since_ns for st in arr.status if st.name == name]

    def status(self, name: str) -> dict[str, str]:
        """The newest status of node ``name`` ({} before the first)."""
        d = self.statuses(name)
        return d[-1] if d else {}

    def call(self, srv_type, name: str, request, timeout: float = 20.0):
        client = self.node.create_client(srv_type, name)
        try:
            assert client.wait_for_service(timeout_sec=timeout), f"service {name} never appeared"
            fut = client.call_async(request)
            end = time.monotonic() + timeout
            while not fut.done() and time.monotonic() < end:
                time.sleep(0.01)
            assert fut.done(), f"service {name} did not answer"
            return fut.result()
        finally:
            self.node.destroy_client(client)

    def set_param(self, node: str, name: str, value) -> bool:
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        req = SetParameters.Request()
        req.parameters = [Parameter(name, value=value).to_parameter_msg()]
        return self.call(SetParameters, f"{node}/set_parameters", req).results[0].successful

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.ex.shutdown()
        self.node.destroy_node()
        self.ctx.try_shutdown()


def wait_until(pred: Callable[[], bool], timeout: float, what: str, step: float = 0.05) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def graph_env(domain: int) -> dict[str, str]:
    env = dict(os.environ)
    env["ROS_DOMAIN_ID"] = str(domain)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    return env


def meta_of(msg) -> dict[str, str]:
    from tinker.wire import decode_meta

    return decode_meta(msg.layout.dim[0].label) if msg.layout.dim else {}


def patient_safety(tmp_path: Path) -> Path:
    """The default safety YAML with a patient watchdog latch (10 misses), written under ``tmp_path``: a stall of the
    shared machine does not end a run."""
    import yaml

    from tinker_safety.config import DEFAULT_CONFIG_PATH

    cfg = yaml.safe_load(Path(DEFAULT_CONFIG_PATH).read_text())
    cfg["watchdog_misses_to_estop"] = 10
    path = tmp_path / "safety.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def episode_ends(task) -> dict[int, bool]:
    """Episode -> success, for each episode that ended, from the ``task`` messages a `Probe` collected."""
    return {int(meta_of(m)["episode"]): bool(m.data[2]) for _, m in list(task) if m.data[1] > 0.5}


def run_episodes(graph, probe, task, episodes: int, timeout: float,
                 then: Callable[[], None] | None = None) -> dict[int, bool]:
    """Start ``graph``, clear safety's start-up latch, wait for ``episodes`` episode ends on ``task`` (a `Probe`'s
    collection), run ``then`` (a check on the running graph), stop everything; the first ``episodes`` as
    episode -> success."""
    try:
        graph.start()
        graph.call_trigger("safety/reset")
        wait_until(lambda: len(episode_ends(task)) >= episodes, timeout, f"{episodes} episodes")
        if then is not None:
            then()
    finally:
        probe.close()
        graph.stop()
    return dict(sorted(episode_ends(task).items())[:episodes])


@pytest.fixture(scope="session")
def ros2():
    """The helpers above, for test modules (``--import-mode=importlib`` cannot import conftest by name)."""
    from types import SimpleNamespace

    return SimpleNamespace(PERIOD=TEST_PERIOD, Probe=Probe, wait_until=wait_until, fresh_domain=fresh_domain, graph_env=graph_env,
                           meta_of=meta_of, patient_safety=patient_safety, episode_ends=episode_ends,
                           run_episodes=run_episodes)
