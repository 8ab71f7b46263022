"""The rollout workers and the learner as a graph, described like the robot loop (`tinker_core.loop.graph`).

`ACTOR_LEARNER` is the training side's graph: rollout workers (threads or Ray actors, `RolloutWorker`) send
transitions to the learner and get its parameters back, both over ZeroMQ; they learn where from the running learner
(its control request ``join``: `tinker_core.learner.control.join`). The learner is a stage of two graphs: this
one and `ROBOT_LOOP` (the experience bridge's transitions in, gated bundles out), and both check their ports where
they open their sockets. `learner_edges` names the learner's edges over both, for its flow monitor
(``ctl status``'s ``flow``, ``tinker flow --learner``).
"""

from __future__ import annotations

from tinker_core.loop.graph import ROBOT_LOOP, Edge, LoopGraph

LEARNER = "learner"
WORKER = "rollout_worker"

ACTOR_LEARNER = (
    LoopGraph("actor_learner")
    .add(WORKER, "env steps with the newest parameters -> transitions (threads or Ray actors)", node=False)
    .add(LEARNER, "transitions -> gradient updates -> parameters", node=False)
    .connect(WORKER, "transitions", LEARNER, transport="zmq", does="the workers' experience (replay source 'sim')")
    .connect(LEARNER, "params", WORKER, transport="zmq", does="the newest parameters, as a saved algorithm file")
)

GRAPHS = (ROBOT_LOOP, ACTOR_LEARNER)
"""Every graph the learner is a stage of."""


def learner_edges() -> dict[str, str]:
    """Each port the learner sends or receives, over every graph in `GRAPHS`, with its ends (several sources of one
    port joined: the bridge and the workers both send ``transitions``)."""
    found: dict[str, list[Edge]] = {}
    for g in GRAPHS:
        for e in (*g.inputs(LEARNER), *g.outputs(LEARNER)):
            found.setdefault(e.port, []).append(e)
    return {port: f"{', '.join(dict.fromkeys(e.source for e in es))} -> "
                  f"{', '.join(dict.fromkeys(t for e in es for t in e.targets))}" for port, es in found.items()}
