"""SAC (Haarnoja et al. 2018): twin critics (one batched ensemble), target critics by Polyak
averaging, automatic entropy tuning. Defaults are Stable-Baselines3's, which RL Zoo tunes per env
(configs/sac_pendulum.yaml); the update is SB3's step (tests/algos/test_sac_update.py).

Three ways to the same step: for flat observations (dicts of vectors flattened), MLPs and an fp32 critic, `NativeSACUpdate` (the
step compiled, on the CPU, where it could be built) or `SACUpdate` (its backward written out in
Python; `GSDESACUpdate` with gSDE); otherwise (images or other perception, other activations, a reduced-precision
critic) autograd."""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import nn

from tinker_core.algos import native as native_mod
from tinker_core.algos.optim import make_adam
from tinker_core.algos.buffers import ReplaySamples
from tinker_core.algos.networks import (LOG_STD_MAX, LOG_STD_MIN, EnsembleQ, GSDESquashedActor, ScaledTanhHead,
                                        SquashedGaussianActor)
from tinker_core.algos.np_mlp import NumpyMLP
from tinker_core.algos.off_policy import OffPolicyAlgorithm, OffPolicyConfig
from tinker_core.algos.sac_native import NativeSACUpdate
from tinker_core.algos.sac_update import SACUpdate
from tinker_core.amp import ModulePrecision
from tinker_core.errors import CheckpointError, ConfigError
from tinker_core.nn import build_perception
from tinker_core.nn.encoders import Flatten


