"""A std_srvs/Trigger server in its own process, timing its answers (tests/ros2/test_loop_runtime.py).

    python reply_server.py SERVICE PROFILE(tinker|default) REQUESTS

Answers REQUESTS requests (at most TIMEOUT_S), then prints one JSON line: each answer's send time (s)
and the longest gap a second Python thread of the process saw (what the loop of a node would miss).
``tinker`` applies `tinker.dds_profile.use_loop_profile` before ``rclpy.init``, as every tinker node does.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import warnings

TIMEOUT_S = 30.0


def main(service: str, profile: str, requests: int) -> None:
    if profile == "tinker":
        from tinker.dds_profile import use_loop_profile

        use_loop_profile()
    import rclpy
    from std_srvs.srv import Trigger

    warnings.simplefilter("ignore", RuntimeWarning)  # rclpy's 'failed to send response (timeout)'
    rclpy.init()
    node = rclpy.create_node("tinker_test_reply_server")
    srv = node.create_service(Trigger, service, lambda req, resp: resp)
    sends: list[float] = []
    send = srv.send_response

    def timed(response, header) -> None:
        t = time.perf_counter()
        send(response, header)
        sends.append(time.perf_counter() - t)

    srv.send_response = timed
    gaps, stop = [0.0], threading.Event()

    def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    threading.Thread(target=ticker, daemon=True).start()
    print("ready", flush=True)
    end = time.monotonic() + TIMEOUT_S
    while len(sends) < requests and time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    stop.set()
    print(json.dumps({"sends_s": sends, "max_gap_s": max(gaps)}), flush=True)
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
