"""PPO (Schulman et al. 2017): clipped surrogate, GAE, optional value clipping, observation and
reward normalization, vectorized envs, discrete and continuous actions. Defaults are
Stable-Baselines3's; RL Zoo's Pendulum-v1 tuning is in configs/ppo_pendulum.yaml."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import nn

from tinker_core.algos.base import AlgoConfig, Algorithm
from tinker_core.algos.buffers import RolloutSamples, _alloc, _put, _take
from tinker_core.algos.networks import ArgmaxHead, CategoricalActor, ClippedMeanHead, GaussianActor
from tinker_core.algos.normalize import RewardNormalizer
from tinker_core.errors import ConfigError
from tinker_core.nn import build_perception, mlp
from tinker_core.transition import Transition, TransitionBatch


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

    def __post_init__(self) -> None:
        if self.net_arch is None:
            self.net_arch = [64, 64]
        super().__post_init__()
        if self.n_steps * self.n_envs < 2:
            raise ConfigError(f"n_steps * n_envs must be > 1, got n_steps={self.n_steps}, n_envs={self.n_envs}")
        if self.batch_size < 1 or self.batch_size > self.n_steps * self.n_envs:
            raise ConfigError(f"batch_size: expected 1..n_steps*n_envs={self.n_steps * self.n_envs}, got {self.batch_size}")
        if self.n_epochs < 1:
            raise ConfigError(f"n_epochs: expected >= 1, got {self.n_epochs}")
        if not 0 <= self.gae_lambda <= 1:
            raise ConfigError(f"gae_lambda: expected 0..1, got {self.gae_lambda}")


class PPO(Algorithm):
    """Proximal Policy Optimization."""

    algo_name = "ppo"
    config_class = PPOConfig
    config: PPOConfig

    def _build_networks(self) -> None:
        c = self.config
        self.perception = build_perception(self.obs_spec, c.perception)
        fdim = self.perception.features_dim
        if self.discrete:
            self.pi = CategoricalActor(fdim, c.net_arch, self.n_actions, c.activation)
            out = self.pi.logits[-1]
        else:
            self.act_dim = int(np.prod(self.action_spec.shape))
            self.pi = GaussianActor(fdim, c.net_arch, self.act_dim, c.activation, c.log_std_init)
            out = self.pi.mean[-1]
        self.vf = mlp(fdim, c.net_arch, 1, c.activation)
        if c.ortho_init:
            for m in list(self.pi.modules()) + list(self.vf.modules()):
                if isinstance(m, nn.Linear):
                    nn.init.orthogonal_(m.weight, math.sqrt(2))
                    nn.init.zeros_(m.bias)
            nn.init.orthogonal_(out.weight, 0.01)
            nn.init.orthogonal_(self.vf[-1].weight, 1.0)
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

    def _build_optimizers(self) -> None:
        self.params = [p for p in self.parameters() if p.requires_grad]
        from tinker_core.algos.base import make_adam

        self.opt = make_adam(self.params, self.config.learning_rate, eps=1e-5)

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"policy": self.opt}

    def _settable(self) -> dict[str, Callable[[float], None]]:
        return {"lr": self.set_learning_rate, "ent_coef": self._set_ent_coef, "clip_range": self._set_clip}

    def _set_ent_coef(self, v: float) -> None:
        self.config.ent_coef = float(v)

    def _set_clip(self, v: float) -> None:
        self.config.clip_range = float(v)

    # -- acting -------------------------------------------------------------------------------------
    def _sample(self, feat: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            logits = self.pi.logits(feat)
            u = torch.rand(logits.shape, generator=self.gen).to(logits.device)
            return torch.argmax(logits - torch.log(-torch.log(u.clamp_min(1e-20))), dim=-1)  # Gumbel-max
        mu = self.pi.mean(feat)
        eps = torch.randn(mu.shape, generator=self.gen).to(mu.device)
        return mu + self.pi.log_std.exp() * eps

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
    def _iteration(self) -> None:
        c, vec = self.config, self.vec_env
        self.train(False)
        with torch.no_grad():
            for t in range(c.n_steps):
                obs_t = self._obs_to_tensor(self._last_obs, update_norm=True)
                feat = self.perception(obs_t)
                a = self._sample(feat)
                logp, _ = self.pi.log_prob_entropy(feat, a)
                v = self.vf(feat).squeeze(-1)
                next_obs, rew, term, trunc, final = vec.step(self._to_env(a))  # type: ignore[union-attr]
                rew = self.reward_norm(rew, term | trunc) if self.reward_norm is not None else rew.astype(np.float32)
                rew = np.asarray(rew, dtype=np.float32)
                for i in np.flatnonzero(trunc & ~term):  # time limit: bootstrap from the final observation
                    f = final[i]
                    fo = {k: np.asarray(x)[None] for k, x in f.items()} if isinstance(f, dict) else np.asarray(f)[None]
                    rew[i] += c.gamma * float(self.vf(self.perception(self._obs_to_tensor(fo))).squeeze())
                _put(self.buf_obs, t, self._stored_obs(obs_t))
                self.buf_actions[t] = a.cpu()
                self.buf_rewards[t] = torch.from_numpy(rew)
                self.buf_starts[t] = torch.from_numpy(self._episode_starts)
                self.buf_values[t] = v.cpu()
                self.buf_logp[t] = logp.cpu()
                self._episode_starts = (term | trunc).astype(np.float32)
                self._last_obs = next_obs
            last_v = self.vf(self.perception(self._obs_to_tensor(self._last_obs))).squeeze(-1).cpu()
        self.num_timesteps += c.n_steps * vec.n  # type: ignore[union-attr]
        adv, ret = self._gae(self.buf_rewards, self.buf_values, self.buf_starts, last_v,
                             torch.from_numpy(self._episode_starts))
        self._update(self.buf_obs, self.buf_actions, self.buf_values, self.buf_logp, adv, ret)

    def _stored_obs(self, obs_t: Any) -> Any:
        if isinstance(obs_t, Mapping):
            return {k: v.cpu() for k, v in obs_t.items()}
        return obs_t.cpu()

    def _gae(self, rewards: torch.Tensor, values: torch.Tensor, starts: torch.Tensor, last_v: torch.Tensor,
             last_start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        n = rewards.shape[0]
        adv = torch.zeros_like(rewards)
        gae = torch.zeros_like(last_v)
        r, v, s = rewards.numpy(), values.numpy(), starts.numpy()
        a = adv.numpy()
        g = gae.numpy()
        lv, ls = last_v.numpy(), last_start.numpy()
        for t in range(n - 1, -1, -1):
            nonterm = 1.0 - (ls if t == n - 1 else s[t + 1])
            nv = lv if t == n - 1 else v[t + 1]
            delta = r[t] + c.gamma * nv * nonterm - v[t]
            g[:] = delta + c.gamma * c.gae_lambda * nonterm * g
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
        sums = torch.zeros(6)
        count = 0
        for _ in range(c.n_epochs):
            perm = torch.randperm(total, generator=self.gen).to(self.device)
            for start in range(0, total, c.batch_size):
                idx = perm[start:start + c.batch_size]
                b = RolloutSamples(_take(f_obs, idx), f_act[idx], f_val[idx], f_logp[idx], f_adv[idx], f_ret[idx])
                stats = self._minibatch(b)
                sums += stats
                count += 1
        self.num_updates += count
        explained = 1.0 - (f_ret - f_val).var() / f_ret.var().clamp_min(1e-8)
        m = sums / max(count, 1)
        self._metrics = {"policy_loss": m[0], "value_loss": m[1], "entropy": m[2], "approx_kl": m[3],
                         "clip_fraction": m[4], "grad_norm/policy": m[5], "explained_variance": explained,
                         "std": self.pi.log_std.detach().exp().mean() if not self.discrete else torch.tensor(0.0)}
        self._last_batch_rewards = self.buf_rewards
        return {k: float(v) for k, v in self._metrics.items()}

    def _minibatch(self, b: RolloutSamples) -> torch.Tensor:
        c = self.config
        feat = self.perception(b.obs)
        logp, ent = self.pi.log_prob_entropy(feat, b.actions)
        v = self.vf(feat).squeeze(-1)
        adv = b.advantages
        if c.normalize_advantage and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        log_ratio = logp - b.old_log_prob
        ratio = log_ratio.exp()
        pg = -torch.min(adv * ratio, adv * ratio.clamp(1 - c.clip_range, 1 + c.clip_range)).mean()
        if c.clip_range_vf is not None:
            v = b.old_values + (v - b.old_values).clamp(-c.clip_range_vf, c.clip_range_vf)
        vloss = (b.returns - v).square().mean()
        ent_mean = ent.mean()
        loss = pg + c.vf_coef * vloss - c.ent_coef * ent_mean
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(self.params, c.max_grad_norm, foreach=True)
        self.opt.step()
        with torch.no_grad():
            kl = ((ratio - 1) - log_ratio).mean()
            cf = ((ratio - 1).abs() > c.clip_range).float().mean()
            return torch.stack([pg.detach(), vloss.detach(), ent_mean.detach(), kl, cf, gn])

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
            self.obs_norm.rms.update(np.asarray(obs))
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
        if "entropy" in m:
            floor = 0.01 * math.log(self.n_actions) if self.discrete else -2.0 * self.act_dim
            self.diagnostics.entropy(m["entropy"], floor=floor)
        if "value_loss" in m:
            self.diagnostics.value_loss(m["value_loss"])

    def _actor_net(self) -> nn.Module:
        return nn.ModuleDict({"perception": self.perception, "pi": self.pi})

    def _deploy_modules(self) -> tuple[nn.Module, nn.Module]:
        if self.discrete:
            return self.perception, ArgmaxHead(self.pi.logits, self.action_offset)
        return self.perception, ClippedMeanHead(self.pi.mean, self.act_low, self.act_high)

    def _extra_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        return {"episode_starts": self._episode_starts.tolist()}, {}

    def _load_extra_state(self, meta: dict, tensors: Any) -> None:
        if "episode_starts" in meta and len(meta["episode_starts"]) == len(self._episode_starts):
            self._episode_starts = np.asarray(meta["episode_starts"], dtype=np.float32)
