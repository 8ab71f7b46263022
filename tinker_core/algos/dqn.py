"""DQN (Mnih et al. 2015) with double-Q targets (van Hasselt et al. 2016), a target network and
optional proportional prioritized replay. Defaults are Stable-Baselines3's; RL Zoo's CartPole-v1
tuning is in configs/dqn_cartpole.yaml.

Two ways to the same step: for flat observations (dicts of vectors flattened), an MLP Q-network
(ReLU or Tanh) in float32 on the CPU, `NativeDQNUpdate` (the step compiled, where it could be built);
otherwise autograd."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tinker_core.algos import native as native_mod
from tinker_core.algos.dqn_native import NativeDQNUpdate, unsupported
from tinker_core.algos.optim import adam_step, make_adam
from tinker_core.algos.buffers import PrioritizedIndex, ReplaySamples
from tinker_core.algos.networks import ArgmaxHead
from tinker_core.algos.np_mlp import NumpyMLP
from tinker_core.algos.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from tinker_core.errors import ConfigError
from tinker_core.nn import build_perception, mlp
from tinker_core.nn.encoders import Flatten


@dataclass
class DQNConfig(OffPolicyConfig):
    learning_rate: float = 1e-4
    """Adam learning rate."""
    batch_size: int = 32
    """Minibatch size."""
    tau: float = 1.0
    """Target update coefficient (1.0: hard copy)."""
    train_freq: int = 4
    """Train every this many env steps."""
    target_update_interval: int = 10_000
    """Env steps between target updates (gradient steps when fed through train_on_batch)."""
    exploration_fraction: float = 0.1
    """Fraction of the run over which epsilon falls from initial to final."""
    exploration_initial_eps: float = 1.0
    """Epsilon at the start."""
    exploration_final_eps: float = 0.05
    """Epsilon after the decay."""
    max_grad_norm: float = 10.0
    """Gradient clipping (global norm)."""
    double_q: bool = True
    """Double DQN: the online network picks the next action, the target network values it."""
    prioritized: bool = False
    """Proportional prioritized replay (alpha 0.6, beta annealed 0.4 -> 1)."""
    compiled_step: bool = True
    """On the CPU, run the MLP step compiled (dqn_native.py; built once per machine) where it applies;
    False, or no compiler, runs the same step through autograd."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0.0 <= self.exploration_final_eps <= self.exploration_initial_eps <= 1.0:
            raise ConfigError("exploration eps: expected 0 <= final <= initial <= 1, got "
                              f"final={self.exploration_final_eps}, initial={self.exploration_initial_eps}")
        if not 0.0 < self.exploration_fraction <= 1.0:
            raise ConfigError(f"exploration_fraction: expected 0 < x <= 1, got {self.exploration_fraction}")
        if self.target_update_interval < 1:
            raise ConfigError(f"target_update_interval: expected >= 1, got {self.target_update_interval}")
        if self.prioritized and self.her is not None:
            raise ConfigError("prioritized: not available with her (relabelled transitions have no stored priority); "
                              "set one of them off")


