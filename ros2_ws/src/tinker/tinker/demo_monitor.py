"""`Monitor`: the demo's observer of the running graph, a ROS node in its own context (not on the control path).

It records each finished episode (from the robot's ``task`` topic: success, time to success, the policy
version that ran it, when it ended) and the nodes' /diagnostics; each heartbeat of the safety node marks its
SafetyWrapper counters, so the report has the interventions over time (`tinker_core.report_data`).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from tinker_core.errors import ValidationError
from tinker_core.report_data import InterventionSeries


class Monitor:
    """A ROS node in its own context that records episodes (from ``task``) and /diagnostics."""

    def __init__(self, namespace: str = "", period: float = 0.05):
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions
        from std_msgs.msg import Float64MultiArray

        from tinker.wire import COMMAND_QOS, meta_of, read_task, safety_counters

        self._meta_of, self._read_task = meta_of, read_task
        self.ctx = Context()
        domain = os.environ.get("ROS_DOMAIN_ID", "")
        rclpy.init(context=self.ctx, args=[], domain_id=int(domain) if domain.isdigit() else None,
                   signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node("tinker_demo_monitor", context=self.ctx)
        ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
        self.interventions = InterventionSeries()
        """the safety node's counters at each of its heartbeats (1 s apart), labelled by time (s): interventions
        per heartbeat, on the clock of the episodes' ``t_s``"""
        self._safety_counters = safety_counters
        self.node.create_subscription(Float64MultiArray, f"{ns}/task", self._on_task, COMMAND_QOS)
        self.node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, 50)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.lock = threading.Lock()
        self.episodes: list[dict] = []
        self.diag: dict[str, dict[str, str]] = {}
        self.phase = "warmup"
        self._t0 = time.monotonic()
        self._seen_success: dict[int, bool] = {}
        self._first_cycle: dict[int, int] = {}
        self._success_cycle: dict[int, int] = {}
        self.period = period
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def _on_task(self, msg: Any) -> None:
        meta = self._meta_of(msg)
        v = msg.data
        if len(v) < 4:
            return
        ep = int(meta.get("episode", -1))
        done, success = bool(v[1] > 0.5), bool(v[2] > 0.5)
        cycle = int(meta.get("cycle", 0))
        with self.lock:
            first = self._first_cycle.setdefault(ep, cycle)
            if success and ep not in self._success_cycle:
                self._success_cycle[ep] = cycle
            self._seen_success[ep] = self._seen_success.get(ep, False) or success
            if done:
                won = self._success_cycle.pop(ep, None)
                self._first_cycle.pop(ep, None)
                version = self.policy_value("model_version", "0")
                self.episodes.append({**self._objects(msg), "episode": ep, "success": self._seen_success.pop(ep),
                                      "cycles": cycle - first + 1,
                                      "time_to_success_s": None if won is None else (won - first + 1) * self.period,
                                      "distance_m": float(v[3]), "phase": self.phase, "cycle": cycle,
                                      "t_s": time.monotonic() - self._t0,
                                      "policy_version": int(version) if str(version).isdigit() else 0})

    def _objects(self, msg: Any) -> dict[str, int]:
        """A sorting task's objects at the end of an episode (``objects_sorted``, ``num_objects``; the names
        `tinker_core.evaluate` uses), from the message's terms; nothing for a task without objects."""
        try:
            objects = self._read_task(msg).objects()
        except ValidationError:  # a report the monitor cannot split still counts as an episode
            return {}
        return {} if objects is None else {"objects_sorted": objects[0], "num_objects": objects[1]}

    def _on_diag(self, msg: Any) -> None:
        with self.lock:
            for st in msg.status:
                vals = self.diag[st.name] = {kv.key: kv.value for kv in st.values}
                if st.name.endswith("/safety") and "interventions.calls" in vals:
                    self.interventions.mark(round(time.monotonic() - self._t0, 2), self._safety_counters(vals))

    def policy_value(self, key: str, default: str = "") -> str:
        for name, vals in self.diag.items():
            if name.endswith("/policy"):
                return vals.get(key, default)
        return default
    def node_values(self, suffix: str) -> dict[str, str]:
        with self.lock:
            for name, vals in self.diag.items():
                if name.endswith("/" + suffix):
                    return dict(vals)
        return {}

    def count(self, phase: str) -> int:
        with self.lock:
            return sum(1 for e in self.episodes if e["phase"] == phase)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(2)
        self.executor.shutdown()
        self.node.destroy_node()
        self.ctx.try_shutdown()

