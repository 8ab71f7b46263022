"""PPO (Schulman et al. 2017): clipped surrogate, GAE, optional value clipping, observation and
reward normalization, vectorized envs, discrete and continuous actions, optional gSDE exploration.
Defaults are Stable-Baselines3's; RL Zoo's Pendulum-v1 tuning is in configs/ppo_pendulum.yaml.

Speed (the update math is SB3's): acting during rollouts runs the MLPs in numpy on views of the
weights (`np_mlp`), log-probabilities come in closed form from the drawn noise, and the update
steps one flat parameter buffer (`flat_params`); for continuous actions and MLPs on the CPU the
whole update is one compiled call (`ppo_native`), otherwise autograd on the calling thread."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import torch

from tinker_core.algos.base import AlgoConfig, Algorithm
from tinker_core.algos.optim import make_adam, update_scope
from tinker_core.algos.buffers import RolloutSamples, _alloc, _put, _take
from tinker_core.algos.flat_params import FlatParams
from tinker_core.algos.fused_ac import FusedActorCritic
from tinker_core.algos.actor_critic import ActorCritic
from tinker_core.algos.networks import GaussianActor, seq_forward
from tinker_core.algos.normalize import RewardNormalizer
from tinker_core.algos.np_mlp import NumpyMLP
from tinker_core.algos import native as native_mod
from tinker_core.algos.ppo_native import NativePPOUpdate
from tinker_core.errors import ConfigError
from tinker_core.nn.encoders import Flatten
from tinker_core.spec import Spec
from tinker_core.transition import Transition, TransitionBatch


def _slice(x: Any, start: int, end: int) -> Any:
    if isinstance(x, dict):
        return {k: v[start:end] for k, v in x.items()}
    return x[start:end]


def _scalar(v: float, like: torch.Tensor) -> torch.Tensor:
    return torch.full((), v, dtype=like.dtype, device=like.device)


def _first(x: Any) -> torch.Tensor:
    return next(iter(x.values())) if isinstance(x, dict) else x


@dataclass
class PPOConfig(AlgoConfig):
    learning_rate: float = 3e-4
    """Adam learning rate."""
    n_steps: int = 2048
    """Env steps per env in each rollout."""
    batch_size: int = 64
    """Minibatch size of each gradient step."""
    n_epochs: int = 10
    """Passes over each rollout."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    clip_range: float = 0.2
    """Policy ratio clipping."""
    clip_range_vf: float | None = None
    """Value clipping around the old value (None: off)."""
    normalize_advantage: bool = True
    """Standardize advantages per minibatch."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient (changeable while running: control.set(ent_coef=...))."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Gradient clipping (global norm)."""
    normalize_reward: bool = False
    """Scale rewards by the running std of the discounted return."""
    net_arch: list[int] = None  # type: ignore[assignment]
    """Hidden widths of the policy and value MLPs (default [64, 64])."""
    activation: str = "tanh"
    """Nonlinearity of the MLPs."""
    log_std_init: float = 0.0
    """Initial log standard deviation of continuous actions."""
    ortho_init: bool = True
    """Orthogonal initialization (gain sqrt(2); 0.01 for the policy output, 1 for the value output)."""
    use_sde: bool = False
    """Generalized state-dependent exploration (gSDE) for continuous actions, as SB3's use_sde."""
    sde_sample_freq: int = -1
    """Env steps between two gSDE noise-matrix draws (-1: once per rollout)."""
    value_epochs: int = 0
    """Extra passes of value regression after each update, on the rollout's returns (minibatches of
    ``batch_size``), with an Adam of their own at ``value_learning_rate`` (0: none, as SB3). For entries whose
    value function lags the policy: RL Zoo's MountainCarContinuous PPO entry collapses without them
    (docs/benchmarks_third_party.md)."""
    value_learning_rate: float = 1e-3
    """Adam learning rate of the extra value passes (fixed: a learning-rate schedule moves the joint update's only)."""
    compiled_update: bool = True
    """On the CPU, run each update compiled (ppo_native.py; built once per machine) where it applies
    (continuous actions, MLPs on flat observations); False, or no compiler, runs it through autograd."""

    def __post_init__(self) -> None:
        if self.net_arch is None:
            self.net_arch = [64, 64]
        super().__post_init__()
        if self.n_steps * self.n_envs < 2:
            raise ConfigError(f"n_steps * n_envs must be > 1, got n_steps={self.n_steps}, n_envs={self.n_envs}")
        if self.batch_size < 1 or self.batch_size > self.n_steps * self.n_envs:
            rollout = self.n_steps * self.n_envs
            raise ConfigError(f"batch_size: expected 1..n_steps*n_envs={rollout}, got {self.batch_size}"
                              + (f" (SB3 then trains on the whole rollout: write batch_size: {rollout} for the same)"
                                 if self.batch_size > rollout else ""))
        if self.n_epochs < 1:
            raise ConfigError(f"n_epochs: expected >= 1, got {self.n_epochs}")
        if not 0 <= self.gae_lambda <= 1:
            raise ConfigError(f"gae_lambda: expected 0..1, got {self.gae_lambda}")
        if self.sde_sample_freq == 0 or self.sde_sample_freq < -1:
            raise ConfigError(f"sde_sample_freq: expected -1 (once per rollout) or >= 1, got {self.sde_sample_freq}")
        if self.value_epochs < 0:
            raise ConfigError(f"value_epochs: expected >= 0 (0: no extra value passes), got {self.value_epochs}")
        if not self.value_learning_rate > 0:
            raise ConfigError(f"value_learning_rate: expected > 0, got {self.value_learning_rate}")


