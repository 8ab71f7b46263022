"""The Fast DDS settings of a tinker node process: neither a participant joining the domain nor a service's
answer stalls the control loop.

**Transport.** With Fast DDS's shared-memory transport, a participant joining the domain (a ``ros2`` CLI
daemon starting, any rclpy node that stays) stopped one link of the loop for 330-380 ms, 1.0-1.3 s after
it was created: the sender published every cycle, the receiving process got nothing (in one traced stall
its shared-memory listener slept 328 ms), and the policy's commands missed 7-12 cycles; under ``ros2
launch`` it latched safety's watchdog. On this project's graph (four loop nodes, one-node joiners, 2-core
AMD, issue 22): with shared memory, 31 stalls in 159 joins under rmw_fastrtps's LOCALHOST set-up and
SCHED_FIFO (12 runs), 2 in 67 under normal scheduling, 5 in 40 with SUBNET discovery; with UDPv4 only, 0 in
40 with SUBNET discovery and 0 in 40 with the LOCALHOST profile below. So a node process runs on UDPv4 only.

**Services.** rmw_fastrtps sends a service's reply only once the client's reply reader is matched to the
reply writer, and waits for that match in the answering thread, up to the reply writer's reliability
``max_blocking_time`` (Fast DDS's default: 100 ms; ``__rmw_send_response`` in rmw_fastrtps_shared_cpp),
holding the GIL: a client that has just joined took the whole loop process out for 100 ms per answer.
The profiles bound that wait to `REPLY_WAIT_S`; a reply to a client still unmatched after it is dropped
(the client asks again).

`use_loop_profile` points Fast DDS at ``config/fastdds_loop.xml`` (UDPv4 only; the ``service`` publisher
profile rmw_fastrtps applies to every reply writer). For ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``
rmw_fastrtps adds a shared-memory transport no profile can remove, so the process runs with
``SYSTEM_DEFAULT`` and ``config/fastdds_loop_localhost.xml``, which sets up the discovery rmw_fastrtps sets
up for LOCALHOST (no multicast, 127.0.0.1 as the initial peer) on UDPv4. A profiles file the environment
names, ``ROS_STATIC_PEERS`` or ``ROS_LOCALHOST_ONLY=1`` leave everything as it is (the log says so).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import MutableMapping

PROFILE_ENV = "FASTDDS_DEFAULT_PROFILES_FILE"
"""Fast DDS's variable naming its XML profiles file (``FASTRTPS_DEFAULT_PROFILES_FILE``: its old name)."""
RANGE_ENV = "ROS_AUTOMATIC_DISCOVERY_RANGE"
REPLY_WAIT_S = 0.002
"""s a service's reply waits for the client's reply reader (the XML files' ``max_blocking_time``)."""
STALL_NOTE = "a participant joining the domain may stall the loop ~350 ms (shared memory, tinker.dds_profile)"


def loop_profile_file(localhost: bool = False) -> Path:
    """``config/fastdds_loop.xml`` (or ``fastdds_loop_localhost.xml``), from the installed package share
    (colcon) or the source tree."""
    from tinker.package_files import config_file

    return config_file("fastdds_loop_localhost.xml" if localhost else "fastdds_loop.xml")


def use_loop_profile(environ: MutableMapping[str, str] = os.environ) -> str:
    """Before ``rclpy.init``: run this process on tinker's Fast DDS profile (see the module docstring), unless
    the environment configures Fast DDS itself. Returns what was done, for the node's log."""
    rmw = environ.get("RMW_IMPLEMENTATION", "") or "rmw_fastrtps_cpp"
    if not rmw.startswith("rmw_fastrtps"):
        return f"{rmw}: no Fast DDS profile"
    own = environ.get(PROFILE_ENV) or environ.get("FASTRTPS_DEFAULT_PROFILES_FILE")
    if own:
        return (f"Fast DDS profiles from {own} (the environment's): tinker's would use UDPv4 only ({STALL_NOTE}) "
                f"and bound a service reply's reliability.max_blocking_time to {REPLY_WAIT_S * 1e3:.0f} ms "
                f"(else each answer to a client not yet matched stalls this process up to 100 ms)")
    discovery = environ.get(RANGE_ENV, "") or "SUBNET"
    if environ.get("ROS_LOCALHOST_ONLY") == "1" or (discovery == "LOCALHOST" and environ.get("ROS_STATIC_PEERS")):
        return (f"ROS_LOCALHOST_ONLY or LOCALHOST with ROS_STATIC_PEERS: rmw_fastrtps's own set-up with shared "
                f"memory, no tinker profile ({STALL_NOTE})")
    localhost = discovery == "LOCALHOST"
    path = loop_profile_file(localhost)
    environ[PROFILE_ENV] = str(path)
    if localhost:
        environ[RANGE_ENV] = "SYSTEM_DEFAULT"  # the profile's discovery is LOCALHOST's, without shared memory
    what = "LOCALHOST discovery on UDPv4 only" if localhost else "UDPv4 only"
    return f"Fast DDS profiles from {path}: {what}, service replies wait <= {REPLY_WAIT_S * 1e3:.0f} ms"
