"""The declarative pipeline: ``Pipeline().connect(env, perception, policy, learner).run(steps)``.

Data flow per step::

    env --obs--> perception --features--> policy --action--> env
                                                    \\--> Transition --> learner

Every edge is spec-checked at ``connect`` and, with run-time validation on, every value that
crosses it. ``swap(name, module)`` replaces a module while ``run`` continues in another thread: the
new module's specs are checked first (an incompatible swap raises and the old module keeps running),
and the switch happens between two steps, so no transition is lost and counters continue.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from tinker_core.errors import PipelineError, SpecError, ValidationError
from tinker_core.module import ModuleBase
from tinker_core.monitor import EdgeStats, FlowMonitor, payload_bytes
from tinker_core.spec import DictSpec, Spec
from tinker_core.tracer import Tracer
from tinker_core.transition import Transition
from tinker_core.validator import Edge, Validator

ROLES = ("env", "perception", "policy", "learner")
_isfinite = math.isfinite


class Identity(ModuleBase):
    """Passes its input through; stands in for an absent perception module."""

    input_name = output_name = "obs"

    def __init__(self, spec: Any = None):
        super().__init__()
        self.name = "perception"
        self.input_spec = self.output_spec = spec

    def forward(self, x: Any) -> Any:
        return x


@dataclass
class RunStats:
    steps: int = 0
    episodes: int = 0
    transitions: int = 0
    episode_returns: list[float] | None = None


class Pipeline:
    """Owns modules by role, their edges, the validator, the flow monitor and the tracer."""

    def __init__(self, validate: bool = True, trace_path: str | None = None, seed: int | None = 0,
                 seed_each_episode: bool = False):
        """``seed``: the first episode's reset seed; with ``seed_each_episode``, episode k is reset with ``seed + k``
        (an evaluation's fixed episodes), otherwise later episodes go on from the env's own generator."""
        self.validator = Validator(enabled=validate)
        self.monitor = FlowMonitor()
        self.tracer = Tracer(trace_path, node="pipeline")
        self.modules: dict[str, ModuleBase] = {}
        self.seed = seed
        self.seed_each_episode = seed_each_episode
        self.reset_info: dict = {}
        """the info of the latest reset (what the episode now running started with)"""
        self.stats = RunStats(episode_returns=[])
        self._pending: dict[str, ModuleBase] = {}
        self._applied = threading.Condition()
        self._running = False
        self._stop = threading.Event()
        self._obs: Any = None
        self._ep_return = 0.0
        self.callbacks: list[Callable[[Transition, dict | None], None]] = []

    # -- building ------------------------------------------------------------------------------
    def connect(self, env: Any, perception: ModuleBase | None, policy: ModuleBase,
                learner: ModuleBase | None = None) -> "Pipeline":
        from tinker_core.env_adapter import EnvModule

        env_m = env if isinstance(env, ModuleBase) else EnvModule(env)
        env_m.name = "env"
        if perception is None:
            perception = Identity(env_m.output_spec)
        modules = {"env": env_m, "perception": perception, "policy": policy}
        if learner is not None:
            modules["learner"] = learner
        for role, m in modules.items():
            if not isinstance(m, ModuleBase):
                raise PipelineError(f"{role}: expected a ModuleBase, got {type(m).__name__}")
        for role, m in modules.items():
            m.name = role
        self._check_all(modules)
        self.modules = modules
        return self

    def edges(self, modules: dict[str, ModuleBase] | None = None) -> list[tuple[Edge, Any, Any]]:
        m = modules or self.modules
        out = [
            (Edge("env", "perception", m["perception"].input_name), m["env"].output_spec, m["perception"].input_spec),
            (Edge("perception", "policy", m["policy"].input_name), m["perception"].output_spec, m["policy"].input_spec),
            (Edge("policy", "env", m["env"].input_name), m["policy"].output_spec, m["env"].input_spec),
        ]
        learner = m.get("learner")
        if learner is not None and learner.input_spec is not None:
            ls = learner.input_spec
            out.append((Edge("env", "learner", "obs"), m["env"].output_spec, getattr(ls, "obs", None)))
            out.append((Edge("policy", "learner", "action"), m["policy"].output_spec, getattr(ls, "action", None)))
        return out

    def _check_all(self, modules: dict[str, ModuleBase]) -> None:
        for edge, produced, consumed in self.edges(modules):
            self.validator.check_edge(edge, produced, consumed)

    # -- hot swap ------------------------------------------------------------------------------
    def swap(self, role: str, module: ModuleBase, timeout: float = 10.0) -> None:
        """Replace the module in ``role``; checks specs first, then switches between two steps."""
        if role not in self.modules:
            raise PipelineError(f"swap: no module in role {role!r}; roles here: {list(self.modules)}")
        if role == "env":
            raise PipelineError("swap: the env cannot be swapped while running; build a new pipeline")
        trial = dict(self.modules)
        module.name = role
        trial[role] = module
        try:
            self._check_all(trial)
        except SpecError as e:
            raise SpecError(f"swap of {role!r} refused, the old module keeps running: {e}") from None
        with self._applied:
            if not self._running:
                self.modules[role] = module
                return
            self._pending[role] = module
            if not self._applied.wait_for(lambda: role not in self._pending or not self._running, timeout):
                if self._pending.get(role) is module:
                    del self._pending[role]  # withdrawn: the old module keeps running
                raise PipelineError(f"swap of {role!r} not applied within {timeout}s; the old module keeps running")
            if self._pending.get(role) is module:  # run ended before the swap was applied
                self.modules[role] = self._pending.pop(role)

    def _apply_pending(self) -> None:
        with self._applied:
            for role, m in self._pending.items():
                self.modules[role] = m
            self._pending.clear()
            self._applied.notify_all()

    # -- running -------------------------------------------------------------------------------
    def stop(self) -> None:
        self._stop.set()

    def run(self, steps: int | None = None, episodes: int | None = None) -> RunStats:
        """Drive ``steps`` environment steps, or until ``episodes`` more episodes have ended (whichever comes first
        where both are given); resets episodes as they end. After the last of ``episodes`` the env is not reset
        again: the next run starts with a reset."""
        if not self.modules:
            raise PipelineError("run: call connect(env, perception, policy, learner) first")
        if steps is None and episodes is None:
            raise PipelineError("run: give steps, episodes or both")
        for what, n in (("steps", steps), ("episodes", episodes)):
            if n is not None and n < 0:
                raise PipelineError(f"run: {what} must be >= 0, got {n}")
        self._stop.clear()
        with self._applied:
            self._running = True
        try:
            self._run(steps, None if episodes is None else self.stats.episodes + episodes)
        finally:
            with self._applied:
                self._running = False
                self._applied.notify_all()
            self.tracer.flush()
        return self.stats

    def _edges_now(self) -> tuple[Edge, Edge, Edge, Edge]:
        m = self.modules
        return (Edge("env", "perception", m["perception"].input_name),
                Edge("perception", "policy", m["policy"].input_name),
                Edge("policy", "env", m["env"].input_name),
                Edge("env", "learner", "transition"))

    def _plan(self) -> "_Plan":
        """Everything the loop needs per step, worked out once per connect/swap."""
        m = self.modules
        env, perception, policy, learner = m["env"], m["perception"], m["policy"], m.get("learner")
        edges = self._edges_now()
        ls = None if learner is None else learner.input_spec
        # A learner whose obs/action specs equal the ones already checked this cycle only needs
        # next_obs and reward checked; next_obs is then not checked again as the next cycle's obs.
        lean = (ls is not None and getattr(ls, "obs", None) == perception.input_spec
                and getattr(ls, "action", None) == env.input_spec)
        nb = [_nominal_bytes(s) for s in (env.output_spec, perception.output_spec, policy.output_spec)]
        nb_t = None if None in (nb[0], nb[2]) else 2 * nb[0] + nb[2] + 10  # Transition.nbytes()
        return _Plan(env, perception, policy, learner, edges, lean, ls,
                     [self.monitor.edge(e.name) for e in edges], nb, nb_t)

    def _reset(self, env: Any) -> None:
        n = self.stats.episodes
        if self.seed is None or (n and not self.seed_each_episode):
            seed = None  # later episodes go on from the env's own generator
        else:
            seed = self.seed + n if self.seed_each_episode else self.seed
        self._obs, self.reset_info = env.reset_env(seed=seed)  # type: ignore[attr-defined]

    def _run(self, steps: int | None, episode_goal: int | None) -> None:
        # The loop runs once per control cycle: everything it reads is a local, the specs are
        # checked directly, and the flow monitor is fed in blocks of ``MONITOR_EVERY`` steps.
        stats, pending, stop = self.stats, self._pending, self._stop
        tracer = self.tracer
        trace = tracer.record if tracer.enabled else None
        clock = time.perf_counter_ns
        rec: list[tuple] = []
        plan = self._plan()
        env = plan.env
        checked = None  # the value last validated as an observation (skips checking it twice)
        if episode_goal is not None and stats.episodes >= episode_goal:
            return
        if self._obs is None:
            self._reset(env)
        try:
            for _ in (range(steps) if steps is not None else itertools.count()):
                if stop.is_set():
                    break
                if pending:
                    _flush(plan, rec)
                    self._apply_pending()
                    plan = self._plan()
                    checked = None
                perception, policy, learner, env_step = plan.perception, plan.policy, plan.learner, plan.env_step
                check = self.validator.enabled
                bounds = self.validator.check_bounds
                obs = self._obs

                t0 = clock()
                if check and obs is not checked and plan.s_perc is not None:
                    plan.s_perc.check(obs, plan.w_perc, False, bounds)
                feats = perception(obs)
                t1 = clock()
                if check and plan.s_pol is not None:
                    plan.s_pol.check(feats, plan.w_pol, False, bounds)
                action = policy(feats)
                t2 = clock()
                if check and plan.s_env is not None:
                    plan.s_env.check(action, plan.w_env, False, bounds)
                next_obs, reward, term, trunc, info = env_step(action)
                t3 = clock()
                t = Transition(obs, action, float(reward), bool(term), bool(trunc), dict(info), next_obs)
                stats.steps += 1
                metrics = None
                if learner is not None:
                    ls = plan.learner_spec
                    if check and ls is not None:
                        if plan.lean:
                            ls.obs.check(next_obs, plan.w_next, False, bounds)
                            if not _isfinite(t.reward):
                                raise ValidationError(plan.w_reward, "finite reward", str(t.reward))
                            checked = next_obs
                        else:
                            ls.check(t, plan.w_learn, bounds=bounds)
                    metrics = learner(t)
                t4 = clock()
                stats.transitions += 1

                nb_obs, nb_feats, nb_act = plan.nbytes
                b_obs = nb_obs if nb_obs is not None else payload_bytes(obs)
                b_feats = nb_feats if nb_feats is not None else payload_bytes(feats)
                b_act = nb_act if nb_act is not None else payload_bytes(action)
                b_t = (plan.nbytes_t if plan.nbytes_t is not None else t.nbytes()) if learner is not None else 0
                rec.append((t0, t1, t2, t3, t4, b_obs, b_feats, b_act, b_t))
                if len(rec) >= MONITOR_EVERY:
                    _flush(plan, rec)
                if trace is not None:
                    base = time.time_ns() - (clock() - t0)
                    e_perc, e_pol, e_env, e_learn = plan.edges
                    trace(stats.steps - 1, "perception", base, t1 - t0, edge=e_perc.name, bytes=b_obs)
                    trace(stats.steps - 1, "policy", base + (t1 - t0), t2 - t1, edge=e_pol.name, bytes=b_feats)
                    trace(stats.steps - 1, "env", base + (t2 - t0), t3 - t2, edge=e_env.name, bytes=b_act)
                    if learner is not None:
                        trace(stats.steps - 1, "learner", base + (t3 - t0), t4 - t3, edge=e_learn.name, bytes=b_t)

                if self.callbacks:
                    for cb in self.callbacks:
                        cb(t, metrics)
                self._ep_return += t.reward
                if term or trunc:
                    stats.episodes += 1
                    stats.episode_returns.append(self._ep_return)  # type: ignore[union-attr]
                    self._ep_return = 0.0
                    for mod in self.modules.values():
                        mod.reset()
                    if episode_goal is not None and stats.episodes >= episode_goal:
                        self._obs = None
                        break
                    self._reset(env)
                else:
                    self._obs = next_obs
        finally:
            _flush(plan, rec)


MONITOR_EVERY = 64
"""The flow monitor is fed every this many steps (and at the end of a run or before a swap)."""


def _flush(plan: "_Plan", rec: list[tuple]) -> None:
    if not rec:
        return
    first, last = rec[0][4] * 1e-9, rec[-1][4] * 1e-9
    st_perc, st_pol, st_env, st_learn = plan.stats
    st_perc.add_many(sum(r[5] for r in rec), [(r[1] - r[0]) * 1e-9 for r in rec], first, last)
    st_pol.add_many(sum(r[6] for r in rec), [(r[2] - r[1]) * 1e-9 for r in rec], first, last)
    st_env.add_many(sum(r[7] for r in rec), [(r[3] - r[2]) * 1e-9 for r in rec], first, last)
    if plan.learner is not None:
        st_learn.add_many(sum(r[8] for r in rec), [(r[4] - r[3]) * 1e-9 for r in rec], first, last)
    rec.clear()


def _nominal_bytes(spec: Any) -> int | None:
    """Payload bytes of a value of ``spec`` when fixed by it (arrays and dicts of arrays), else None."""
    if isinstance(spec, (Spec, DictSpec)):
        return int(spec.nbytes)
    return None


@dataclass
class _Plan:
    """What one step needs, resolved once per connect/swap."""

    env: ModuleBase
    perception: ModuleBase
    policy: ModuleBase
    learner: ModuleBase | None
    edges: tuple[Edge, Edge, Edge, Edge]
    lean: bool
    learner_spec: Any
    stats: list[EdgeStats]
    nbytes: list[int | None]
    nbytes_t: int | None

    def __post_init__(self) -> None:
        e_perc, e_pol, e_env, e_learn = self.edges
        self.env_step = self.env.step  # type: ignore[attr-defined]
        self.s_perc, self.w_perc = self.perception.input_spec, e_perc.where
        self.s_pol, self.w_pol = self.policy.input_spec, e_pol.where
        if type(self.perception) is Identity and self.s_pol == self.s_perc:
            self.s_pol = None  # the observation passes through unchanged: its check on the way in covers it
        self.s_env, self.w_env = self.env.input_spec, e_env.where
        self.w_learn = e_learn.where
        self.w_next, self.w_reward = f"{e_learn.where}.next_obs", f"{e_learn.where}.reward"