@dataclass
class SACConfig(OffPolicyConfig):
    ent_coef: str = "auto"
    """'auto' (learned, starting at 1.0), 'auto_X' (learned, starting at X) or a fixed number as a string."""
    target_entropy: float | None = None
    """Entropy target of the automatic tuning (None: -action_dim)."""
    target_update_interval: int = 1
    """Gradient steps between two target-critic updates."""
    n_critics: int = 2
    """Critics in the ensemble; the target takes their minimum."""
    critic_precision: str = "fp32"
    """Critic compute precision: fp32, bf16, fp16 (CUDA) or auto (fp16 on CUDA, bf16 on CPU); the actor stays fp32."""
    use_sde: bool = False
    """Generalized state-dependent exploration (gSDE), as SB3's SAC ``use_sde``: the actor's noise is ``latent @ M``
    with M held while acting (see sde_sample_freq); one M per gradient step, on the same paths as without."""
    sde_sample_freq: int = -1
    """Env steps between two acting-noise draws with gSDE (-1: once per collection, i.e. after each training)."""
    use_sde_at_warmup: bool = False
    """With gSDE, act with the gSDE policy instead of uniform random actions before learning_starts."""
    log_std_init: float = -3.0
    """Initial log std of gSDE's noise-matrix entries (SB3's SAC default; only used with use_sde)."""
    td3bc_alpha: float | None = None
    """None: plain SAC. A number: the actor also imitates the batch's demonstration rows (``train_on_batch``'s
    ``demo_mask``), as TD3+BC (Fujimoto & Gu, 2021) does: its loss becomes
    ``alpha * (ent_coef * logp - Q) / mean|Q| + mean ||tanh(mu) - a_demo||^2``, so a policy pretrained by imitation
    is fine-tuned by RL without first being unlearned. Runs on the autograd step (the written-out ones have no
    imitation term)."""
    prior_anchor: bool = True
    """With ``td3bc_alpha``: the batch's other rows (live data) imitate the actor the fine-tuning started from (a
    frozen copy, taken at the first update and kept in the checkpoint), as the demonstration rows imitate the
    demonstrations. Without it, the states the demonstrations never show (a camera's estimates, a lagged robot's
    poses) are shaped by the RL term alone, and the policy the robot runs drifts there. The camera sorter fine-tuned
    through ROS 2 on a lagged robot, 5 runs: 462/500 objects and 32 e-stops, anchored 478/500 and 15, against 480/500
    and 12 without fine-tuning (docs/sim2real/vision_sort.md, "Anchored to the starting actor")."""
    compiled_step: bool = True
    """On the CPU, run the MLP step compiled (sac_native.py; built once per machine) where it applies;
    False, or no compiler, runs the same step in Python."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.ent_coef = str(self.ent_coef)
        if not self.ent_coef.startswith("auto"):
            try:
                v = float(self.ent_coef)
            except ValueError:
                raise ConfigError(f"ent_coef: expected 'auto', 'auto_X' or a number, got {self.ent_coef!r}") from None
            if v < 0:
                raise ConfigError(f"ent_coef: expected >= 0, got {v}")
        if self.td3bc_alpha is not None and not self.td3bc_alpha > 0:
            raise ConfigError(f"td3bc_alpha: expected a number > 0 (or null: plain SAC), got {self.td3bc_alpha}")
        if self.n_critics < 1:
            raise ConfigError(f"n_critics: expected >= 1, got {self.n_critics}")
        if self.sde_sample_freq == 0 or self.sde_sample_freq < -1:
            raise ConfigError(f"sde_sample_freq: expected -1 (once per collection) or >= 1, got {self.sde_sample_freq}")


class SAC(OffPolicyAlgorithm):
    """Soft Actor-Critic for continuous actions."""

    algo_name = "sac"
    config_class = SACConfig
    supports_discrete = False
    config: SACConfig

    def _build_networks(self) -> None:
        c = self.config
        self.act_dim = int(np.prod(self.action_spec.shape))
        kind = self._perception_kind()
        self.actor_perception = build_perception(self.obs_spec, kind)
        self.critic_perception = build_perception(self.obs_spec, kind)
        self.sde = bool(c.use_sde)
        self._sde_steps, self._sde_due = 0, True
        if self.sde:
            self.actor: SquashedGaussianActor | GSDESquashedActor = GSDESquashedActor(
                self.actor_perception.features_dim, c.net_arch, self.act_dim, c.activation, c.log_std_init)
        else:
            self.actor = SquashedGaussianActor(self.actor_perception.features_dim, c.net_arch, self.act_dim, c.activation)
        self.critic = EnsembleQ(c.n_critics, self.critic_perception.features_dim + self.act_dim, c.net_arch, c.activation)
        self._anchor: list[nn.ModuleDict] = []  # a list keeps it out of the weights: it is the checkpoint's extra
        self.critic_perception_target = copy.deepcopy(self.critic_perception)
        self.critic_target = copy.deepcopy(self.critic)
        for p in list(self.critic_target.parameters()) + list(self.critic_perception_target.parameters()):
            p.requires_grad_(False)
        self.auto_ent = c.ent_coef.startswith("auto")
        init = float(c.ent_coef.split("_")[1]) if "_" in c.ent_coef else 1.0
        self.log_ent_coef = nn.Parameter(torch.tensor([math.log(init if self.auto_ent else max(float(c.ent_coef), 1e-30))]),
                                         requires_grad=self.auto_ent)
        self.target_entropy = float(-self.act_dim if c.target_entropy is None else c.target_entropy)
        plain = type(self.actor_perception) is Flatten and type(self.critic_perception) is Flatten
        self._update: SACUpdate | NativeSACUpdate | None = None
        why = ("td3bc_alpha is set (the imitation term runs on autograd)" if c.td3bc_alpha is not None else
               "the perception is not a plain Flatten (image or encoder observations)" if not plain else
               "the networks are not what the written-out step supports (an MLP of Linear layers "
               "with ReLU or Tanh)" if not SACUpdate.supports(self.actor, self.critic) else "")
        if not why:
            native = (NativeSACUpdate.create(self.actor, self.critic, self.critic_target, self.device)
                      if c.compiled_step else None)
            self._update = native or SACUpdate.of(self.actor, self.critic, self.critic_target)
            why = ("" if native else "compiled_step=False" if not c.compiled_step
                   else "not on the CPU in float32, or TINKER_NATIVE=0")
        native_mod.note_update_path("SAC", self.update_path, why)

    @property
    def update_path(self) -> str:
        """Which step trains: ``compiled`` (one C++ call), ``python step`` (the written-out backward) or
        ``autograd``; ``python step`` too when the compiled step could not be built on this machine."""
        if isinstance(self._update, NativeSACUpdate):
            return "python step" if self._update._ops is False else "compiled"
        return "python step" if self._update is not None else "autograd"

    def _build_optimizers(self) -> None:
        c = self.config
        self.actor_params = list(self.actor_perception.parameters()) + list(self.actor.parameters())
        self.critic_params = list(self.critic_perception.parameters()) + list(self.critic.parameters())
        self.actor_opt = make_adam(self.actor_params, c.learning_rate)
        self.critic_opt = make_adam(self.critic_params, c.learning_rate)
        self.ent_opt = make_adam([self.log_ent_coef], c.learning_rate) if self.auto_ent else None
        self._target_src = self.critic_params
        self._target_dst = list(self.critic_perception_target.parameters()) + list(self.critic_target.parameters())
        self.critic_amp = ModulePrecision("critic", c.critic_precision, self.device)
        self._np_actor = self._numpy_actor()

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor": self.actor_opt, "critic": self.critic_opt, "ent_coef": self.ent_opt}  # type: ignore[dict-item]

    def _settable(self) -> dict[str, Callable[[float], None]]:
        return {"lr": self.set_learning_rate, "ent_coef": self.set_ent_coef}

    def set_ent_coef(self, value: float) -> None:
        """Fix the entropy coefficient at ``value`` (turns automatic tuning off)."""
        with torch.no_grad():
            self.log_ent_coef.fill_(math.log(max(value, 1e-30)))
        self.auto_ent = False
        self.config.ent_coef = repr(float(value))

    def _numpy_actor(self) -> tuple[NumpyMLP, tuple[np.ndarray, ...]] | None:
        """numpy views of the actor (trunk, then mean and log-std heads, weights transposed) for
        acting one env step at a time, where `SACUpdate` applies (flat observations, plain MLP) on
        the CPU; else None. The views share storage with the parameters, which are updated in place."""
        if self.device.type != "cpu" or self._update is None or self.sde:  # gSDE acts with its held matrices
            return None
        trunk = NumpyMLP.of(self.actor.trunk)
        mu, ls = self.actor.mu, self.actor.log_std
        if trunk is None:
            return None
        return trunk, tuple(t.detach().numpy() for t in (mu.weight.t(), mu.bias, ls.weight.t(), ls.bias))

    def _act_raw(self, obs: Any, deterministic: bool) -> np.ndarray:
        if self._np_actor is None or (isinstance(obs, Mapping) and self._flat is None):
            return super()._act_raw(obs, deterministic)
        x = self._prepare_obs(obs if isinstance(obs, Mapping) else np.asarray(obs))  # normalized, dicts flattened
        return self._act_np(x.reshape(x.shape[0], -1).astype(np.float32, copy=False), deterministic)

    def _act_np(self, x: np.ndarray, deterministic: bool) -> np.ndarray:
        """The torch path's arithmetic in numpy (same draws from the same generator), for flat float32
        observations [n, d]: at one env step's batch a torch call costs more than its arithmetic."""
        trunk, (wm, bm, ws, bs) = self._np_actor  # type: ignore[misc]
        h = trunk(x)
        u = h @ wm
        u += bm
        if not deterministic:
            log_std = h @ ws
            log_std += bs
            np.clip(log_std, LOG_STD_MIN, LOG_STD_MAX, out=log_std)
            u += np.exp(log_std, out=log_std) * torch.randn(u.shape, generator=self.gen).numpy()
        low, high = self.action_spec.low, self.action_spec.high
        return (low + (np.tanh(u, out=u) + 1.0) * 0.5 * (high - low)).astype(self.action_spec.dtype)

    def _act(self, obs: Any, deterministic: bool) -> np.ndarray:
        feat = self.actor_perception(obs)
        if not deterministic and self.sde:
            self._sde_acting_noise(feat.shape[0])
        a = self.actor.deterministic(feat) if deterministic else self.actor.sample_action(feat, self.gen)
        return self._env_action(self._scale_action(a))

    def _sde_acting_noise(self, n: int) -> None:
        """Draw the acting matrices as SB3's SAC does: at the start of each collection (after each training)
        and every ``sde_sample_freq`` steps of it."""
        freq = self.config.sde_sample_freq
        a = self.actor
        if (self._sde_due or a.act_matrices is None or a.act_matrices.shape[0] != n  # type: ignore[union-attr]
                or (freq > 0 and self._sde_steps % freq == 0)):
            if self._sde_due:
                self._sde_steps = 0
            a.reset_acting_noise(n, self.gen)  # type: ignore[union-attr]
            self._sde_due = False
        self._sde_steps += 1

    def _train(self, gradient_steps: int) -> None:
        super()._train(gradient_steps)
        self._sde_due = True  # SB3 draws new acting noise at the start of the next collection

    def _explore_at_warmup(self) -> bool:
        return self.sde and self.config.use_sde_at_warmup

    def _train_step(self, s: ReplaySamples, weights: torch.Tensor | None = None) -> torch.Tensor:
        if self._update is not None and not self.critic_amp.enabled:
            return self._train_step_mlp(s, weights)
        c = self.config
        if self.sde:  # a new matrix per gradient step (log_std changed), one for the whole minibatch
            self.actor.reset_train_noise(self.gen)  # type: ignore[union-attr]
        feat = self.actor_perception(s.obs)
        a_pi, logp_pi = self.actor.sample(feat, self.gen)
        # the coefficient of this step is the one before its own update (as in SB3); its loss is
        # independent of the critic, so it is back-propagated together with the actor's below
        ent_coef = self.log_ent_coef.detach().exp()
        ent_loss = -(self.log_ent_coef * (logp_pi.detach() + self.target_entropy)).mean() if self.auto_ent else None
        with torch.no_grad():
            next_a, next_logp = self.actor.sample(self.actor_perception(s.next_obs), self.gen)
            with self.critic_amp.autocast():
                tq = self.critic_target(self.critic_perception_target(s.next_obs), next_a)
            next_q = tq.float().min(0).values - ent_coef * next_logp
            target = s.rewards + (1.0 - s.dones) * c.gamma * next_q
        with self.critic_amp.autocast():
            cfeat = self.critic_perception(s.obs)
            q = self.critic(cfeat, s.actions).float()
        td = q - target
        per = td.square() if weights is None else td.square() * weights
        critic_loss = 0.5 * per.mean(1).sum()
        self.critic_amp.step(critic_loss, self.critic_opt, self.critic_params)
        # actor: gradients flow to the actions only (critic weights detached, critic not re-stepped)
        q_pi = self.critic(cfeat.detach(), a_pi, detach_params=True).min(0).values
        actor_loss = (ent_coef * logp_pi - q_pi).mean()
        imitation = None
        if c.td3bc_alpha is not None:
            actor_loss = c.td3bc_alpha * actor_loss / q_pi.abs().mean().detach().clamp(min=1e-6)
            imitation = self._imitation_loss(feat, s.actions, s.demo, s.obs)
            actor_loss = actor_loss + imitation
        self.actor_opt.zero_grad(set_to_none=True)
        if ent_loss is not None:
            self.ent_opt.zero_grad(set_to_none=True)  # type: ignore[union-attr]
            (actor_loss + ent_loss).backward()  # disjoint parameters: each gets its own loss's gradient
            self.ent_opt.step()  # type: ignore[union-attr]
        else:
            actor_loss.backward()
        self.actor_opt.step()
        if self.sde:
            self.actor.train_matrix = None  # type: ignore[union-attr]  # its graph is spent
        metrics = {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(),
                   "ent_coef": ent_coef.squeeze(), "entropy": -logp_pi.detach().mean(), "q_mean": q.detach().mean()}
        if imitation is not None:
            metrics["imitation_loss"] = imitation.detach()
        self._end_update(metrics)
        return td.detach().abs().max(0).values

    def _imitation_loss(self, feat: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None,
                        obs: Any) -> torch.Tensor:
        """TD3+BC's term: mean squared distance of the actor's mean action to the demonstrations' (the rows
        ``mask`` marks, the batch's ``ReplaySamples.demo``), and with ``prior_anchor`` of the other rows to the
        starting actor's (`anchor_action`, on the prepared ``obs``); nothing to imitate: 0."""
        demo = mask if mask is not None else torch.zeros(feat.shape[0], dtype=torch.bool, device=feat.device)
        if self.config.prior_anchor:
            mean_action, target = self.actor.deterministic(feat), torch.where(demo[:, None], actions,
                                                                              self.anchor_action(obs))
        elif bool(demo.any()):
            mean_action, target = self.actor.deterministic(feat[demo]), actions[demo]
        else:
            return feat.new_zeros(())
        return (mean_action - target.clamp(-0.999, 0.999)).square().sum(-1).mean()

    def anchor_action(self, obs: Any) -> torch.Tensor:
        """The starting actor's mean action (in [-1, 1]) for prepared observations: ``prior_anchor``'s target. The
        starting actor is frozen at the first call (the first update) unless a checkpoint brought it."""
        if not self._anchor:
            self._anchor.append(self._actor_copy())
        anchor = self._anchor[0]
        with torch.no_grad():
            return anchor["actor"].deterministic(anchor["perception"](obs))

    @property
    def anchor(self) -> nn.ModuleDict | None:
        """``prior_anchor``'s starting actor (its perception and actor, frozen); None until the first update."""
        return self._anchor[0] if self._anchor else None

    def _actor_copy(self) -> nn.ModuleDict:
        return copy.deepcopy(nn.ModuleDict({"perception": self.actor_perception, "actor": self.actor})).requires_grad_(
            False)

    def _train_step_mlp(self, s: ReplaySamples, weights: torch.Tensor | None) -> torch.Tensor:
        """``_train_step`` for flat observations, MLPs and an fp32 critic: the same step with the
        backward written out, its Adam steps and the target update (`NativeSACUpdate` or `SACUpdate`)."""
        c = self.config
        due = (self.num_updates + 1) % c.target_update_interval == 0
        with torch.no_grad():
            out = self._update.train_step(  # type: ignore[union-attr]
                s.obs, s.actions, s.next_obs, s.rewards, s.dones, weights, self.log_ent_coef,
                self.ent_opt if self.auto_ent else None, self.target_entropy, c.gamma, self.gen, self.critic_opt,
                self.actor_opt, (self._target_dst, self._target_src, c.tau) if due else None)
        self._end_update({"critic_loss": out.critic_loss, "actor_loss": out.actor_loss, "ent_coef": out.ent_coef,
                          "entropy": out.entropy, "q_mean": out.q_mean}, targets_updated=True)
        return out.td_abs

    def _end_update(self, metrics: dict[str, torch.Tensor], targets_updated: bool = False) -> None:
        """What both paths do after their optimizer steps: gradient norms (every 50th update: diagnostics
        need no more), count, Polyak-average the targets (unless the step did), keep the metrics."""
        if self.num_updates % 50 == 0:
            metrics["grad_norm/critic"] = self._grad_norm(self.critic_params)
            metrics["grad_norm/actor"] = self._grad_norm(self.actor_params)
        self.num_updates += 1
        if not targets_updated and self.num_updates % self.config.target_update_interval == 0:
            with torch.no_grad():
                torch._foreach_lerp_(self._target_dst, self._target_src, self.config.tau)
        self._metrics = metrics

    @staticmethod
    def _grad_norm(params: list[nn.Parameter]) -> torch.Tensor:
        """Global gradient norm."""
        g = [p.grad for p in params if p.grad is not None]
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(g))) if g else torch.zeros(())

    def _diagnose(self, m: dict[str, float]) -> None:
        super()._diagnose(m)
        if "entropy" in m:
            # a squashed Gaussian with std ~ 1e-3 per dimension: effectively deterministic
            self.diagnostics.entropy(m["entropy"], floor=-7.0 * self.act_dim)

    def _actor_net(self) -> nn.Module:
        return nn.ModuleDict({"perception": self.actor_perception, "actor": self.actor})

    def _deploy_modules(self) -> tuple[nn.Module, nn.Module]:
        return self.actor_perception, ScaledTanhHead(self.actor, self.act_low, self.act_high)

    def _extra_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        meta = {"auto_ent": self.auto_ent, "critic_amp": self.critic_amp.state()}
        if self.anchor is None:
            return meta, {}
        return {**meta, "anchor": True}, {f"anchor.{k}": v.detach().cpu().numpy()
                                          for k, v in self.anchor.state_dict().items()}

    def _load_extra_state(self, meta: dict, tensors: Any) -> None:
        self.auto_ent = bool(meta.get("auto_ent", self.auto_ent))
        if "critic_amp" in meta:
            self.critic_amp.load_state(meta["critic_amp"])
        if meta.get("anchor"):  # prior_anchor's starting actor, frozen at the first update before this save
            anchor = self._actor_copy()
            state = {k[len("anchor."):]: torch.as_tensor(v) for k, v in tensors.items() if k.startswith("anchor.")}
            try:
                anchor.load_state_dict(state)
            except RuntimeError as e:
                raise CheckpointError(f"SAC checkpoint: prior_anchor's starting actor does not fit this actor: {e}") \
                    from None
            self._anchor[:] = [anchor]