class PPO(ActorCritic, Algorithm):
    """Proximal Policy Optimization."""

    algo_name = "ppo"
    config_class = PPOConfig
    config: PPOConfig

    def _build_networks(self) -> None:
        c = self.config
        self._build_actor_critic(c.log_std_init, sde=c.use_sde, ortho_init=c.ortho_init)
        self.reward_norm = RewardNormalizer(c.n_envs, c.gamma) if c.normalize_reward else None
        n, ne = c.n_steps, c.n_envs
        self.buf_obs = _alloc(self.obs_spec, (n, ne), torch.device("cpu"))
        self.buf_actions = torch.zeros((n, ne) if self.discrete else (n, ne, self.act_dim),
                                       dtype=torch.long if self.discrete else torch.float32)
        self.buf_rewards = torch.zeros(n, ne)
        self.buf_starts = torch.zeros(n, ne)
        self.buf_values = torch.zeros(n, ne)
        self.buf_logp = torch.zeros(n, ne)
        self._episode_starts = np.ones(ne, dtype=np.float32)
        self._stream: list[Transition] = []
        self.sde = bool(c.use_sde) and not self.discrete
        self._sde_calls = 0
        self._counted_obs: Any = None  # the last observation batch added to the normalizer's statistics
        if self.sde:
            self._reset_noise(ne)

    def _build_optimizers(self) -> None:
        params = [p for p in self.parameters() if p.requires_grad]
        # one flat buffer: one Adam kernel, one norm per minibatch (see flat_params); laid out so the
        # actor and value MLPs can also run as one fused pair (see fused_ac) when they are plain MLPs
        order = None
        if type(self.perception) is Flatten and isinstance(self.obs_spec, Spec):  # dicts: batches stay dicts
            order = FusedActorCritic.param_order(self.pi.logits if self.discrete else self.pi.mean, self.vf)
        if order is not None:
            ids = {id(p) for p in order}
            order += [p for p in params if id(p) not in ids]
            params = order
        self.params = params
        self.flat = FlatParams(self.params)
        self.fused = None if order is None else FusedActorCritic.build(
            self.pi.logits if self.discrete else self.pi.mean, self.vf, self.flat)
        self.opt = make_adam([self.flat.flat], self.config.learning_rate, eps=1e-5)
        # the value MLP's parameters are views into the flat buffer: its own Adam steps them in place
        self.value_opt = (make_adam(list(self.vf.parameters()), self.config.value_learning_rate, eps=1e-5)
                          if self.config.value_epochs else None)
        self._native = (NativePPOUpdate.create(self.fused, self.discrete, self.sde, self.device)
                        if self.config.compiled_update else None)
        why = ("" if self._native is not None else "compiled_update=False" if not self.config.compiled_update
               else "discrete actions" if self.discrete
               else "the networks are not a fused MLP pair (image, dict or encoder observations)" if self.fused is None
               else "not on the CPU in float32, or TINKER_NATIVE=0")
        native_mod.note_update_path("PPO", self.update_path, why)

    @property
    def update_path(self) -> str:
        """Which update trains: ``compiled`` (each update one C++ call; the very first one is autograd, as it
        creates Adam's state) or ``autograd``."""
        return "compiled" if self._native is not None else "autograd"

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"policy": self.opt, "value": self.value_opt}

    def _lr_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"policy": self.opt}  # the extra value passes keep their own, fixed rate

    def _settable(self) -> dict[str, Callable[[float], None]]:
        return {"lr": self.set_learning_rate, "ent_coef": self._set_ent_coef, "clip_range": self._set_clip}

    def _set_ent_coef(self, v: float) -> None:
        self.config.ent_coef = float(v)

    def _set_clip(self, v: float) -> None:
        self.config.clip_range = float(v)

    # -- acting -------------------------------------------------------------------------------------
    def _reset_noise(self, n: int) -> None:
        """Draw ``n`` gSDE exploration matrices (one per env), each ``N(0, exp(log_std)^2)``."""
        std = self.pi.log_std.detach().exp()
        eps = torch.randn((n, *std.shape), generator=self.gen).to(std.device)
        self._sde_matrices = eps * std
        self._sde_var = std.square()
        self._sde_calls = 0

    def _sample(self, feat: torch.Tensor) -> torch.Tensor:
        return self._sample_logp(feat, with_logp=False)[0]

    def _sample_logp(self, feat: torch.Tensor, with_logp: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """An exploring action and (``with_logp``) its log-probability, in closed form from the noise
        that made it (no second pass through the network)."""
        if self.discrete:
            logits = self.pi.logits(feat)
            u = torch.rand(logits.shape, generator=self.gen).to(logits.device)
            a = torch.argmax(logits - torch.log(-torch.log(u.clamp_min(1e-20))), dim=-1)  # Gumbel-max
            if not with_logp:
                return a, None
            return a, torch.log_softmax(logits, -1).gather(-1, a.unsqueeze(-1)).squeeze(-1)
        if self.sde:
            self._maybe_reset_noise()
            latent, mu = self.pi.latent_mean(feat)
            noise = self.pi.sde_noise(latent, self._sde_matrices)
            if not with_logp:
                return mu + noise, None
            std = self.pi.std(latent, self._sde_var)
            logp = (-0.5 * (noise / std).square() - torch.log(std)).sum(-1) - self._log_norm
            return mu + noise, logp
        mu = self.pi.mean_action(feat)
        eps = torch.randn(mu.shape, generator=self.gen).to(mu.device)
        a = mu + self.pi.log_std.exp() * eps
        if not with_logp:
            return a, None
        return a, -0.5 * eps.square().sum(-1) - (self.pi.log_std.sum() + self._log_norm)

    @property
    def _log_norm(self) -> float:
        return 0.5 * math.log(2 * math.pi) * self.act_dim

    def _to_env(self, a: torch.Tensor) -> np.ndarray:
        if self.discrete:
            return self._env_action(a)
        return self._env_action(torch.minimum(torch.maximum(a, self.act_low), self.act_high))

    def _act(self, obs: Any, deterministic: bool) -> np.ndarray:
        feat = self.perception(obs)
        if deterministic:
            a = self.pi.logits(feat).argmax(-1) if self.discrete else self.pi.mean(feat)
        else:
            a = self._sample(feat)
        return self._to_env(a)

    # -- collection ---------------------------------------------------------------------------------
    def _numpy_nets(self) -> tuple[NumpyMLP, NumpyMLP] | None:
        """numpy twins of the actor and value MLPs for acting, when the fast path applies (CPU, vector
        observations through `Flatten`, plain Linear/Tanh/ReLU layers); else None."""
        if self.device.type != "cpu" or type(self.perception) is not Flatten or not isinstance(self.obs_spec, Spec):
            return None
        pi = NumpyMLP.of(self.pi.logits if self.discrete else self.pi.mean)
        vf = NumpyMLP.of(self.vf)
        return None if pi is None or vf is None else (pi, vf)

    def _step_numpy(self, nets: tuple[NumpyMLP, NumpyMLP], x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(action, log-prob, value) for a batch of flat float32 observations, in numpy; the random
        draws come from the same torch generator, in the same order, as in `_sample_logp`."""
        pi, vf = nets
        n = x.shape[0]
        v = vf(x).reshape(n)
        if self.discrete:
            logits = pi(x)
            u = torch.rand(logits.shape, generator=self.gen).numpy()
            a = np.argmax(logits - np.log(-np.log(np.maximum(u, 1e-20))), axis=-1)
            z = logits - logits.max(-1, keepdims=True)
            logp = z[np.arange(n), a] - np.log(np.exp(z).sum(-1))
            return a, logp, v
        if self.sde:
            self._maybe_reset_noise()
            latent = pi(x, -1)
            mu = latent @ pi.layers[-1][1] + pi.layers[-1][2]
            m = self._sde_matrices.numpy()
            noise = np.matmul(latent[:, None, :], m if m.shape[0] == n else m[:1])[:, 0, :]
            std = np.sqrt(np.square(latent) @ self._sde_var.numpy() + GaussianActor.SDE_EPS)
            logp = (-0.5 * np.square(noise / std) - np.log(std)).sum(-1) - self._log_norm
            return mu + noise, logp, v
        mu = pi(x)
        eps = torch.randn(mu.shape, generator=self.gen).numpy()
        log_std = self.pi.log_std.detach().numpy()
        logp = -0.5 * np.square(eps).sum(-1) - (log_std.sum() + self._log_norm)
        return mu + np.exp(log_std) * eps, logp, v

    def _maybe_reset_noise(self) -> None:
        c = self.config
        if c.sde_sample_freq > 0 and self._sde_calls >= c.sde_sample_freq:
            self._reset_noise(self._sde_matrices.shape[0])
        self._sde_calls += 1

    def _env_action_np(self, a: np.ndarray) -> np.ndarray:
        if self.discrete:
            return (a + self.action_offset).astype(self.action_spec.dtype)
        return np.clip(a, self.action_spec.low, self.action_spec.high).astype(self.action_spec.dtype)

    def _iteration(self) -> None:
        c, vec = self.config, self.vec_env
        self.train(False)
        if self.sde:
            self._reset_noise(vec.n)  # type: ignore[union-attr]
        # numpy views of the (CPU) rollout storage: a row write costs a microsecond, not a dispatch
        acts, rews, starts = self.buf_actions.numpy(), self.buf_rewards.numpy(), self.buf_starts.numpy()
        vals, logps = self.buf_values.numpy(), self.buf_logp.numpy()
        nets = self._numpy_nets()
        with torch.no_grad():
            for t in range(c.n_steps):
                self._count_obs(self._last_obs)  # after a reset (learn, load): the first observations
                if nets is not None:
                    x = np.asarray(self._last_obs)
                    if self.obs_norm is not None:
                        x = self.obs_norm.normalize_np(x)
                    x = x.reshape(x.shape[0], -1).astype(np.float32, copy=False)
                    a_np, logp_np, v_np = self._step_numpy(nets, x)
                    self.buf_obs.numpy()[t] = x.reshape(self.buf_obs.shape[1:])  # type: ignore[union-attr]
                    env_a = self._env_action_np(a_np)
                else:
                    obs_t = self._obs_to_tensor(self._last_obs)
                    feat = self.perception(obs_t)
                    a, logp = self._sample_logp(feat)
                    a_np, logp_np = a.cpu().numpy(), logp.cpu().numpy()  # type: ignore[union-attr]
                    v_np = seq_forward(self.vf, feat).reshape(-1).cpu().numpy()
                    _put(self.buf_obs, t, self._stored_obs(obs_t))
                    env_a = self._to_env(a)
                next_obs, rew, term, trunc, final = vec.step(env_a)  # type: ignore[union-attr]
                # as VecNormalize: the statistics take the new observations as they arrive, before the
                # bootstrap values below and the last value of the rollout normalize them
                self._count_obs(next_obs)
                rew = self.reward_norm(rew, term | trunc) if self.reward_norm is not None else rew
                rews[t] = rew
                boot = np.flatnonzero(trunc & ~term)
                if len(boot):  # time limit: bootstrap from the final observations (one batched pass)
                    rews[t, boot] += c.gamma * self._values(nets, [final[i] for i in boot])
                acts[t] = a_np
                vals[t] = v_np
                logps[t] = logp_np
                starts[t] = self._episode_starts
                self._episode_starts = (term | trunc).astype(np.float32)
                self._last_obs = next_obs
            last_v = torch.from_numpy(self._values(nets, self._last_obs, stacked=True))
        self.num_timesteps += c.n_steps * vec.n  # type: ignore[union-attr]
        adv, ret = self._gae(self.buf_rewards, self.buf_values, self.buf_starts, last_v,
                             torch.from_numpy(self._episode_starts))
        self._update(self.buf_obs, self.buf_actions, self.buf_values, self.buf_logp, adv, ret)

    def _count_obs(self, obs: Any) -> None:
        """Add ``obs`` (one batch from the vec env) to the observation statistics, once."""
        if self.obs_norm is not None and obs is not self._counted_obs:
            self.obs_norm.update(obs)
            self._counted_obs = obs

    def _values(self, nets: tuple[NumpyMLP, NumpyMLP] | None, obs: Any, stacked: bool = False) -> np.ndarray:
        """V(obs) as float32 numpy for raw observations (a list of them, or a batch if ``stacked``)."""
        if not stacked:
            obs = {k: np.stack([o[k] for o in obs]) for k in obs[0]} if isinstance(obs[0], dict) else np.stack(obs)
        if nets is not None:
            x = np.asarray(obs)
            if self.obs_norm is not None:
                x = self.obs_norm.normalize_np(x)
            x = x.reshape(x.shape[0], -1).astype(np.float32, copy=False)
            return nets[1](x).reshape(-1).astype(np.float32)
        return seq_forward(self.vf, self.perception(self._obs_to_tensor(obs))).reshape(-1).cpu().numpy()

    def _stored_obs(self, obs_t: Any) -> Any:
        if isinstance(obs_t, Mapping):
            return {k: v.cpu() for k, v in obs_t.items()}
        return obs_t.cpu()

    def _gae(self, rewards: torch.Tensor, values: torch.Tensor, starts: torch.Tensor, last_v: torch.Tensor,
             last_start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        n = rewards.shape[0]
        adv = torch.zeros_like(rewards)
        r, v, s = rewards.numpy(), values.numpy(), starts.numpy()
        a = adv.numpy()
        nonterm = np.empty_like(r)
        nonterm[:-1] = 1.0 - s[1:]
        nonterm[-1] = 1.0 - last_start.numpy()
        next_v = np.empty_like(v)
        next_v[:-1] = v[1:]
        next_v[-1] = last_v.numpy()
        delta = r + c.gamma * next_v * nonterm - v
        decay = c.gamma * c.gae_lambda * nonterm
        g = np.zeros_like(r[0])
        for t in range(n - 1, -1, -1):
            g = delta[t] + decay[t] * g
            a[t] = g
        return adv, adv + values

    # -- the update ---------------------------------------------------------------------------------
    def _update(self, obs: Any, actions: torch.Tensor, values: torch.Tensor, logp: torch.Tensor,
                adv: torch.Tensor, ret: torch.Tensor) -> dict:
        c = self.config
        self.train(True)
        flat = lambda x: x.reshape(-1, *x.shape[2:]).to(self.device)
        f_obs = {k: flat(v) for k, v in obs.items()} if isinstance(obs, dict) else flat(obs)
        f_act, f_val, f_logp, f_adv, f_ret = (flat(x) for x in (actions, values, logp, adv, ret))
        total = f_val.shape[0]
        # the per-sample scalars travel as one [N, 4] tensor: one gather per epoch, views per minibatch
        scal = torch.stack([f_val, f_logp, f_adv, f_ret], 1)
        if self._native is not None and not isinstance(f_obs, dict) and self._native.ready(self.opt):
            perms = torch.stack([torch.randperm(total, generator=self.gen) for _ in range(c.n_epochs)])
            with torch.no_grad(), update_scope():
                losses_t, lr_all, norms_t = self._native.update(self.opt, f_obs, f_act, scal, perms, c)
        else:
            losses, log_ratios, norms = [], [], []
            with update_scope():
                for _ in range(c.n_epochs):
                    perm = torch.randperm(total, generator=self.gen).to(self.device)
                    e_obs, e_act, e_scal = _take(f_obs, perm), f_act[perm], scal[perm]
                    for start in range(0, total, c.batch_size):
                        end = min(start + c.batch_size, total)
                        sc = e_scal[start:end]
                        b = RolloutSamples(_slice(e_obs, start, end), e_act[start:end], sc[:, 0], sc[:, 1],
                                           sc[:, 2], sc[:, 3])
                        pg_v, log_ratio, gn = self._minibatch(b)
                        losses.append(pg_v)
                        log_ratios.append(log_ratio)
                        norms.append(gn)
            losses_t, lr_all, norms_t = torch.stack(losses), torch.cat(log_ratios), torch.stack(norms)
        self.num_updates += losses_t.shape[0]
        if self.value_opt is not None:
            self._fit_values(f_obs, f_ret)
        with torch.no_grad():
            explained = 1.0 - (f_ret - f_val).var() / f_ret.var().clamp_min(1e-8)
            pv = losses_t.mean(0)
            ratio = lr_all.exp()
            self._metrics = {"policy_loss": pv[0], "value_loss": pv[1], "entropy": self._entropy_now(f_obs),
                             "approx_kl": ((ratio - 1) - lr_all).mean(),
                             "clip_fraction": ((ratio - 1).abs() > c.clip_range).float().mean(),
                             "grad_norm/policy": norms_t.mean(), "explained_variance": explained,
                             "std": self.pi.log_std.detach().exp().mean() if not self.discrete else torch.tensor(0.0)}
        self._last_batch_rewards = self.buf_rewards
        return {k: float(v) for k, v in self._metrics.items()}

    def _fit_values(self, f_obs: Any, f_ret: torch.Tensor) -> None:
        """``value_epochs`` passes of value regression on the rollout's returns with the value's own Adam."""
        c, total = self.config, f_ret.shape[0]
        with torch.no_grad():  # the passes move the value MLP only: the features are computed once
            feats = self.perception(f_obs)
        with update_scope():
            for _ in range(c.value_epochs):
                perm = torch.randperm(total, generator=self.gen).to(self.device)
                for start in range(0, total, c.batch_size):
                    idx = perm[start:start + c.batch_size]
                    v = seq_forward(self.vf, feats[idx]).squeeze(-1)
                    loss = torch.nn.functional.mse_loss(v, f_ret[idx])
                    self.value_opt.zero_grad(set_to_none=True)  # type: ignore[union-attr]
                    loss.backward()
                    self.value_opt.step()  # type: ignore[union-attr]

    def _entropy_now(self, f_obs: Any) -> torch.Tensor:
        """Mean policy entropy over (up to 256 of) the rollout's observations, for the diagnostics."""
        o = _slice(f_obs, 0, 256)
        return self.pi.log_prob_entropy(self.perception(o), torch.zeros(
            _first(o).shape[0], *(() if self.discrete else (self.act_dim,)), device=self.device,
            dtype=torch.long if self.discrete else torch.float32))[1].mean()

    def _minibatch(self, b: RolloutSamples) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One gradient step; returns (detached [policy loss, value loss], log ratio, grad norm)."""
        c = self.config
        tiles = None
        if self.fused is not None:
            tiles = self.fused.tiles()
            latent, out, v = self.fused.forward(tiles, b.obs.reshape(b.obs.shape[0], -1).float())
            logp, ent = self._logp_ent(latent, out, self.fused.extra(tiles), b.actions, c.ent_coef != 0.0)
        else:
            feat = self.perception(b.obs)
            if c.ent_coef != 0.0:
                logp, ent = self.pi.log_prob_entropy(feat, b.actions)
            else:
                logp, ent = self._log_prob(feat, b.actions), None
            v = seq_forward(self.vf, feat).squeeze(-1)
        adv = b.advantages
        if c.normalize_advantage and adv.numel() > 1:
            std, mean = torch.std_mean(adv)
            adv = (adv - mean) / (std + 1e-8)
        log_ratio = logp - b.old_log_prob
        ratio = log_ratio.exp()
        pg = -torch.min(adv * ratio, adv * ratio.clamp(1 - c.clip_range, 1 + c.clip_range)).mean()
        if c.clip_range_vf is not None:
            v = b.old_values + (v - b.old_values).clamp(-c.clip_range_vf, c.clip_range_vf)
        vloss = torch.nn.functional.mse_loss(v, b.returns)
        loss = pg + c.vf_coef * vloss
        if ent is not None:
            loss = loss - c.ent_coef * ent.mean()
        if tiles is not None:
            self.fused.set_grad(loss, tiles)  # type: ignore[union-attr]
        else:
            self.flat.set_grad(loss)
        gn = self.flat.clip_grad_norm_(c.max_grad_norm)
        self.flat.adam_step(self.opt)
        return torch.stack([pg.detach(), vloss.detach()]), log_ratio.detach(), gn

    def _logp_ent(self, latent: torch.Tensor, out: torch.Tensor, extra: list[torch.Tensor], actions: torch.Tensor,
                  with_ent: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """log pi(a|s) (and the entropy when asked) from the fused pass's actor latent and output."""
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            logp = logp_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
            return logp, (-(logp_all.exp() * logp_all).sum(-1) if with_ent else None)
        log_std_param = extra[0]
        if self.sde:
            var = torch.addmm(_scalar(GaussianActor.SDE_EPS, latent), latent.detach().square(),
                              torch.exp(2.0 * log_std_param))
            log_std = 0.5 * torch.log(var)
            logp = -0.5 * ((actions - out).square() / var).sum(-1) - log_std.sum(-1) - self._log_norm
        else:
            log_std = log_std_param.expand_as(out)
            logp = (-0.5 * ((actions - out) * torch.exp(-log_std_param)).square()).sum(-1) - log_std_param.sum() - self._log_norm
        ent = (log_std.sum(-1) + self.act_dim * (0.5 + 0.5 * math.log(2 * math.pi))) if with_ent else None
        return logp, ent

    def _log_prob(self, feat: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """log pi(a|s) without the entropy (what the loss needs when ent_coef is 0)."""
        if self.discrete or not self.sde:
            return self.pi.log_prob_entropy(feat, actions)[0]
        latent, mu = self.pi.latent_mean(feat)
        std = self.pi.std(latent)
        return (-0.5 * ((actions - mu) / std).square() - torch.log(std)).sum(-1) - self._log_norm

    # -- the pipeline learner and the external learner ----------------------------------------------
    def forward(self, t: Transition) -> dict | None:
        """Collect one transition of a single stream; update after ``n_steps`` of them."""
        self._stream.append(t)
        self.num_timesteps += 1
        if len(self._stream) >= self.config.n_steps:
            batch, self._stream = TransitionBatch.from_transitions(self._stream), []
            return self.update_from_rollout(batch)
        return None

    def update_from_rollout(self, rollout: TransitionBatch) -> dict:
        """One PPO update from a time-ordered rollout of one env stream (env-unit actions, raw obs,
        ``next_obs`` present). Values and log-probabilities are recomputed with the current policy,
        which is the policy that collected it when actors are in sync."""
        if rollout.next_obs is None:
            raise ConfigError("update_from_rollout: the rollout needs next_obs (to bootstrap the last step)")
        self.input_spec.check(rollout, "update_from_rollout.rollout")  # type: ignore[union-attr]
        n = len(rollout)
        if n < 2:
            raise ConfigError(f"update_from_rollout: expected at least 2 transitions, got {n}")
        c = self.config
        obs = rollout.obs
        if self.obs_norm is not None:
            self.obs_norm.update(obs)
        with torch.no_grad():
            obs_t = self._obs_to_tensor(obs)
            nxt_t = self._obs_to_tensor(rollout.next_obs)
            feat = self.perception(obs_t)
            if self.discrete:
                act = torch.as_tensor(np.asarray(rollout.action, dtype=np.int64) - self.action_offset, device=self.device)
            else:
                act = torch.as_tensor(np.asarray(rollout.action, dtype=np.float32), device=self.device)
            logp, _ = self.pi.log_prob_entropy(feat, act)
            values = self.vf(feat).squeeze(-1)
            next_v = self.vf(self.perception(nxt_t)).squeeze(-1)
        rew = np.asarray(rollout.reward, dtype=np.float32).copy()
        term, trunc = np.asarray(rollout.terminated), np.asarray(rollout.truncated)
        if self.reward_norm is not None:  # one stream: its own discounted-return accumulator, shared statistics
            rn, ret = self.reward_norm, getattr(self, "_stream_ret", 0.0)
            for i in range(n):
                ret = ret * c.gamma + float(rew[i])
                rn.rms.update(np.array([ret]))
                std = float(np.sqrt(rn.rms.var.item() + rn.eps))
                rew[i] = np.clip(rew[i] / std, -rn.clip, rn.clip)
                ret = 0.0 if (term[i] or trunc[i]) else ret
            self._stream_ret = ret
        nv = next_v.cpu().numpy()
        boot = trunc & ~term
        rew[boot] += c.gamma * nv[boot]
        done = (term | trunc).astype(np.float32)
        starts = np.concatenate([[0.0], done[:-1]]).astype(np.float32)
        col = lambda x: torch.as_tensor(x).reshape(n, 1).float()
        adv, ret = self._gae(col(rew), values.cpu().reshape(n, 1), col(starts),
                             next_v[-1:].cpu(), torch.tensor([done[-1]], dtype=torch.float32))
        o = {k: v.cpu().unsqueeze(1) for k, v in obs_t.items()} if isinstance(obs_t, dict) else obs_t.cpu().unsqueeze(1)
        a = act.cpu().unsqueeze(1)
        out = self._update(o, a, values.cpu().reshape(n, 1), logp.cpu().reshape(n, 1), adv, ret)
        self._last_batch_rewards = torch.as_tensor(rew)
        return out

    # -- diagnostics, deploy, checkpoints -----------------------------------------------------------
    def _diagnose(self, m: dict[str, float]) -> None:
        r = getattr(self, "_last_batch_rewards", None)
        if r is not None:
            self.diagnostics.rewards(r.numpy() if isinstance(r, torch.Tensor) else r)
        if "grad_norm/policy" in m:
            self.diagnostics.grad_norms({"policy+value": m["grad_norm/policy"]})
        super()._diagnose(m)  # entropy and value loss (ActorCritic)

    def _extra_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        counted = self._last_obs is not None and self._last_obs is self._counted_obs
        return {"episode_starts": self._episode_starts.tolist(), "last_obs_counted": counted}, {}

    def _load_extra_state(self, meta: dict, tensors: Any) -> None:
        if "episode_starts" in meta and len(meta["episode_starts"]) == len(self._episode_starts):
            self._episode_starts = np.asarray(meta["episode_starts"], dtype=np.float32)
        if meta.get("last_obs_counted"):  # already in the restored statistics: not added a second time
            self._counted_obs = self._last_obs
