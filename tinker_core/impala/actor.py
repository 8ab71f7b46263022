"""`ImpalaActor`: runs its envs with its copy of the policy and sends fixed-length trajectories, with
the behaviour log-probabilities and the policy version that made them, into the bounded queue.

When the queue is full the actor blocks (it waits, checking for stop, and counts the time as
``blocked_s``): nothing it collected is dropped, and collection slows to the learner's pace, which
is what bounds the policy lag. Asynchronous mode: the actor pulls the newest weights without waiting
every ``pull_every`` unrolls. Synchronous mode: before every round of ``unrolls_per_round`` unrolls
it waits for weights newer than the last round's, so every trajectory the learner gets was acted by
its current weights (lag 0). The same class runs on a thread or as a (threaded) Ray actor."""

from __future__ import annotations

import queue as queue_mod
import threading
import time
from typing import Any, Callable

import numpy as np
import torch

from tinker_core.algos.vec_env import VecEnv
from tinker_core.curriculum import apply_env_param
from tinker_core.errors import ConfigError
from tinker_core.impala.trajectory import Trajectory, stack_obs


class ImpalaActor:
    """One actor: ``envs_per_actor`` envs, a policy copy, a queue to fill, a store to pull weights from."""

    def __init__(self, env_factory: Callable[[], Any], specs: tuple[Any, Any], config: Any, actor_id: int,
                 trajectory_queue: Any, params: Any, sync: bool, unrolls_per_round: int = 1, seed: int = 0):
        from tinker_core.algos.impala import IMPALA  # the learner's class builds the same networks here

        cfg = type(config)(**{**config.__dict__, "device": "cpu", "torch_threads": 1})
        torch.set_num_threads(1)
        self.algo = IMPALA(specs, cfg)
        self.algo.train(False)
        self.actor_id, self.sync = int(actor_id), bool(sync)
        self.unroll_length, self.pull_every = int(cfg.unroll_length), int(cfg.pull_every)
        self.unrolls_per_round = max(1, int(unrolls_per_round))
        self.queue, self.params = trajectory_queue, params
        self.seed = int(seed) + 7919 * self.actor_id
        self.algo.gen.manual_seed(self.seed)
        self.vec = VecEnv.make(env_factory, int(cfg.envs_per_actor))
        if self.vec.obs_spec != specs[0] or self.vec.action_spec != specs[1]:
            raise ConfigError(f"ImpalaActor {actor_id}: the env gives obs {self.vec.obs_spec!r} / action "
                              f"{self.vec.action_spec!r}, the learner expects {specs[0]!r} / {specs[1]!r}")
        self.vec.action_space.seed(self.seed)
        self._obs = self.vec.reset(seed=self.seed)
        self.version = -2
        self.env_params: dict[str, float] = {}
        self._stop = threading.Event()
        self.steps = self.unrolls = self.sent = self.inner_steps = 0
        self.blocked_s = self.wait_params_s = 0.0

    # -- weights -------------------------------------------------------------------------------
    def _load(self, got: tuple[int, Any] | None) -> bool:
        if got is None:
            return False
        version, payload = got
        self.algo.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in payload["state"].items()})
        for name, value in payload.get("env_params", {}).items():
            if self.env_params.get(name) != value:
                for env in self.vec.envs:
                    apply_env_param(env, name, value)
                self.env_params[name] = value
        self.version = int(version)
        return True

    def _wait_newer(self) -> bool:
        """Block until weights newer than the held ones arrive (or stop); False when stopped."""
        t0 = time.monotonic()
        try:
            while not self._stop.is_set():
                if self._load(self.params.get(self.version, 0.2)):
                    return True
            return False
        finally:
            self.wait_params_s += time.monotonic() - t0

    # -- collection ----------------------------------------------------------------------------
    def unroll(self) -> Trajectory:
        """``unroll_length`` steps of every env with the held weights."""
        T = self.unroll_length
        inner0 = self._inner_steps()
        obs_l, next_l, act_l, logp_l = [], [], [], []
        rew = np.zeros((T, self.vec.n), np.float32)
        term = np.zeros((T, self.vec.n), bool)
        trunc = np.zeros((T, self.vec.n), bool)
        for t in range(T):
            env_a, raw_a, logp = self.algo.act_logp(self._obs)
            nxt, r, te, tr, final = self.vec.step(env_a)
            obs_l.append(self._obs)
            if te.any() or tr.any():  # the observation each step led to, before the reset
                nxt_true = [final[i] if final[i] is not None else _row(nxt, i) for i in range(self.vec.n)]
                next_l.append(stack_obs(nxt_true))
            else:
                next_l.append(nxt)
            act_l.append(raw_a)
            logp_l.append(logp)
            rew[t], term[t], trunc[t] = r, te, tr
            self._obs = nxt
        self.steps += T * self.vec.n
        eps = [(e.ret, e.length, e.success) for e in self.vec.pop_finished()]
        inner = None if inner0 is None else self._inner_steps() - inner0  # type: ignore[operator]
        self.inner_steps += T * self.vec.n if inner is None else inner
        return Trajectory(stack_obs(obs_l), np.stack(act_l), rew, term, trunc, np.stack(logp_l).astype(np.float32),
                          stack_obs(next_l), self.version, self.actor_id, eps, inner)

    def _inner_steps(self) -> int | None:
        """The envs' own step counters summed (a wrapper's ``env_steps``, e.g. OptionEnv's), None without one."""
        try:
            return sum(int(e.get_wrapper_attr("env_steps")) for e in self.vec.envs)
        except AttributeError:
            return None

    def _put(self, traj: Trajectory) -> bool:
        """Put into the queue, blocking while it is full; False when stopped first."""
        t0 = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    self.queue.put(traj, block=True, timeout=0.2)
                    self.sent += 1
                    return True
                except queue_mod.Full:
                    continue
            return False
        finally:
            self.blocked_s += time.monotonic() - t0

    def run(self, max_unrolls: int | None = None) -> dict:
        """Collect and send trajectories until `stop` (or ``max_unrolls``); returns `stats`."""
        with torch.no_grad():
            while not self._stop.is_set() and (max_unrolls is None or self.unrolls < max_unrolls):
                if self.sync:
                    if self.unrolls % self.unrolls_per_round == 0 and not self._wait_newer():
                        break
                elif self.version < -1:
                    if not self._wait_newer():  # the first weights, in either mode
                        break
                elif self.unrolls % self.pull_every == 0:
                    self._load(self.params.get(self.version, 0.0))
                traj = self.unroll()
                self.unrolls += 1
                if not self._put(traj):
                    break
        return self.stats()

    def stop(self) -> None:
        self._stop.set()

    def stats(self) -> dict:
        return {"actor": self.actor_id, "steps": self.steps, "inner_env_steps": self.inner_steps,
                "unrolls": self.unrolls, "sent": self.sent,
                "version": self.version, "blocked_s": round(self.blocked_s, 3),
                "wait_params_s": round(self.wait_params_s, 3), "env_params": dict(self.env_params)}

    def close(self) -> None:
        self.vec.close()


def _row(obs: Any, i: int) -> Any:
    return {k: v[i] for k, v in obs.items()} if isinstance(obs, dict) else obs[i]
