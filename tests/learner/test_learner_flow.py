"""The learner's ZeroMQ edges are measured like the ROS topics: rate, bytes and latency per edge in ``ctl status``.

A real learner process (`tinker learner`), real ZeroMQ senders: one as the experience bridge sends (each transition
stamped with the robot state it ends in), one as a rollout worker sends (a batch of 64, no stamps).
"""

from __future__ import annotations

import time

import pytest

from tinker_core.errors import PipelineError
from tinker_core.learner.graph import ACTOR_LEARNER, learner_edges

STALE_NS = 30_000_000
"""the bridge's transitions are sent 30 ms after the state they end in: their latency is at least that"""


def test_ctl_status_counts_each_edge_of_the_learner(learner_factory, pendulum):
    from tinker_core.transport import TransitionSender

    lp = learner_factory(warmup=10_000).start()  # no update: only what crossed the edges is counted
    bridge, worker = TransitionSender(lp.cfg["transitions_endpoint"]), TransitionSender(lp.cfg["transitions_endpoint"])
    try:
        stamped = pendulum(20, source="real")
        for t in stamped:
            t.info["stamp_ns"] = time.time_ns() - STALE_NS
            assert bridge.send(t)
        assert worker.send_many(pendulum(64, seed=1)) == 64
        status = lp.wait(lambda s: s["receiver"]["received"] >= 84, timeout=30)
    finally:
        bridge.close()
        worker.close()
        lp.stop()
    flow = status["flow"]
    assert set(flow) == {"transitions", "bundles", "params"}, flow
    assert flow["bundles"]["messages"] == 0 and flow["bundles"]["ends"] == "learner -> experience_bridge"  # none gated
    t = flow["transitions"]
    assert t["messages"] == 84 and t["ends"] == "experience_bridge, rollout_worker -> learner"
    assert t["bytes"] == bridge.bytes_sent + worker.bytes_sent
    # the p50 is of the 20 stamped transitions only (the worker's carry no stamp: unknown, left out)
    assert STALE_NS / 1e3 <= t["latency_p50_us"] < STALE_NS / 1e3 + 5e6, t
    p = flow["params"]  # the parameters sent when the learner opened, again every REPUBLISH_SECONDS
    assert p["messages"] >= 1 and p["bytes"] > 0 and p["ends"] == "learner -> rollout_worker"
    assert p["latency_samples"] == 0  # unknown on the sending side
    assert t["latency_samples"] == 20  # the worker's 64 carry no stamp


def test_the_learner_is_a_stage_of_both_graphs():
    assert learner_edges() == {"transitions": "experience_bridge, rollout_worker -> learner",
                               "bundles": "learner -> experience_bridge", "params": "learner -> rollout_worker"}
    assert ACTOR_LEARNER.edge("transitions").transport == ACTOR_LEARNER.edge("params").transport == "zmq"
    with pytest.raises(PipelineError, match=r"stage 'rollout_worker' cannot publish 'params'"):
        ACTOR_LEARNER.check_port("rollout_worker", "params", "out")
