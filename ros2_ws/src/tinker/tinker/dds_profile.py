"""The Fast DDS profile of a tinker node process: a service's answer never stalls the control loop.

rmw_fastrtps sends a service's reply only once the client's reply reader is matched to the reply
writer, and waits for that match in the answering thread, up to the reply writer's reliability
``max_blocking_time`` (Fast DDS's default: 100 ms; ``__rmw_send_response`` in rmw_fastrtps_shared_cpp).
A client that has just joined (``ros2 param``, any CLI tool, a fresh rclpy participant) is often not
matched yet on the server's side when its request arrives, so the answer waits. rclpy holds the GIL
through that wait: no other thread of the process runs either, so serving the services from another
executor thread would not help. Each such answer took the whole loop process out for 100 ms, and a
few clients at once missed enough cycles in a row to latch safety's watchdog (issue 22).

`use_service_profile` points Fast DDS at ``config/fastdds_services.xml`` (its ``service`` publisher
profile, which rmw_fastrtps applies to every service's reply writer), where that wait is
`REPLY_WAIT_S`. A reply to a client still unmatched after it is dropped, as rmw_fastrtps drops it after
100 ms ("failed to send response (timeout)"): the client asks again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import MutableMapping

PROFILE_ENV = "FASTDDS_DEFAULT_PROFILES_FILE"
"""Fast DDS's variable naming its XML profiles file (``FASTRTPS_DEFAULT_PROFILES_FILE``: its old name)."""
REPLY_WAIT_S = 0.002
"""s a service's reply waits for the client's reply reader (the XML file's ``max_blocking_time``)."""


def service_profile_file() -> Path:
    """``config/fastdds_services.xml``, from the installed package share (colcon) or the source tree."""
    from tinker.package_files import config_file

    return config_file("fastdds_services.xml")


def use_service_profile(environ: MutableMapping[str, str] = os.environ) -> str:
    """Before ``rclpy.init``: use tinker's Fast DDS profile unless the environment names its own (or
    another RMW is chosen). Returns what was done, for the node's log."""
    rmw = environ.get("RMW_IMPLEMENTATION", "") or "rmw_fastrtps_cpp"
    if not rmw.startswith("rmw_fastrtps"):
        return f"{rmw}: no Fast DDS profile"
    own = environ.get(PROFILE_ENV) or environ.get("FASTRTPS_DEFAULT_PROFILES_FILE")
    if own:
        return (f"Fast DDS profiles from {own} (the environment's): its 'service' publisher profile should bound "
                f"reliability.max_blocking_time (tinker's: {REPLY_WAIT_S * 1e3:.0f} ms), else each answer to a "
                f"client not yet matched stalls this process up to 100 ms")
    path = service_profile_file()
    environ[PROFILE_ENV] = str(path)
    return f"Fast DDS profiles from {path}: a service reply waits at most {REPLY_WAIT_S * 1e3:.0f} ms for its client"
