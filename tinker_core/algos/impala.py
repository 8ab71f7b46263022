"""IMPALA (Espeholt et al. 2018): actors collect trajectories with a possibly stale policy and send them
through a bounded queue; the learner corrects the policy lag with V-trace and updates one actor-critic.

``IMPALA("CartPole-v1", IMPALAConfig(num_actors=2)).learn(100_000)`` starts the actors (threads here,
or Ray actors with ``backend="ray"``, on a cluster with ``ray_address``), takes ``batch_trajectories``
trajectories per update, publishes the new weights, and stops the actors when done. ``mode="sync"``
makes the actors wait for the newest weights every round (policy lag 0); ``mode="async"`` lets them
run ahead, pulling weights every ``pull_every`` unrolls. The lag of every trajectory is kept in
``algo.lag`` (`LagStats`) and logged. Save/load, export and deploy are the other algorithms'
(`Algorithm`): the networks are PPO's (a categorical or Gaussian actor and a value MLP). ``policy_loss="clip"``
replaces IMPALA's policy gradient by PPO's clipped surrogate on V-trace advantages (as asynchronous PPO); with
`tinker_core.hierarchy.option_env.OptionEnv` around the env, the actors run a hierarchy's high level over scripted
skills (configs/impala_skirmish.yaml). Map or image observations go through any encoder of `tinker_core.nn`
(``perception``); float map planes default to the multi-scale spatial one (`tinker_core.nn.spatial`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from tinker_core.algos.base import Algorithm, AlgoConfig, Callback
from tinker_core.algos.optim import make_adam, update_scope
from tinker_core.algos.actor_critic import ActorCritic
from tinker_core.algos.networks import seq_forward
from tinker_core.algos.vec_env import EpisodeInfo
from tinker_core.algos.vtrace import vtrace
from tinker_core.algos.hppo import clipped_surrogate
from tinker_core.errors import ConfigError

MODES = ("async", "sync")
BACKENDS = ("local", "ray")
POLICY_LOSSES = ("vtrace", "clip")


@dataclass
class IMPALAConfig(AlgoConfig):
    learning_rate: float = 1e-3
    """Adam learning rate."""
    net_arch: list[int] = None  # type: ignore[assignment]
    """Hidden widths of the policy and value MLPs (default [64, 64])."""
    activation: str = "tanh"
    """Nonlinearity of the MLPs."""
    mode: str = "async"
    """"async": actors never wait for weights (lag > 0, corrected by V-trace); "sync": before each
    round actors wait for the weights of the learner's last update (lag 0)."""
    backend: str = "local"
    """"local": actors on threads in this process; "ray": Ray actors (local Ray or ``ray_address``)."""
    ray_address: str | None = None
    """Ray cluster address when Ray is not initialized yet (None: start a local Ray)."""
    num_actors: int = 2
    """Actors collecting experience."""
    actor_cpus: float = 1.0
    """Ray CPUs reserved per actor (below 1 to run more actors than cores)."""
    envs_per_actor: int = 1
    """Envs each actor steps in lockstep (batched acting)."""
    unroll_length: int = 32
    """Env steps per trajectory (per env)."""
    batch_trajectories: int = 4
    """Trajectories per learner update (sync mode: a multiple of num_actors)."""
    queue_size: int = 8
    """Trajectories the queue holds; a full queue blocks the actors (nothing is dropped)."""
    pull_every: int = 1
    """Async mode: unrolls between two pulls of the newest weights."""
    publish_every: int = 1
    """Learner updates between two weight publishes (async mode; sync publishes every update)."""
    rho_bar: float = 1.0
    """V-trace truncation of the importance weights in the value targets."""
    c_bar: float = 1.0
    """V-trace truncation of the trace coefficients."""
    pg_rho_bar: float = 1.0
    """V-trace truncation of the importance weights in the policy-gradient advantages."""
    vtrace_lambda: float = 1.0
    """V-trace lambda (the paper's remark 5)."""
    policy_loss: str = "vtrace"
    """"vtrace": IMPALA's policy gradient, -log pi(a|x) times the V-trace advantages; "clip": PPO's clipped
    surrogate on the ratio pi/mu to the behaviour policy, with the V-trace advantages r + gamma v' - V(x)
    (standardized per batch), as in asynchronous PPO (APPO): one gradient step per batch."""
    clip_range: float = 0.2
    """PPO's ratio clipping with ``policy_loss: clip``."""
    n_epochs: int = 1
    """Passes over each batch of trajectories (PPO's epochs; 1: IMPALA's one gradient step per batch). The V-trace
    targets and advantages are computed once per batch, with the weights the update starts from."""
    minibatch_size: int = 0
    """Steps per gradient step within a pass (0: the whole batch, ``unroll_length * envs_per_actor *
    batch_trajectories`` steps, in one step)."""
    vf_coef: float = 0.5
    """Value loss coefficient (on 0.5 * squared error)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    max_grad_norm: float = 40.0
    """Gradient clipping (global norm)."""
    get_timeout_s: float = 120.0
    """Learner: seconds without a trajectory before it gives up (TransportError naming the actors)."""

    def __post_init__(self) -> None:
        if self.net_arch is None:
            self.net_arch = [64, 64]
        super().__post_init__()
        if self.mode not in MODES:
            raise ConfigError(f"IMPALAConfig.mode: expected one of {MODES}, got {self.mode!r}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"IMPALAConfig.backend: expected one of {BACKENDS}, got {self.backend!r}")
        for name in ("num_actors", "envs_per_actor", "unroll_length", "batch_trajectories", "queue_size",
                     "pull_every", "publish_every", "n_epochs"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"IMPALAConfig.{name}: expected >= 1, got {getattr(self, name)!r}")
        if self.mode == "sync" and self.batch_trajectories % self.num_actors:
            raise ConfigError(f"IMPALAConfig.batch_trajectories: sync mode needs a multiple of num_actors="
                              f"{self.num_actors} (each actor gives the same share per round), got {self.batch_trajectories}")
        if int(self.minibatch_size) < 0:
            raise ConfigError(f"IMPALAConfig.minibatch_size: expected >= 0 (0: the whole batch), got {self.minibatch_size}")
        if self.actor_cpus < 0:
            raise ConfigError(f"IMPALAConfig.actor_cpus: expected >= 0, got {self.actor_cpus}")
        for name in ("rho_bar", "c_bar", "pg_rho_bar"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"IMPALAConfig.{name}: expected > 0, got {getattr(self, name)!r}")
        if not 0.0 <= self.vtrace_lambda <= 1.0:
            raise ConfigError(f"IMPALAConfig.vtrace_lambda: expected 0..1, got {self.vtrace_lambda}")
        if self.policy_loss not in POLICY_LOSSES:
            raise ConfigError(f"IMPALAConfig.policy_loss: expected one of {POLICY_LOSSES}, got {self.policy_loss!r}")
        if not self.clip_range > 0:
            raise ConfigError(f"IMPALAConfig.clip_range: expected > 0, got {self.clip_range}")
        if self.normalize_obs:
            raise ConfigError("IMPALAConfig.normalize_obs: not supported (actors and learner would need one shared "
                              "running statistic); normalize in the env instead")
        if self.n_envs != 1:
            raise ConfigError(f"IMPALAConfig.n_envs: the learner steps no envs (set envs_per_actor), got {self.n_envs}")


def _env_factory(src: Any, env_kwargs: dict) -> Callable[[], Any] | None:
    """A picklable factory the actors build their envs with, from what the learner was given."""
    import gymnasium as gym

    if isinstance(src, str):
        try:  # the spec names its entry point as "module:Class": a fresh Ray process imports it (tinker/ ids too)
            return functools.partial(gym.make, gym.spec(src), **env_kwargs)
        except gym.error.Error:
            return functools.partial(gym.make, src, **env_kwargs)
    if isinstance(src, gym.Env):
        if src.spec is None:
            raise ConfigError("IMPALA: the actors need an env id or a factory to make their envs, got an env without a spec")
        return functools.partial(gym.make, src.spec.id, **{**src.spec.kwargs, **env_kwargs})
    if callable(src) and not isinstance(src, tuple):
        return src
    return None


def clip_advantages(vs: torch.Tensor, next_values: torch.Tensor, values: torch.Tensor, rewards: torch.Tensor,
                    discounts: torch.Tensor, episode_ends: torch.Tensor) -> torch.Tensor:
    """``r_t + gamma_t v'_t - V(x_t)`` (time-major ``[T, B]``): the V-trace advantage without its importance
    weight (the clipped surrogate carries the ratio), ``v'_t`` = ``v_{t+1}`` inside an episode, ``V(x'_t)`` at an
    end or at the window's last step."""
    nxt = torch.cat([vs[1:], next_values[-1:]], 0)
    nxt = torch.where(episode_ends > 0, next_values, nxt)
    return rewards + discounts * nxt - values


