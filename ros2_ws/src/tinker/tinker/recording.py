"""MCAP recording of every control cycle, written with mcap-ros2-support (opens in standard MCAP tools).

One message per robot cycle on topic ``/tinker/cycle`` with the ROS 2 schema ``tinker_msgs/msg/CycleRecord``
(its definition is embedded in the file, so Foxglove, ``mcap cat`` or ``mcap_ros2.reader`` decode it
without this package). Held cycles are recorded too: their ``raw_action`` is empty and
``safety_status`` says why. This module does not import rclpy: the reader side runs anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import numpy as np

TOPIC = "/tinker/cycle"
SCHEMA = "tinker_msgs/msg/CycleRecord"
MSGDEF = """\
# One control cycle of the tinker ROS 2 loop.
int64 cycle                 # the robot's cycle counter
int32 episode               # the robot's episode counter
int64 state_stamp_ns        # the JointState stamp this cycle started from (robot clock, ns)
int64 features_recv_ns      # when the policy input reached the recorder (0: never)
int64 action_recv_ns        # when the raw action reached the recorder (0: none, cycle held)
int64 command_recv_ns       # when the command after safety reached the recorder (0: none)
float32[] policy_input      # the features the actor ran on
float64[] raw_action        # the actor's output before the action chain
float64[] joint_target      # the action chain's output (policy command)
float64[] safe_command      # the command after the SafetyWrapper (what the robot got)
float64 reward              # reward for reaching this cycle's state
bool terminated             # task solved at this state
bool truncated              # episode cut at this state (time limit)
string policy_version
string safety_status        # passed / clipped / rate_limited / held / estop ...
"""
FIELDS = ("cycle", "episode", "state_stamp_ns", "features_recv_ns", "action_recv_ns", "command_recv_ns",
          "policy_input", "raw_action", "joint_target", "safe_command", "reward", "terminated", "truncated",
          "policy_version", "safety_status")


def empty_record() -> dict:
    return {"cycle": 0, "episode": 0, "state_stamp_ns": 0, "features_recv_ns": 0, "action_recv_ns": 0,
            "command_recv_ns": 0, "policy_input": [], "raw_action": [], "joint_target": [], "safe_command": [],
            "reward": 0.0, "terminated": False, "truncated": False, "policy_version": "", "safety_status": ""}


class CycleRecorder:
    """Appends cycle records to an MCAP file; ``close()`` writes the summary (the file is then complete)."""

    def __init__(self, path: str | os.PathLike, metadata: dict[str, str] | None = None):
        from mcap_ros2.writer import Writer

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = open(self.path, "wb")
        self._w = Writer(self._f)
        self._schema = self._w.register_msgdef(SCHEMA, MSGDEF)
        if metadata:
            self._w.add_metadata("tinker", {k: str(v) for k, v in metadata.items()})
        self.count = 0

    def write(self, rec: dict, log_time_ns: int) -> None:
        msg = dict(rec)
        for k in ("policy_input", "raw_action", "joint_target", "safe_command"):
            msg[k] = [float(x) for x in np.asarray(msg[k]).reshape(-1)]
        self._w.write_message(TOPIC, self._schema, msg, log_time=log_time_ns,
                              publish_time=int(rec["state_stamp_ns"]) or log_time_ns, sequence=self.count)
        self.count += 1

    def close(self) -> None:
        if self._f is not None:
            self._w.finish()
            self._f.close()
            self._f = None


def read_cycles(path: str | os.PathLike) -> Iterator[dict]:
    """The cycle records of an MCAP file, decoded with the standard ``mcap_ros2`` reader."""
    from mcap_ros2.reader import read_ros2_messages

    for m in read_ros2_messages(str(path), topics=[TOPIC]):
        r = m.ros_msg
        yield {f: getattr(r, f) for f in FIELDS}


def cycles_to_transitions(records) -> list:
    """Transitions ``(features_k, raw_action_k, reward_{k+1}, terminated_{k+1}, truncated_{k+1})`` of a recording.

    Cycles without a raw action (held by safety) or without a next cycle's input give none; a cycle
    that ends an episode is not joined to the next episode's first cycle.
    """
    from tinker_core.transition import Transition

    recs = list(records)
    out = []
    for cur, nxt in zip(recs, recs[1:]):
        if len(cur["raw_action"]) == 0 or len(cur["policy_input"]) == 0 or len(nxt["policy_input"]) == 0:
            continue
        if nxt["episode"] != cur["episode"] or nxt["cycle"] != cur["cycle"] + 1:
            continue
        out.append(Transition(
            obs=np.asarray(cur["policy_input"], dtype=np.float32),
            action=np.asarray(cur["raw_action"], dtype=np.float32),
            reward=float(nxt["reward"]), terminated=bool(nxt["terminated"]), truncated=bool(nxt["truncated"]),
            info={"policy_version": cur["policy_version"], "safety_status": cur["safety_status"],
                  "cycle": int(cur["cycle"])},
            next_obs=np.asarray(nxt["policy_input"], dtype=np.float32)))
    return out