class DQN(OffPolicyAlgorithm):
    """Deep Q-learning for discrete actions."""

    algo_name = "dqn"
    config_class = DQNConfig
    supports_continuous = False
    config: DQNConfig

    def _build_networks(self) -> None:
        c = self.config
        self.q_perception = build_perception(self.obs_spec, self._perception_kind())
        self.q_net = mlp(self.q_perception.features_dim, c.net_arch, self.n_actions, c.activation)
        self.q_perception_target = copy.deepcopy(self.q_perception)
        self.q_net_target = copy.deepcopy(self.q_net)
        for p in list(self.q_perception_target.parameters()) + list(self.q_net_target.parameters()):
            p.requires_grad_(False)
        self.exploration_rate = c.exploration_initial_eps
        self._native = (NativeDQNUpdate.create(self.q_perception, self.q_net, self.q_net_target, self.device)
                        if c.compiled_step else None)
        why = ""
        if self._native is None:
            why = ("compiled_step=False" if not c.compiled_step else unsupported(self.q_perception, self.q_net)
                   or "not on the CPU in float32, or TINKER_NATIVE=0")
        native_mod.note_update_path("DQN", self.update_path, why)

    @property
    def update_path(self) -> str:
        """Which step trains: ``compiled`` (one C++ call) or ``autograd`` (also where the compiled step could
        not be built on this machine, which is known once the first step has tried)."""
        return "compiled" if self._native is not None and self._native._ops is not False else "autograd"

    def _build_optimizers(self) -> None:
        self.q_params = list(self.q_perception.parameters()) + list(self.q_net.parameters())
        self.q_opt = make_adam(self.q_params, self.config.learning_rate)
        self._target_dst = list(self.q_perception_target.parameters()) + list(self.q_net_target.parameters())
        self.per = PrioritizedIndex(self.config.buffer_size) if self.config.prioritized else None
        self._env_calls = 0
        # acting in numpy on views of the Q-network's weights (updated in place) where it is a plain MLP on the CPU
        self._np_q = (NumpyMLP.of(self.q_net) if self.device.type == "cpu" and type(self.q_perception) is Flatten
                      else None)

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"q": self.q_opt}

    def _settable(self) -> dict[str, Callable[[float], None]]:
        return {"lr": self.set_learning_rate, "exploration_final_eps": self._set_final_eps}

    def _set_final_eps(self, v: float) -> None:
        self.config.exploration_final_eps = min(float(v), self.config.exploration_initial_eps)

    def _q(self, obs: Any) -> torch.Tensor:
        return self.q_net(self.q_perception(obs))

    def _act_raw(self, obs: Any, deterministic: bool) -> np.ndarray:
        """Greedy actions through numpy views of the Q-network (`NumpyMLP`) for flat observations on the CPU:
        at one env step's batch a torch forward costs several times its arithmetic. Else through torch."""
        if self._np_q is None or (isinstance(obs, Mapping) and self._flat is None):
            return super()._act_raw(obs, deterministic)
        x = self._prepare_obs(obs if isinstance(obs, Mapping) else np.asarray(obs))  # normalized, dicts flattened
        return self._explore(self._np_q(x.reshape(x.shape[0], -1).astype(np.float32, copy=False)).argmax(-1),
                             deterministic)

    def _act(self, obs: Any, deterministic: bool) -> np.ndarray:
        return self._explore(self._q(obs).argmax(-1).cpu().numpy(), deterministic)

    def _explore(self, greedy: np.ndarray, deterministic: bool) -> np.ndarray:
        """Epsilon-greedy (unless ``deterministic``) over the greedy action indices, in env units."""
        if not deterministic:
            n = greedy.shape[0]
            rand = self.np_rng.random(n) < self.exploration_rate
            if rand.any():
                greedy = np.where(rand, self.np_rng.integers(0, self.n_actions, size=n), greedy)
        return (greedy + self.action_offset).astype(self.action_spec.dtype)

    # -- schedule and target updates, per env step --------------------------------------------------
    def _progress(self) -> float:
        span = max(1, self._learn_target - self._learn_start)
        return min(1.0, max(0.0, (self.num_timesteps - self._learn_start) / span))

    def _iteration(self) -> None:
        c = self.config
        frac = min(1.0, self._progress() / c.exploration_fraction)
        self.exploration_rate = c.exploration_initial_eps + frac * (c.exploration_final_eps - c.exploration_initial_eps)
        super()._iteration()
        self._env_calls += 1
        if self._env_calls % max(c.target_update_interval // c.n_envs, 1) == 0:
            self._update_target()

    def _update_target(self) -> None:
        q_src = self.q_params
        with torch.no_grad():
            if self.config.tau >= 1.0:
                torch._foreach_copy_(self._target_dst, q_src)
            else:
                torch._foreach_lerp_(self._target_dst, q_src, self.config.tau)

    # -- prioritized replay -------------------------------------------------------------------------
    def _on_added(self, start: int, n: int) -> None:
        if self.per is not None:
            self.per.added(start, n, self.replay.capacity)

    def _sample(self) -> tuple[ReplaySamples, torch.Tensor | None, Any]:
        if self.per is None:
            return super()._sample()
        beta = 0.4 + 0.6 * self._progress()
        idx, w = self.per.sample(len(self.replay), self.config.batch_size, beta, self.np_rng)
        return self.replay.get(torch.from_numpy(idx)), torch.from_numpy(w).to(self.device), idx

    def _after_train(self, idx: Any, td: torch.Tensor) -> None:
        if self.per is not None and idx is not None:
            self.per.update(idx, td.cpu().numpy())

    # -- the update ---------------------------------------------------------------------------------
    def _train_step(self, s: ReplaySamples, weights: torch.Tensor | None = None) -> torch.Tensor:
        c = self.config
        if self._native is not None and not isinstance(s.obs, dict):
            with torch.no_grad():
                out = self._native.train_step(s.obs, s.actions, s.next_obs, s.rewards, s.dones, weights, self.q_opt,
                                              c.gamma, c.double_q, c.max_grad_norm)
            if out is not None:
                self.num_updates += 1
                self._metrics = {"loss": out.loss, "q_mean": out.q_mean, "grad_norm/q": out.grad_norm,
                                 "exploration_rate": torch.tensor(self.exploration_rate)}
                return out.td_abs
            native_mod.note_update_path("DQN", "autograd", f"the compiled step could not be built "
                                        f"({native_mod.unavailable_reason()})")
        with torch.no_grad():
            next_feat = self.q_perception_target(s.next_obs)
            next_q_all = self.q_net_target(next_feat)
            if c.double_q:
                next_a = self._q(s.next_obs).argmax(-1, keepdim=True)
                next_q = next_q_all.gather(1, next_a).squeeze(1)
            else:
                next_q = next_q_all.max(1).values
            target = s.rewards + (1.0 - s.dones) * c.gamma * next_q
        q = self._q(s.obs).gather(1, s.actions.long().unsqueeze(1)).squeeze(1)
        per = F.smooth_l1_loss(q, target, reduction="none")
        loss = per.mean() if weights is None else (per * weights).mean()
        self.q_opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(self.q_params, c.max_grad_norm, foreach=True)
        adam_step(self.q_opt)
        self.num_updates += 1
        self._metrics = {"loss": loss.detach(), "q_mean": q.detach().mean(), "grad_norm/q": gnorm,
                         "exploration_rate": torch.tensor(self.exploration_rate)}
        return (q - target).detach().abs()

    def train_on_batch(self, batch: Any, weights: np.ndarray | None = None, demo_mask: np.ndarray | None = None) -> dict:
        out = super().train_on_batch(batch, weights, demo_mask)
        if self.num_updates % self.config.target_update_interval == 0:
            self._update_target()
        return out

    def _actor_net(self) -> nn.Module:
        return nn.ModuleDict({"perception": self.q_perception, "q": self.q_net})

    def _deploy_modules(self) -> tuple[nn.Module, nn.Module]:
        return self.q_perception, ArgmaxHead(self.q_net, self.action_offset)

    def _extra_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        meta = {"exploration_rate": self.exploration_rate, "env_calls": self._env_calls}
        t = {}
        if self.per is not None:
            meta["per_max"] = self.per.max_p
            t["per_priorities"] = self.per.p[: len(self.replay)].copy()
        return meta, t

    def _load_extra_state(self, meta: dict, tensors: Any) -> None:
        self.exploration_rate = float(meta.get("exploration_rate", self.exploration_rate))
        self._env_calls = int(meta.get("env_calls", 0))
        if self.per is not None and "per_priorities" in tensors:
            p = np.array(tensors["per_priorities"])
            self.per.p[: len(p)] = p
            self.per.max_p = float(meta.get("per_max", 1.0))
