"""`experience_bridge`: the live loop's transitions to the learner, the learner's bundles to the policy.

Listens to ``task`` (one message per robot cycle), ``perception/features``, ``policy/raw_action``,
``policy/joint_target`` and the safe command, joins them by the robot's state stamp, and for cycle
k emits ``Transition(obs=features_k, action=raw_action_k, reward_{k+1}, terminated_{k+1},
truncated_{k+1}, info={policy_version, safety_status, cycle}, next_obs=features_{k+1})`` with
`tinker_core.transport.TransitionSender` (drop-on-full, never blocks; ZeroMQ reconnects by itself;
counters in /diagnostics). Held cycles (no raw action) give no transition, and
neither does an episode's last state (the robot resets after it, so the next state is not its outcome).

New bundles from the learner (`WeightsSubscriber`; blobs are the bundle's files by name, e.g.
``manifest.json`` and ``*.onnx``) are written atomically to ``bundle_dir/v<version>`` and handed to
the policy node by setting its ``bundle`` parameter (the standard SetParameters service); when the
bundle's perception model differs from the running one, the perception node gets it first.

``record: RUN.mcap`` records every cycle (see `tinker.recording`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticStatus
from rclpy.node import Node
from rclpy.parameter import Parameter
from std_msgs.msg import Float32MultiArray, Float64MultiArray

from tinker.recording import CycleRecorder, empty_record
from tinker.runtime import OK, WARN, NodeRuntime, main_for
from tinker.wire import LATCHED_QOS, RECORD_QOS, decode_meta
from tinker_core.errors import TinkerError


def _meta(msg) -> dict[str, str]:
    return decode_meta(msg.layout.dim[0].label) if msg.layout.dim else {}


class ExperienceBridgeNode(NodeRuntime, Node):
    def __init__(self, **kwargs):
        super().__init__("experience_bridge", **kwargs)
        self._init_runtime("experience_bridge")
        p = self.declare_parameter
        p("learner_endpoint", "")
        p("weights_endpoint", "")
        p("bundle_dir", "")
        p("record", "")
        p("policy_node", "policy")
        p("perception_node", "perception")
        p("task_topic", "task")
        p("features_topic", "perception/features")
        p("raw_action_topic", "policy/raw_action")
        p("joint_target_topic", "policy/joint_target")
        p("command_topic", "forward_position_controller/commands")
        p("estop_state_topic", "safety/estop_state")
        g = lambda n: self.get_parameter(n).value  # noqa: E731
        self._cycles: OrderedDict[int, dict] = OrderedDict()
        self.sender = self.weights = self.recorder = None
        self.transitions = 0
        self.bundles_received = 0
        self.last_error = ""
        self.estopped = False
        if g("learner_endpoint"):
            from tinker_core.transport import TransitionSender

            self.sender = TransitionSender(g("learner_endpoint"), hwm=1000)
        if g("weights_endpoint"):
            from rclpy.parameter_client import AsyncParameterClient
            from tinker_core.transport import WeightsSubscriber

            self.weights = WeightsSubscriber(g("weights_endpoint"))
            self.bundle_dir = Path(g("bundle_dir") or tempfile.mkdtemp(prefix="tinker-bundles-"))
            self.bundle_dir.mkdir(parents=True, exist_ok=True)
            self.deployed_version: int | None = None
            ns = self.get_namespace().rstrip("/")
            self._policy_params = AsyncParameterClient(self, f"{ns}/{g('policy_node')}")
            self._perception_params = AsyncParameterClient(self, f"{ns}/{g('perception_node')}")
            self.create_timer(0.1, self._poll_weights)
        if g("record"):
            self.recorder = CycleRecorder(g("record"), {"namespace": self.get_namespace(),
                                                        "control_period": str(self.period)})
        sub = self.create_subscription
        sub(Float64MultiArray, g("task_topic"), self._on_task, RECORD_QOS)
        sub(Float32MultiArray, g("features_topic"), self._on_features, RECORD_QOS)
        sub(Float64MultiArray, g("raw_action_topic"), self._on_raw, RECORD_QOS)
        sub(Float64MultiArray, g("joint_target_topic"), self._on_target, RECORD_QOS)
        sub(Float64MultiArray, g("command_topic"), self._on_command, RECORD_QOS)
        sub(DiagnosticStatus, g("estop_state_topic"), self._on_estop, LATCHED_QOS)

    # --- joining by the robot's state stamp ------------------------------------------------------
    def _rec(self, stamp: int) -> dict:
        rec = self._cycles.get(stamp)
        if rec is None:
            rec = self._cycles[stamp] = empty_record()
            rec["state_stamp_ns"] = stamp
        return rec

    def _on_task(self, msg: Float64MultiArray) -> None:
        m = _meta(msg)
        stamp = int(m.get("stamp_ns", 0))
        rec = self._rec(stamp)
        v = np.asarray(msg.data, dtype=np.float64)
        rec["cycle"], rec["episode"] = int(m.get("cycle", 0)), int(m.get("episode", 0))
        if v.shape[0] >= 3:
            rec["reward"] = float(v[0])
            rec["terminated"] = bool(v[2] > 0.5)
            rec["truncated"] = bool(v[1] > 0.5 and v[2] <= 0.5)
        rec["_task"] = True
        while len(self._cycles) > 3:  # cycle k is final once k+1's features and k+2's task are in
            self._finalize()

    def _on_features(self, msg: Float32MultiArray) -> None:
        m = _meta(msg)
        rec = self._rec(int(m.get("stamp_ns", 0)))
        rec["policy_input"] = np.asarray(msg.data, dtype=np.float32)
        rec["features_recv_ns"] = time.time_ns()

    def _on_raw(self, msg: Float64MultiArray) -> None:
        m = _meta(msg)
        rec = self._rec(int(m.get("stamp_ns", 0)))
        rec["raw_action"] = np.asarray(msg.data, dtype=np.float64)
        rec["action_recv_ns"] = time.time_ns()
        rec["policy_version"] = m.get("version", "")

    def _on_target(self, msg: Float64MultiArray) -> None:
        rec = self._rec(int(_meta(msg).get("stamp_ns", 0)))
        rec["joint_target"] = np.asarray(msg.data, dtype=np.float64)

    def _on_command(self, msg: Float64MultiArray) -> None:
        m = _meta(msg)
        stamp = int(m.get("stamp_ns", 0))
        if stamp not in self._cycles:
            return  # a stop or a command for a cycle already written
        rec = self._cycles[stamp]
        rec["safe_command"] = np.asarray(msg.data, dtype=np.float64)
        rec["command_recv_ns"] = time.time_ns()
        rec["safety_status"] = m.get("status", "")

    def _on_estop(self, msg: DiagnosticStatus) -> None:
        self.estopped = any(kv.key == "estopped" and kv.value == "true" for kv in msg.values)

    def _finalize(self) -> None:
        stamp, rec = self._cycles.popitem(last=False)
        if not rec.pop("_task", False):
            return  # fragments of a cycle whose task message never came
        nxt = next(iter(self._cycles.values()), None)
        if self.recorder is not None:
            self.recorder.write(rec, time.time_ns())
        if self.sender is None or nxt is None or len(rec["raw_action"]) == 0 or len(nxt["policy_input"]) == 0:
            return
        if nxt.get("episode") != rec.get("episode"):
            return  # the robot reset after this state: its action never acted on it, no transition to learn from
        from tinker_core.transition import Transition

        t = Transition(obs=rec["policy_input"], action=rec["raw_action"].astype(np.float32),
                       reward=nxt["reward"], terminated=nxt["terminated"], truncated=nxt["truncated"],
                       info={"policy_version": rec["policy_version"], "safety_status": rec["safety_status"],
                             "cycle": rec["cycle"], "namespace": self.get_namespace(), "source": "real"},
                       next_obs=nxt["policy_input"])
        try:
            self.sender.send(t)
            self.transitions += 1
        except TinkerError as e:
            self.last_error = str(e)

    # --- bundles from the learner ----------------------------------------------------------------
    def _poll_weights(self) -> None:
        got = self.weights.poll(0)
        if got is None:
            return
        version, blobs, meta = got
        if version == self.deployed_version:
            return  # a repeat of what the policy already has
        try:
            path = self._write_bundle(version, blobs)
        except (OSError, TinkerError) as e:
            self.last_error = f"bundle v{version} not written: {e}"
            self.get_logger().error(self.last_error)
            return
        self.bundles_received += 1
        self.deployed_version = version
        self.deploy(str(path), perception_changed=bool(meta.get("perception_changed", False)))

    def _write_bundle(self, version: int, blobs: dict) -> Path:
        final = self.bundle_dir / f"v{version}"
        tmp = Path(tempfile.mkdtemp(prefix=f".v{version}-", dir=self.bundle_dir))
        for name, data in blobs.items():
            if "/" in name or name.startswith("."):
                raise TinkerError(f"weights blob name {name!r}: expected a plain file name of the bundle")
            (tmp / name).write_bytes(data if isinstance(data, bytes) else np.asarray(data).tobytes())
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)  # the policy node only ever sees a complete directory
        return final

    def deploy(self, path: str, perception_changed: bool = False) -> None:
        """Hands bundle ``path`` to the nodes (perception first when its model changed)."""
        prm = [Parameter("bundle", value=path)]
        if perception_changed:
            self._perception_params.set_parameters(prm)
        self._policy_params.set_parameters(prm)
        self.get_logger().info(f"handed bundle {path} to the policy node")

    # --- runtime hooks ---------------------------------------------------------------------------
    def diagnostic_values(self) -> dict[str, object]:
        s = self.sender
        return {"transitions": self.transitions, "sent": s.sent if s else 0, "dropped": s.dropped if s else 0,
                "bundles_received": self.bundles_received,
                "recorded_cycles": self.recorder.count if self.recorder else 0,
                "estopped": self.estopped, "last_error": self.last_error}

    def diagnostic_level(self):
        if self.sender is not None and self.sender.dropped:
            return WARN, f"dropped {self.sender.dropped} transition(s): learner away or slow"
        return OK, "bridging"

    def on_exit(self) -> None:
        while self._cycles:
            self._finalize()

    def close_runtime(self) -> None:
        super().close_runtime()
        if self.recorder is not None:
            self.recorder.close()
        if self.sender is not None:
            self.sender.close(linger_ms=200)
        if self.weights is not None:
            self.weights.close()


main = main_for(ExperienceBridgeNode)

if __name__ == "__main__":
    raise SystemExit(main())
