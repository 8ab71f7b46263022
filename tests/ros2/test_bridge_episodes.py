"""The experience bridge's join of live cycles into transitions, across an episode boundary.

One bridge node in this process (real rclpy, its own context and domain), its message callbacks fed
the messages the graph would publish, and a real ZeroMQ receiver standing in for the learner.
"""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def bridge(ros2):
    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter
    from rclpy.signals import SignalHandlerOptions

    from tinker.experience_bridge import ExperienceBridgeNode
    from tinker_core.transport import TransitionReceiver

    learner = TransitionReceiver("tcp://127.0.0.1:0")
    ctx = Context()
    rclpy.init(context=ctx, domain_id=ros2.fresh_domain(), signal_handler_options=SignalHandlerOptions.NO)
    node = ExperienceBridgeNode(context=ctx, parameter_overrides=[Parameter("learner_endpoint", value=learner.endpoint),
                                                                 Parameter("label_window", value=0.0)])  # labels off
    yield node, learner
    node.close_runtime()  # closes the bridge's ZeroMQ sender: left open, its context's term() blocks at GC
    node.destroy_node()
    rclpy.shutdown(context=ctx)
    learner.close()


def test_no_transition_joins_an_episodes_last_state_to_the_next_episode(bridge):
    from tinker.wire import array_msg

    node, learner = bridge
    # episode 0: cycles 1..4, done (success) at cycle 4; the robot then resets: episode 1 from cycle 5
    cycles = [(c, 0 if c <= 4 else 1, c == 4) for c in range(1, 10)]
    for cycle, episode, done in cycles:
        stamp = 1_000_000 * cycle
        meta = {"stamp_ns": stamp, "cycle": cycle, "episode": episode}
        obs = np.full(5, cycle, np.float32)  # the features carry their cycle number
        node._on_features(array_msg(obs, meta, double=False))
        node._on_raw(array_msg(np.full(7, 0.1 * cycle), {**meta, "version": "1"}))
        task = [-0.1 * cycle, float(done), float(done), 0.05]
        node._on_task(array_msg(np.asarray(task), meta))
    got = []
    for _ in range(20):
        got += learner.recv_many(64, timeout_ms=100)
        if len(got) >= 6:
            break
    pairs = [(int(t.obs[0]), int(t.next_obs[0]), bool(t.terminated)) for t in got]
    # cycles 1..6 are final (the bridge keeps the last 3 open); 4 -> 5 would teleport across the reset
    assert pairs == [(1, 2, False), (2, 3, False), (3, 4, True), (5, 6, False), (6, 7, False)], pairs
    assert node.transitions == 5
