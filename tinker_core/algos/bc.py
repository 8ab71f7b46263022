"""BC with DAgger (Ross et al. 2011): imitate a queried expert, then fix the learner's own mistakes.

Round 0 is behaviour cloning: the expert drives (with a little action noise, as in DART, so the data
shows recoveries) and every visited state is labelled with the expert's action. Each DAgger round
then lets the learned policy drive, mixed per step with the expert by a decaying ``beta``; the
expert still labels every visited state, the labels join the one aggregated dataset, and the
deterministic actor is retrained on all of it by regression onto the expert's actions. The expert is
queried at every step of every episode, so a stateful expert (a state machine) stays in step.

The expert is given by the composition root (``set_expert``), so tinker_core never imports the
simulator that provides it. A run ends when its episode schedule is done
(``expert_episodes + dagger_rounds * dagger_episodes`` labelled episodes) or at ``total_timesteps``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import nn

from tinker_core.algos.base import AlgoConfig, Algorithm
from tinker_core.algos.optim import make_adam
from tinker_core.algos.buffers import _alloc, _put, _take, _to_np
from tinker_core.algos.networks import ScaledTanhHead
from tinker_core.algos.normalize import FoldedNormalize
from tinker_core.errors import ConfigError, ValidationError
from tinker_core.nn import build_perception
from tinker_core.nn.encoders import mlp
from tinker_core.spec import AnySpec

Expert = Any
"""A callable ``obs -> action`` (one env's observation, env units), or an object with ``act(obs)``;
``reset()`` is called at each episode start when it has one."""
ExpertFactory = Callable[[Any], Expert]
"""Builds one expert for one env (called with each env of the vector, so experts keep their own state)."""


@dataclass
class BCConfig(AlgoConfig):
    expert_episodes: int = 100
    """Round 0: episodes driven by the expert alone (plus ``expert_noise``), every state labelled."""
    dagger_rounds: int = 4
    """DAgger rounds after round 0 (0: plain behaviour cloning)."""
    dagger_episodes: int = 50
    """Episodes per DAgger round, driven by the learner mixed with the expert (``beta``)."""
    beta: float = 0.5
    """Per-step probability that the expert's action is executed in the first DAgger round."""
    beta_decay: float = 0.5
    """``beta`` is multiplied by this after every DAgger round (0: the learner alone from round 2 on)."""
    expert_noise: float = 0.1
    """Std of Gaussian noise on the executed expert actions (in [-1, 1] action units); labels stay clean."""
    gradient_steps: int = 2000
    """Gradient steps on the aggregated dataset after each round."""
    batch_size: int = 256
    """Minibatch size of each gradient step."""
    dataset_size: int = 200_000
    """Capacity of the aggregated dataset in labelled states (the oldest are dropped beyond it)."""
    action_weights: list[float] | None = None
    """Per action dimension weight of the squared error (None: all 1)."""
    max_grad_norm: float = 10.0
    """Gradient norm clip of each step."""
    keep_dataset: bool = False
    """Store the aggregated dataset in checkpoints (resume then keeps it; files grow by ~0.2 kB per state)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("gradient_steps", "batch_size", "dataset_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: expected >= 1, got {getattr(self, name)}")
        for name in ("expert_episodes", "dagger_rounds", "dagger_episodes"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}: expected >= 0, got {getattr(self, name)}")
        if self.expert_episodes + self.dagger_rounds * self.dagger_episodes < 1:
            raise ConfigError("expert_episodes + dagger_rounds * dagger_episodes: expected >= 1 labelled episode, "
                              "got 0")
        for name in ("beta", "beta_decay"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"{name}: expected 0 <= {name} <= 1, got {getattr(self, name)}")
        if self.expert_noise < 0:
            raise ConfigError(f"expert_noise: expected >= 0, got {self.expert_noise}")
        if self.max_grad_norm <= 0:
            raise ConfigError(f"max_grad_norm: expected > 0, got {self.max_grad_norm}")
        if self.action_weights is not None:
            self.action_weights = [float(w) for w in self.action_weights]


class DeterministicActor(nn.Module):
    """features -> pre-tanh action (``trunk`` then ``mu``, the layout ScaledTanhHead deploys)."""

    def __init__(self, d_in: int, hidden: list[int], act_dim: int, act: str = "relu"):
        super().__init__()
        self.trunk = mlp(d_in, hidden, None, act)
        self.mu = nn.Linear(hidden[-1] if hidden else d_in, act_dim)

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mu(self.trunk(feat)))


class LabelledDataset:
    """Ring buffer of (observation, expert action in [-1, 1]) pairs, preallocated."""

    def __init__(self, capacity: int, obs_spec: AnySpec, act_dim: int, device: torch.device):
        self.capacity = int(capacity)
        self.obs = _alloc(obs_spec, (self.capacity,), device)
        self.actions = torch.zeros((self.capacity, act_dim), dtype=torch.float32, device=device)
        self.pos, self.full = 0, False

    def __len__(self) -> int:
        return self.capacity if self.full else self.pos

    def add(self, obs: Any, actions: np.ndarray) -> None:
        n = len(actions)
        idx = torch.as_tensor((np.arange(n) + self.pos) % self.capacity)
        _put(self.obs, idx, obs)
        self.actions[idx] = torch.as_tensor(np.asarray(actions, dtype=np.float32), device=self.actions.device)
        self.full = self.full or self.pos + n >= self.capacity
        self.pos = int((self.pos + n) % self.capacity)

    def sample(self, batch: int, gen: torch.Generator) -> tuple[Any, torch.Tensor]:
        idx = torch.randint(0, len(self), (batch,), generator=gen).to(self.actions.device)
        return _take(self.obs, idx), self.actions[idx]

    def tensors(self) -> dict[str, np.ndarray]:
        n = len(self)
        out = _to_np(self.obs, n, "obs")
        out["actions"] = self.actions[:n].cpu().numpy()
        return out

    def load(self, tensors: Mapping[str, np.ndarray]) -> None:
        n = len(tensors["actions"])
        obs = (np.asarray(tensors["obs"]) if "obs" in tensors
               else {k[len("obs."):]: np.asarray(v) for k, v in tensors.items() if k.startswith("obs.")})
        self.pos, self.full = 0, False
        self.add(obs, np.asarray(tensors["actions"])[:n])


class BC(Algorithm):
    """Behaviour cloning + DAgger for continuous actions; ``set_expert(factory)`` before ``learn``."""

    algo_name = "bc"
    config_class = BCConfig
    supports_discrete = False
    config: BCConfig

    def __init__(self, env_or_specs: Any, config: BCConfig | None = None, *, env_kwargs: Mapping | None = None,
                 expert: ExpertFactory | None = None):
        super().__init__(env_or_specs, config, env_kwargs=env_kwargs)
        c = self.config
        if c.action_weights is not None and len(c.action_weights) != self.act_dim:
            raise ConfigError(f"action_weights: expected {self.act_dim} weights (one per action dim), "
                              f"got {len(c.action_weights)}")
        w = c.action_weights if c.action_weights is not None else [1.0] * self.act_dim
        self.loss_weights = torch.as_tensor(w, dtype=torch.float32, device=self.device)
        self.dataset = LabelledDataset(c.dataset_size, self.obs_spec, self.act_dim, self.device)
        self.round = 0
        """current round: 0 = expert-driven behaviour cloning, 1.. = DAgger"""
        self.episodes_labelled = 0
        """episodes whose every state went into the dataset (finished ones)"""
        self.expert_calls = 0
        self.round_log: list[dict] = []
        self.experts: list[Expert] = []
        self._round_episodes = 0
        self._round_success: list[bool] = []
        self._fresh_episodes = False
        if expert is not None:
            self.set_expert(expert)

    # -- expert -------------------------------------------------------------------------------------
    def set_expert(self, factory: ExpertFactory) -> None:
        """Give the expert: ``factory(env)`` is called once per env of the vector."""
        if self.vec_env is None:
            raise ConfigError("BC.set_expert: built from specs only; the expert needs the envs it labels")
        self.experts = [factory(e) for e in self.vec_env.envs]
        for ex in self.experts:
            if not (callable(ex) or callable(getattr(ex, "act", None))):
                raise ConfigError(f"BC.set_expert: the factory returned {type(ex).__name__}, expected a callable "
                                  "obs -> action or an object with act(obs)")

    def _expert_action(self, i: int, obs: Any) -> np.ndarray:
        ex = self.experts[i]
        a = np.asarray(ex.act(obs) if callable(getattr(ex, "act", None)) else ex(obs), dtype=np.float32).reshape(-1)
        if a.shape != (self.act_dim,) or not np.all(np.isfinite(a)):
            raise ValidationError(f"BC expert (env {i}) action", f"finite float[{self.act_dim}]",
                                  f"{a.dtype}{list(a.shape)} finite={bool(np.all(np.isfinite(a)))}")
        self.expert_calls += 1
        return a

    def _reset_expert(self, i: int) -> None:
        reset = getattr(self.experts[i], "reset", None)
        if callable(reset):
            reset()

    def label(self, obs: Any) -> np.ndarray:
        """Expert actions (env units) for a batch of observations, one per env, in env order."""
        n = self.vec_env.n  # type: ignore[union-attr]
        one = (lambda i: {k: v[i] for k, v in obs.items()}) if isinstance(obs, Mapping) else (lambda i: obs[i])
        return np.stack([self._expert_action(i, one(i)) for i in range(n)])

    # -- networks -----------------------------------------------------------------------------------
    def _build_networks(self) -> None:
        c = self.config
        self.act_dim = int(np.prod(self.action_spec.shape))
        self.actor_perception = build_perception(self.obs_spec, c.perception)
        self.actor = DeterministicActor(self.actor_perception.features_dim, c.net_arch, self.act_dim, c.activation)

    def _build_optimizers(self) -> None:
        self.actor_params = list(self.actor_perception.parameters()) + list(self.actor.parameters())
        self.actor_opt = make_adam(self.actor_params, self.config.learning_rate)

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": self.actor_opt}

    def _act(self, obs: Any, deterministic: bool) -> np.ndarray:
        return self._env_action(self._scale_action(self.actor(self.actor_perception(obs))))

    def _actor_net(self) -> nn.Module:
        return nn.ModuleDict({"perception": self.actor_perception, "actor": self.actor})

    def _deploy_modules(self) -> tuple[nn.Module, nn.Module]:
        return self.actor_perception, ScaledTanhHead(self.actor, self.act_low, self.act_high)  # type: ignore[arg-type]

    # -- the schedule -------------------------------------------------------------------------------
    def beta_for(self, round_: int) -> float:
        """Probability of executing the expert's action in ``round_`` (1 in round 0)."""
        if round_ == 0:
            return 1.0
        return self.config.beta * self.config.beta_decay ** (round_ - 1)

    def _round_quota(self, round_: int) -> int:
        return self.config.expert_episodes if round_ == 0 else self.config.dagger_episodes

    def _iteration(self) -> None:
        c, vec = self.config, self.vec_env
        if not self.experts:
            raise ConfigError("BC.learn: no expert; call algo.set_expert(factory) (tinker train does it from "
                              "the config's 'expert')")
        while self.round <= c.dagger_rounds and self._round_quota(self.round) == 0:
            self.round += 1
        if self.round > c.dagger_rounds:
            self._learn_target = self.num_timesteps  # the schedule is done: ends learn()'s loop
            return
        if self.num_timesteps == self._learn_start or self._fresh_episodes:
            for i in range(vec.n):  # type: ignore[union-attr]
                self._reset_expert(i)
            self._fresh_episodes = False
        obs = self._last_obs
        labels = self.label(obs)
        n = vec.n  # type: ignore[union-attr]
        low, high = self.action_spec.low, self.action_spec.high
        executed = labels
        if c.expert_noise > 0:
            half = 0.5 * (high - low)
            executed = labels + self.np_rng.normal(0.0, c.expert_noise, labels.shape) * half
        beta = self.beta_for(self.round)
        if beta < 1.0:
            with torch.no_grad():
                learner = self._act(self._obs_to_tensor(obs), deterministic=True)
            use_expert = self.np_rng.random(n) < beta
            executed = np.where(use_expert[:, None], executed, learner)
        executed = np.clip(executed, low, high).astype(self.action_spec.dtype)
        self._add(obs, labels)
        next_obs, _, term, trunc, _ = vec.step(executed)  # type: ignore[union-attr]
        self._last_obs = next_obs
        self.num_timesteps += n
        done = np.flatnonzero(term | trunc)
        for i in done:
            self._reset_expert(int(i))
        if len(done):
            self.episodes_labelled += len(done)
            self._round_episodes += len(done)
            finished = vec.finished[-len(done):]  # type: ignore[union-attr]
            self._round_success += [bool(e.success) for e in finished if e.success is not None]
        if self._round_episodes >= self._round_quota(self.round):
            self._end_round()

    def _add(self, obs: Any, labels: np.ndarray) -> None:
        if self.obs_norm is not None:
            self.obs_norm.rms.update(np.asarray(obs))
        self.dataset.add(obs, self._unscale_np(labels))

    def _unscale_np(self, a: np.ndarray) -> np.ndarray:
        low, high = self.action_spec.low, self.action_spec.high
        return np.clip(2.0 * (np.asarray(a, dtype=np.float64) - low) / (high - low) - 1.0, -1.0, 1.0)

    def _end_round(self) -> None:
        """Retrain on the aggregated dataset, record the round, move on."""
        succ = self._round_success
        loss = self.train(self.config.gradient_steps)
        self.round_log.append({"round": self.round, "beta": self.beta_for(self.round),
                               "episodes": self._round_episodes, "dataset": len(self.dataset),
                               "loss": loss, "timesteps": self.num_timesteps,
                               "success_rate": float(np.mean(succ)) if succ else None})
        self._round_episodes, self._round_success = 0, []
        self.round += 1

    def train(self, gradient_steps: int) -> float:
        """``gradient_steps`` regression steps onto the expert's labels; returns the mean loss."""
        if len(self.dataset) == 0:
            raise ConfigError("BC.train: the dataset is empty; collect labelled states first")
        norm = None
        if self.obs_norm is not None:
            norm = FoldedNormalize(*self.obs_norm.constants(), self.obs_norm.clip).to(self.device)
        total = 0.0
        for _ in range(gradient_steps):
            obs, target = self.dataset.sample(self.config.batch_size, self.gen)
            if norm is not None:
                obs = norm(obs)
            elif isinstance(obs, torch.Tensor) and obs.dtype != torch.float32 and obs.dtype != torch.uint8:
                obs = obs.float()
            pred = self.actor(self.actor_perception(obs))
            loss = ((pred - target).square() * self.loss_weights).mean()
            self.actor_opt.zero_grad(set_to_none=True)
            loss.backward()
            grad = nn.utils.clip_grad_norm_(self.actor_params, self.config.max_grad_norm)
            self.actor_opt.step()
            self.num_updates += 1
            total += float(loss.detach())
        self._metrics = {"loss": total / gradient_steps, "grad_norm/actor": grad.detach(),
                         "dataset": float(len(self.dataset)), "round": float(self.round)}
        return total / gradient_steps

    # -- pipeline learner ---------------------------------------------------------------------------
    def forward(self, t: Any) -> dict | None:
        raise ConfigError("BC.forward: BC learns from expert labels in learn() (set_expert), not from a transition "
                          "stream; fine-tune its policy online with SAC or PPO")

    # -- checkpoint ---------------------------------------------------------------------------------
    def _extra_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        return {"round": self.round, "episodes_labelled": self.episodes_labelled, "expert_calls": self.expert_calls,
                "round_episodes": self._round_episodes, "round_log": self.round_log}, {}

    def _load_extra_state(self, meta: dict, tensors: Any) -> None:
        self.round = int(meta.get("round", 0))
        self.episodes_labelled = int(meta.get("episodes_labelled", 0))
        self.expert_calls = int(meta.get("expert_calls", 0))
        self._round_episodes = int(meta.get("round_episodes", 0))
        self.round_log = list(meta.get("round_log", []))
        self._fresh_episodes = True  # experts are rebuilt fresh: reset them with the envs

    def _replay_tensors(self) -> dict[str, np.ndarray]:
        return self.dataset.tensors() if self.config.keep_dataset and len(self.dataset) else {}

    def _load_replay(self, tensors: Mapping[str, np.ndarray]) -> None:
        self.dataset.load(tensors)
