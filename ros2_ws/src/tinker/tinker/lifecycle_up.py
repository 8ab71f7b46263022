"""`bring_to_active`: a lifecycle node that was started again, configured and activated; and ``lifecycle_up``,
the command the launch file runs for it (``ros2 run tinker lifecycle_up policy``).

A node process that dies stays in DDS discovery until its participant's lease ends. A lifecycle request sent in
that time may reach only the dead node, and a reply to a client the new node has not matched yet is dropped
(`tinker.dds_profile`): one ``ChangeState`` event, as ``ros2 launch`` sends it, then waits forever, and the
restarted node stays unconfigured (seen with the policy killed under ``ros2 launch``). So the node's state is asked,
acted on, and asked again, each call with a short timeout, until it is active. `tinker.bringup.Graph.restart`
does the same through its own client.
"""

from __future__ import annotations

import sys
import time
from typing import Callable

from tinker_core.errors import ConfigError, TinkerError

ASK_TIMEOUT_S = 2.0
"""one state request: a lost one is asked again after this"""
CHANGE_TIMEOUT_S = 10.0
"""one transition request: configure loads the bundle (~1 s for the shipped ones)"""
NEXT = {"unconfigured": "configure", "inactive": "activate"}
"""the transition that leads from each primary state towards active"""


def change_request(label: str):
    """A ``lifecycle_msgs/srv/ChangeState`` request for transition ``label`` (configure, activate, deactivate,
    cleanup, shutdown); ConfigError naming the choices."""
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState

    ids = {"configure": Transition.TRANSITION_CONFIGURE, "activate": Transition.TRANSITION_ACTIVATE,
           "deactivate": Transition.TRANSITION_DEACTIVATE, "cleanup": Transition.TRANSITION_CLEANUP,
           "shutdown": Transition.TRANSITION_INACTIVE_SHUTDOWN}
    if label not in ids:
        raise ConfigError(f"lifecycle transition: expected one of {sorted(ids)}, got {label!r}")
    request = ChangeState.Request()
    request.transition.id = ids[label]
    return request


class LifecycleUpError(TinkerError):
    """The node did not become active: what it was, and why."""


def bring_to_active(state: Callable[[float], str], change: Callable[[str, float], bool], node: str,
                    timeout: float = 60.0, alive: Callable[[], bool] = lambda: True) -> list[str]:
    """Drive ``node`` to active: ``state(timeout)`` its state label (raising on no answer), ``change(transition,
    timeout)`` one transition (True: done; False: refused; raising on no answer). ``alive()`` False: its process
    has ended, give up. Returns the transitions made; LifecycleUpError on a refused transition or after
    ``timeout`` s."""
    done: list[str] = []
    refused: dict[str, int] = {}
    end = time.monotonic() + timeout
    last = "no answer"
    while alive():
        step = None
        try:
            last = state(ASK_TIMEOUT_S)
            if last == "active":
                return done
            step = NEXT.get(last)
            if step is not None:
                if change(step, CHANGE_TIMEOUT_S):
                    done.append(step)
                else:  # once may be a race (another client moved it); twice from the same state is the node's no
                    refused[last] = refused.get(last, 0) + 1
                    if refused[last] >= 2:
                        raise LifecycleUpError(f"{node}: {step} was refused in state {last} (its log says why)")
        except LifecycleUpError:
            raise
        except Exception as e:  # no answer yet: a lost request, or the node still starting
            last = f"no answer ({e})"
        if time.monotonic() > end:
            raise LifecycleUpError(f"{node}: not active after {timeout:.0f} s; last state: {last}")
        if step is None:
            time.sleep(0.2)  # starting, or a transition in progress (configuring, activating): ask again shortly
    raise LifecycleUpError(f"{node}: its process ended before it became active")


def main(argv: list[str] | None = None) -> int:
    """``lifecycle_up NODE [--timeout S]``: NODE (in this process's namespace) configured and activated."""
    import argparse

    import rclpy
    from lifecycle_msgs.srv import ChangeState, GetState
    from rclpy.utilities import remove_ros_args

    from tinker.dds_profile import use_loop_profile

    argv = sys.argv if argv is None else argv
    p = argparse.ArgumentParser(prog="lifecycle_up", description=__doc__.split("\n\n")[0])
    p.add_argument("node", help="the lifecycle node, relative to this process's namespace (e.g. policy)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds until it must be active")
    args = p.parse_args(remove_ros_args(argv)[1:])
    use_loop_profile()  # as the loop's nodes: a participant joining over shared memory stalls the loop
    rclpy.init(args=argv)
    node = rclpy.create_node(f"lifecycle_up_{args.node.strip('/').replace('/', '_')}")
    name = f"{node.get_namespace().rstrip('/')}/{args.node.strip('/')}"
    get_state = node.create_client(GetState, f"{name}/get_state")
    change_state = node.create_client(ChangeState, f"{name}/change_state")

    def call(client, request, timeout: float):
        if not client.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"{client.srv_name} not available")
        future = client.call_async(request)
        rclpy.spin_until_future_complete(node, future, timeout_sec=timeout)
        if not future.done():
            future.cancel()
            raise TimeoutError(f"{client.srv_name} did not answer within {timeout:.0f} s")
        return future.result()

    def change(step: str, timeout: float) -> bool:
        return bool(call(change_state, change_request(step), timeout).success)

    try:
        made = bring_to_active(lambda t: call(get_state, GetState.Request(), t).current_state.label, change, name,
                               args.timeout)
        node.get_logger().info(f"{name} active" + (f" ({', '.join(made)})" if made else " already"))
        return 0
    except LifecycleUpError as e:
        node.get_logger().error(str(e))
        return 1
    finally:
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()


if __name__ == "__main__":
    raise SystemExit(main())
