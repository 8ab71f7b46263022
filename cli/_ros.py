"""A plain rclpy node for a subcommand that talks to a running graph (``tinker goal``, ``tinker flow``)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Any, Iterator


@contextmanager
def ros_node(prefix: str) -> Iterator[tuple[Any, Any]]:
    """``(node, executor)``: a node named ``prefix_PID`` on a single-threaded executor, everything shut down after.
    rclpy installs no signal handlers: Ctrl-C stays the command's own (a KeyboardInterrupt)."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node(f"{prefix}_{os.getpid()}")
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    try:
        yield node, ex
    finally:
        ex.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
