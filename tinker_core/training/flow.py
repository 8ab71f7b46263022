"""The training loop as a graph: its two edges, checked and measured as every other runtime's are.

`TRAINING` declares the in-process training loop like `tinker_core.loop.graph.ROBOT_LOOP` and
`tinker_core.learner.graph.ACTOR_LEARNER`: the vector env sends observations to the algorithm, the algorithm sends
actions back (both in the same process: ``transport="process"``). `WatchedVecEnv` stands between them in every
algorithm's ``learn``: it checks the algorithm's specs against the env's where they meet (refused, naming the edge,
before the first step: a checkpoint resumed on another env), checks every batch that crosses (layout, dtype, finite
values and rewards: a NaN from the env or an exploding actor stops training with a `DivergenceError` naming the edge,
at the step it appears rather than at the next log point), and measures both edges with a `FlowMonitor`:
``env->algorithm`` times what the algorithm does with the observations until its next actions (acting, storing,
updating), ``algorithm->env`` the env's step.
"""

from __future__ import annotations

import math
import time
from typing import Any, Mapping

import numpy as np

from tinker_core.diagnostics import DivergenceError
from tinker_core.errors import ValidationError
from tinker_core.loop.graph import LoopGraph
from tinker_core.monitor import FlowMonitor, payload_bytes
from tinker_core.spec import AnySpec, DictSpec, Spec
from tinker_core.validator import Edge, Validator

ENV, ALGORITHM = "env", "algorithm"

TRAINING = (
    LoopGraph("training")
    .add(ENV, "the vector env (observation assembly and the SafetyWrapper inside a sim env)", node=False)
    .add(ALGORITHM, "act on the observations, store the transitions, update the networks", node=False)
    .connect(ENV, "obs", ALGORITHM, every_cycle=True, transport="process",
             does="a batch of observations (one per env), with rewards and episode ends")
    .connect(ALGORITHM, "action", ENV, every_cycle=True, transport="process", does="a batch of actions")
)

OBS_EDGE = Edge(ENV, ALGORITHM, "obs")
ACTION_EDGE = Edge(ALGORITHM, ENV, "action")


class WatchedVecEnv:
    """``vec`` (a `tinker_core.algos.vec_env.VecEnv`) with its edges to the algorithm checked and measured; anything
    else is the vector env's own (``n``, ``envs``, ``pop_finished`` ...)."""

    def __init__(self, vec: Any, obs_spec: AnySpec, action_spec: AnySpec, monitor: FlowMonitor | None = None):
        Validator.check_edge(OBS_EDGE, vec.obs_spec, obs_spec)
        Validator.check_edge(ACTION_EDGE, action_spec, vec.action_spec)
        self.vec, self.obs_spec, self.action_spec = vec, obs_spec, action_spec
        self.monitor = monitor or FlowMonitor()
        self._obs_stats = self.monitor.edge(OBS_EDGE.name)
        self._act_stats = self.monitor.edge(ACTION_EDGE.name)
        self._obs_bytes = 0
        self._returned = 0.0  # when the last observations went to the algorithm (0: none since a reset)

    def reset(self, seed: int | None = None) -> Any:
        obs = self.vec.reset(seed=seed)
        check_batch(self.obs_spec, obs, OBS_EDGE.where)
        self._obs_bytes, self._returned = payload_bytes(obs), time.perf_counter()
        return obs

    def step(self, actions: Any) -> tuple:
        t0 = time.perf_counter()
        if self._returned:
            self._obs_stats.add(self._obs_bytes, t0 - self._returned, t0)
        check_batch(self.action_spec, actions, ACTION_EDGE.where)
        out = self.vec.step(actions)
        obs, rewards = out[0], out[1]
        check_batch(self.obs_spec, obs, OBS_EDGE.where)
        if not math.isfinite(rewards.sum()):  # NaN and inf propagate through the sum
            bad = np.flatnonzero(~np.isfinite(np.asarray(rewards, dtype=np.float64)))
            got = np.asarray(rewards)[bad].tolist()
            raise DivergenceError(f"{ALGORITHM}.reward: expected finite rewards, got {got} from env(s) {bad.tolist()}; "
                                  "training stopped (the last good checkpoint is kept)")
        t1 = time.perf_counter()
        self._act_stats.add(actions.nbytes, t1 - t0, t1)
        self._obs_bytes, self._returned = payload_bytes(obs), t1
        return out

    def __getattr__(self, name: str) -> Any:
        if name == "vec":  # not set yet (a copy being built): no recursion through the lookup below
            raise AttributeError(name)
        return getattr(self.vec, name)


def check_batch(spec: AnySpec, value: Any, where: str) -> None:
    """`Spec.check` of a batch without its bounds (an env's space may be looser than its values, and the algorithm
    handles actions at a bound); a float array of another width than the spec's (a float64 observation of a float32
    space, which the algorithm converts anyway, as SB3's vector env does) is checked as the spec's width."""
    try:
        try:
            spec.check(value, where, batched=True, bounds=False)
        except ValidationError:
            loose = _spec_floats(spec, value)
            if loose is value:
                raise
            spec.check(loose, where, batched=True, bounds=False)
    except ValidationError as e:
        if not _finite(value):  # NaN or inf: what the divergence checks stop training for, found at its edge
            raise DivergenceError(f"{e}; training stopped (the last good checkpoint is kept)") from e
        raise


def _finite(value: Any) -> bool:
    if isinstance(value, Mapping):
        return all(_finite(v) for v in value.values())
    a = np.asarray(value)
    return a.dtype.kind not in "fc" or bool(np.isfinite(a).all())


def _spec_floats(spec: AnySpec, value: Any) -> Any:
    if isinstance(spec, DictSpec) and isinstance(value, Mapping):
        out = {k: _spec_floats(spec.fields[k], v) if k in spec.fields else v for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if (isinstance(spec, Spec) and isinstance(value, np.ndarray) and value.dtype.kind == "f"
            and np.dtype(spec.dtype).kind == "f" and value.dtype != np.dtype(spec.dtype)):
        return value.astype(spec.dtype)
    return value
