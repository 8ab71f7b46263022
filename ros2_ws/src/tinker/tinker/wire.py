"""Message conversion shared by the nodes: QoS, metadata labels, joints by name, arrays.

Metadata encoding (documented contract): `std_msgs/Float32MultiArray` and `Float64MultiArray`
carry per-message facts in ``layout.dim[0].label`` as ``key=value`` pairs joined by ``;``, e.g.
``stamp_ns=1712...;cycle=42;perception_sha256=ab12...``. ``dim[0].size`` is the vector length, so
standard tools still read a plain vector. Keys used across the graph:

- ``stamp_ns``: the robot's JointState stamp this message derives from (latency, cycle joining)
- ``cycle``: the robot's cycle counter
- ``perception_sha256``: sha256 of the perception model that made the features
- ``version``: policy version of the bundle that made an action
- ``status``: the safety status of a safe command (``passed``, ``held``, ``estop`` ...)
"""

from __future__ import annotations

import array
from typing import Mapping, Sequence

import numpy as np
from rclpy.qos import (DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy)
from std_msgs.msg import Float32MultiArray, Float64MultiArray, MultiArrayDimension

from tinker_core.errors import ConfigError, ValidationError

SENSOR_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.BEST_EFFORT,
                        durability=DurabilityPolicy.VOLATILE)
"""State and images: the newest sample is all that matters; a late one is worthless."""
COMMAND_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.VOLATILE)
"""Commands and features: delivered, newest only."""
LATCHED_QOS = QoSProfile(depth=1, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)
"""Status a late subscriber must still see (e-stop state)."""
RECORD_QOS = QoSProfile(depth=50, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                        durability=DurabilityPolicy.VOLATILE)
"""What the experience bridge listens to: every cycle, a little slack."""


def encode_meta(meta: Mapping[str, object]) -> str:
    label = ";".join([f"{k}={v}" for k, v in meta.items()])
    if label.count("=") != len(meta) or label.count(";") != max(len(meta) - 1, 0):  # one check per message
        for k, v in meta.items():
            if any(c in f"{k}{v}" for c in ";="):
                raise ValidationError(f"meta[{k}]", "no ';' or '=' in keys or values", repr(v))
    return label


def decode_meta(label: str) -> dict[str, str]:
    out = {}
    for part in label.split(";"):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k] = v
    return out


def array_msg(values: np.ndarray, meta: Mapping[str, object] | None = None, double: bool = True):
    """A Float64MultiArray (or Float32 with ``double=False``) whose dim[0] label carries ``meta``."""
    msg = Float64MultiArray() if double else Float32MultiArray()
    v = np.asarray(values, dtype=np.float64 if double else np.float32).reshape(-1)
    msg.layout.dim = [MultiArrayDimension(label=encode_meta(meta or {}), size=int(v.shape[0]), stride=int(v.shape[0]))]
    buf = array.array("d" if double else "f")
    buf.frombytes(v.tobytes())
    msg.data = buf
    return msg


def read_array(msg, n: int | None, where: str) -> tuple[np.ndarray, dict[str, str]]:
    """Vector and metadata of a MultiArray; raises ValidationError on wrong length or non-finite values."""
    v = np.array(msg.data, dtype=np.float64)  # a copy (one memcpy from the array.array): the buffer is not ours
    if n is not None and v.shape[0] != n:
        raise ValidationError(where, f"{n} values", f"{v.shape[0]} values")
    if not np.isfinite(v).all():
        bad = np.flatnonzero(~np.isfinite(v)).tolist()
        raise ValidationError(where, "finite values", f"NaN/inf at index {bad}")
    meta = decode_meta(msg.layout.dim[0].label) if msg.layout.dim else {}
    return v, meta


def stamp_ns(header) -> int:
    return int(header.stamp.sec) * 1_000_000_000 + int(header.stamp.nanosec)


def set_stamp(header, ns: int) -> None:
    header.stamp.sec, header.stamp.nanosec = divmod(int(ns), 1_000_000_000)


class JointMap:
    """Maps a JointState to the order a consumer expects, by joint NAME, never by index.

    The index map is computed once per distinct name list (publishers keep their order), so the
    per-message cost is one fancy-indexing.
    """

    def __init__(self, expected: Sequence[str], where: str = "joint_states"):
        self.expected = list(expected)
        if len(set(self.expected)) != len(self.expected):
            raise ConfigError(f"{where}: duplicate joint names in {self.expected}")
        self.where = where
        self._cache: dict[tuple[str, ...], np.ndarray] = {}

    def mismatch(self, names: Sequence[str]) -> str:
        """'' when ``names`` holds every expected joint, else a message naming missing and extra joints."""
        missing = [n for n in self.expected if n not in names]
        extra = [n for n in names if n not in self.expected]
        if not missing:
            return ""
        return f"{self.where}: missing joints {missing}" + (f"; extra joints {extra}" if extra else "")

    def index(self, names: Sequence[str]) -> np.ndarray:
        key = tuple(names)
        idx = self._cache.get(key)
        if idx is None:
            err = self.mismatch(names)
            if err:
                raise ValidationError(self.where, f"joints {self.expected}", f"joints {list(names)}", err)
            pos = {n: i for i, n in enumerate(names)}
            idx = np.asarray([pos[n] for n in self.expected], dtype=np.intp)
            self._cache[key] = idx
        return idx

    def read(self, msg) -> tuple[np.ndarray, np.ndarray]:
        """(q, qd) in the expected order; velocities default to zeros when absent."""
        idx = self.index(msg.name)
        pos = np.asarray(msg.position, dtype=np.float64)
        if pos.shape[0] != len(msg.name):
            raise ValidationError(f"{self.where}.position", f"{len(msg.name)} values", f"{pos.shape[0]} values")
        vel = np.asarray(msg.velocity, dtype=np.float64)
        q = pos[idx]
        qd = vel[idx] if vel.shape[0] == len(msg.name) else np.zeros_like(q)
        if not (np.isfinite(q).all() and np.isfinite(qd).all()):
            raise ValidationError(f"{self.where}.position", "finite values", "NaN/inf")
        return q, qd