class IMPALA(ActorCritic, Algorithm):
    """Importance-weighted actor-learner: V-trace actor-critic fed by asynchronous actors."""

    algo_name = "impala"
    config_class = IMPALAConfig
    config: IMPALAConfig

    def __init__(self, env_or_specs: Any, config: IMPALAConfig | None = None, **kw: Any):
        super().__init__(env_or_specs, config, **kw)
        self.env_factory = _env_factory(env_or_specs, self.env_kwargs)
        if self.env_factory is None and self.env_config is not None:  # reloaded: the env the checkpoint records
            self.env_factory = self.env_config.make
        from tinker_core.impala.pool import LagStats

        self.lag = LagStats()
        self.pool: Any = None
        self.actor_stats: list[dict] = []
        self.env_params: dict[str, float] = {}
        self.inner_env_steps = 0
        """Steps of the envs inside the actors' envs in the trajectories learned from (`Trajectory.inner_steps`:
        with OptionEnv, the primitive env steps behind the decisions in ``num_timesteps``)."""

    def _build_networks(self) -> None:
        self._build_actor_critic()

    def _build_optimizers(self) -> None:
        self.opt = make_adam([p for p in self.parameters() if p.requires_grad], self.config.learning_rate)

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"policy": self.opt}

    def _settable(self) -> dict[str, Callable[[float], None]]:
        return {"lr": self.set_learning_rate, "ent_coef": lambda v: setattr(self.config, "ent_coef", float(v))}

    # -- acting -------------------------------------------------------------------------------------
    def _act(self, obs: Any, deterministic: bool) -> np.ndarray:
        feat = self.perception(obs)
        if deterministic:
            a = self.pi.logits(feat).argmax(-1) if self.discrete else self.pi.mean(feat)
        else:
            a = self._sample(feat)[0]
        return self._to_env(a)

    def _sample(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """An exploring action (0-based index, or unclipped) and its log-probability."""
        if self.discrete:
            logits = seq_forward(self.pi.logits, feat)
            u = torch.rand(logits.shape, generator=self.gen).to(logits.device)
            a = torch.argmax(logits - torch.log(-torch.log(u.clamp_min(1e-20))), dim=-1)  # Gumbel-max
            return a, torch.log_softmax(logits, -1).gather(-1, a.unsqueeze(-1)).squeeze(-1)
        mu = self.pi.mean_action(feat)
        eps = torch.randn(mu.shape, generator=self.gen).to(mu.device)
        log_std = self.pi.log_std
        logp = (-0.5 * eps.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        return mu + log_std.exp() * eps, logp

    def _to_env(self, a: torch.Tensor) -> np.ndarray:
        if self.discrete:
            return self._env_action(a)
        return self._env_action(torch.minimum(torch.maximum(a, self.act_low), self.act_high))

    def act_logp(self, obs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For a batch of raw observations: (env actions, sampled actions as stored, their log-probs)."""
        with torch.no_grad():
            a, logp = self._sample(self.perception(self._obs_to_tensor(obs)))
            return self._to_env(a), a.cpu().numpy(), logp.cpu().numpy()

    # -- the learner --------------------------------------------------------------------------------
    def weights(self) -> dict[str, np.ndarray]:
        """The network state the actors load (CPU numpy copies)."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self.state_dict().items()}

    def set_env_param(self, name: str, value: float) -> None:
        """Set ``name`` on every actor's envs (``env.unwrapped.set_curriculum`` or the attribute): a
        curriculum's level. It travels with the next weights the actors pull."""
        self.env_params[str(name)] = float(value)

    def actor_payload(self) -> dict:
        """What the actors pull: {"state": weights, "env_params": the curriculum's settings}."""
        return {"state": self.weights(), "env_params": dict(self.env_params)}

    def _publish(self) -> None:
        self.pool.publish(self.num_updates, self.actor_payload())

    def update_from_trajectories(self, trajs: list) -> dict:
        """One learner update from trajectories (`tinker_core.impala.Trajectory`): V-trace targets and advantages
        with the current weights, then ``n_epochs`` passes over the batch in minibatches of ``minibatch_size``."""
        from tinker_core.impala.trajectory import TrajectoryBatch

        c = self.config
        b = TrajectoryBatch.of(trajs)
        T, B = b.shape
        n = T * B
        lags = self.num_updates - b.policy_versions
        self.lag.add([self.num_updates - t.policy_version for t in trajs])
        flat = lambda x: (({k: v.reshape(n, *v.shape[2:]) for k, v in x.items()}) if isinstance(x, dict)
                          else x.reshape(n, *x.shape[2:]))
        obs = self._obs_to_tensor(flat(b.obs))
        nxt = self._obs_to_tensor(flat(b.next_obs))
        dev = self.device
        if self.discrete:
            act = torch.as_tensor(b.actions.reshape(n), dtype=torch.long, device=dev)
        else:
            act = torch.as_tensor(b.actions.reshape(n, -1), dtype=torch.float32, device=dev)
        tt = lambda x: torch.as_tensor(np.asarray(x, np.float32), device=dev)
        term, trunc = tt(b.terminated), tt(b.truncated)
        mu_logp = tt(b.behaviour_log_probs)
        with torch.no_grad():  # the targets, once per batch (as PPO's GAE once per rollout)
            feat = self.perception(obs)
            logp0, _ = self.pi.log_prob_entropy(feat, act)
            values0 = seq_forward(self.vf, feat).reshape(T, B)
            next_values = seq_forward(self.vf, self.perception(nxt)).reshape(T, B)
            vt = vtrace(mu_logp, logp0.reshape(T, B), tt(b.rewards), values0, next_values, c.gamma * (1.0 - term),
                        torch.maximum(term, trunc), rho_bar=c.rho_bar, c_bar=c.c_bar, pg_rho_bar=c.pg_rho_bar,
                        lambda_=c.vtrace_lambda)
            if c.policy_loss == "clip":
                adv = clip_advantages(vt.vs, next_values, values0, tt(b.rewards), c.gamma * (1.0 - term),
                                      torch.maximum(term, trunc)).reshape(-1)
            else:
                adv = vt.pg_advantages.reshape(-1)
            targets = vt.vs.reshape(-1)
            greedy = self._greedy_fractions(feat)
        mb = n if c.minibatch_size <= 0 else min(int(c.minibatch_size), n)
        sums = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "grad_norm": 0.0, "clip_fraction": 0.0}
        steps = 0
        self.train(True)
        with update_scope():
            for _ in range(int(c.n_epochs)):
                order = torch.randperm(n, generator=self.gen).to(dev) if mb < n else torch.arange(n, device=dev)
                for s in range(0, n, mb):
                    i = order[s:s + mb]
                    feat = self.perception(obs[i] if not isinstance(obs, dict) else {k: v[i] for k, v in obs.items()})
                    logp, ent = self.pi.log_prob_entropy(feat, act[i])
                    values = seq_forward(self.vf, feat).reshape(-1)
                    if c.policy_loss == "clip":
                        pg_loss = clipped_surrogate(logp, mu_logp.reshape(-1)[i], adv[i], c.clip_range)
                        with torch.no_grad():
                            ratio = (logp - mu_logp.reshape(-1)[i]).exp()
                            sums["clip_fraction"] += float(((ratio - 1.0).abs() > c.clip_range).float().mean())
                    else:
                        pg_loss = -(logp * adv[i]).mean()
                    v_loss = 0.5 * (targets[i] - values).square().mean()
                    entropy = ent.mean()
                    loss = pg_loss + c.vf_coef * v_loss - c.ent_coef * entropy
                    self.opt.zero_grad(set_to_none=True)
                    loss.backward()
                    gn = torch.nn.utils.clip_grad_norm_(self.parameters(), c.max_grad_norm)
                    self.opt.step()
                    for k, v in (("policy_loss", pg_loss), ("value_loss", v_loss), ("entropy", entropy), ("grad_norm", gn)):
                        sums[k] += float(v.detach())
                    steps += 1
        self.num_updates += 1
        self.num_timesteps += n
        self.inner_env_steps += sum(t.inner_steps for t in trajs)
        m = {k: v / steps for k, v in sums.items()}
        if c.policy_loss != "clip":
            del m["clip_fraction"]
        m.update({"rho_mean": float(vt.rhos.mean()), "lag_mean": float(lags.mean()), "lag_max": float(lags.max()),
                  "gradient_steps": float(steps), "return_target_mean": float(targets.mean()), **greedy})
        if self.discrete:
            counts = np.bincount(b.actions.reshape(-1).astype(np.int64), minlength=self.n_actions)
            m.update({f"action_frac_{a}": float(x) for a, x in enumerate(counts / n)})
        self._metrics = m
        return dict(m)

    def _greedy_fractions(self, feat: torch.Tensor) -> dict[str, float]:
        """Discrete actions: the share of the batch's states where each action is the most probable one (what a
        deterministic policy would do there); {} for continuous actions."""
        if not self.discrete:
            return {}
        logits = seq_forward(self.pi.logits, feat)
        counts = torch.bincount(logits.argmax(-1).reshape(-1), minlength=logits.shape[-1]).float()
        return {f"greedy_frac_{a}": float(x) for a, x in enumerate(counts / counts.sum())}

    # -- the learn loop -----------------------------------------------------------------------------
    def start_actors(self) -> Any:
        """Start the actor pool (threads or Ray actors) and publish the current weights to it."""
        from tinker_core.impala.pool import ActorPool

        if self.env_factory is None:
            raise ConfigError("IMPALA: built from specs only; give it an env id, an env or an env factory for the actors")
        if self.pool is None:
            self.pool = ActorPool(self.env_factory, (self.obs_spec, self.action_spec), self.config,
                                  seed=self.config.seed + 1000 * self.num_updates)
            self._publish()
        return self.pool

    def stop_actors(self) -> list[dict]:
        if self.pool is None:
            return []
        pool, self.pool = self.pool, None
        self.actor_stats = pool.close()
        return self.actor_stats

    def learn(self, total_timesteps: int, callback: Callback | None = None, progress: bool = True, *,
              out_dir: str | Path | None = None, checkpoint_every: int = 0, resume: bool = False,
              tensorboard: bool = True) -> "IMPALA":
        """Train on ``total_timesteps`` env steps of actor experience (see `Algorithm.learn`); the
        actors run for the call and are stopped at its end."""
        self.start_actors()
        self._last_obs = None  # the learner steps no env; checkpoints hold no env state
        try:
            super().learn(total_timesteps, callback, progress, out_dir=out_dir, checkpoint_every=checkpoint_every,
                          resume=resume, tensorboard=tensorboard)
        finally:
            self.stop_actors()
        return self

    def _iteration(self) -> None:
        c = self.config
        trajs = self.pool.get(c.batch_trajectories, c.get_timeout_s)
        eps = [EpisodeInfo(r, n, s) for t in trajs for (r, n, s) in t.episodes]
        self.update_from_trajectories(trajs)
        if c.mode == "sync" or self.num_updates % c.publish_every == 0:
            self._publish()
        self.vec_env.finished.extend(eps)  # learn() records them and hands them to its callback
        self._last_obs = None

    def _log_point(self) -> None:
        s = self.lag.summary()
        if s.get("count"):
            self._metrics.update({"lag_p50": s["p50"], "lag_p99": s["p99"]})
        super()._log_point()

    # -- deploy, checkpoints ------------------------------------------------------------------------
    def _extra_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        return {"lag_histogram": {str(k): int(v) for k, v in self.lag.counts.items()},
                "env_params": dict(self.env_params), "inner_env_steps": int(self.inner_env_steps)}, {}

    def _load_extra_state(self, meta: dict, tensors: Any) -> None:
        self.env_params = {str(k): float(v) for k, v in meta.get("env_params", {}).items()}
        self.inner_env_steps = int(meta.get("inner_env_steps", 0))
        self.lag.counts.clear()
        self.lag.counts.update({int(k): int(v) for k, v in meta.get("lag_histogram", {}).items()})

    def close(self) -> None:
        self.stop_actors()
        super().close()


__all__ = ["IMPALA", "IMPALAConfig"]
