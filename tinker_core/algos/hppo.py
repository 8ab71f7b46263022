"""Hierarchical PPO with options: a high level picks one of K options whenever the running one ends; the option
acts in the env's action space until it ends (after ``max_duration`` steps, or when a learned termination
beta(s, o) says so, as in option-critic). Both levels learn with PPO's clipped surrogate:

- the high level on the semi-MDP: one transition per option, its reward summed over the option's steps and
  discounted by gamma^duration (`tinker_core.hierarchy.smdp`); its critic gives Q(s, o) per option and
  V(s) = sum_o pi(o|s) Q(s, o);
- learned options: one network on ``obs ⊕ one_hot(o)`` trained with GAE on the env reward (the options
  specialize through the high level's choices); or scripted skills registered by name
  (`tinker_core.hierarchy.skills`), which do not learn;
- learned termination: the option-critic gradient, beta(s', o) (Q(s', o) - V(s') + xi) minimized.

``HPPO("tinker/PlanarSort-v0", HPPOConfig(skills=["planar_sort"]))``; ``tinker train`` with ``algo: hppo``.
Save/load are every algorithm's; deploying exports each level as its own ONNX model
(``deployable_levels``; ``tinker export`` writes them with `tinker_deploy.hierarchy`). Flat vector
observations only.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import nn

from tinker_core.algos.base import Algorithm, PolicyModule
from tinker_core.algos.optim import make_adam, update_scope
from tinker_core.algos.hppo_config import HPPOConfig
from tinker_core.errors import CheckpointError, ConfigError, SpecError
from tinker_core.hierarchy.networks import (
    HighArgmax, HighLevel, LearnedLowHead, LearnedOptions, SkillLowHead, Termination, TerminationHead, with_option,
)
from tinker_core.hierarchy.rollout import Decision, OptionTracker, option_ends
from tinker_core.hierarchy.skills import SkillLibrary, expand_skills
from tinker_core.hierarchy.smdp import gae, smdp_gae
from tinker_core.spec import Spec


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, clip: float) -> torch.Tensor:
    """PPO's clipped policy loss (to minimize), advantages standardized over the minibatch."""
    if adv.numel() > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = torch.exp(logp - old_logp)
    return -torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv).mean()


class HierarchicalPolicyModule(PolicyModule):
    """The acting policy as a pipeline module; keeps the running option between calls (``reset()`` at episode
    start, as `tinker_core.evaluate.evaluate` calls it)."""

    def reset(self) -> None:
        self._algo.reset_options()


class HPPO(Algorithm):
    """Hierarchical PPO over options (learned or scripted), with max-duration or learned termination."""

    algo_name = "hppo"
    config_class = HPPOConfig
    config: HPPOConfig

    def __init__(self, env_or_specs: Any, config: HPPOConfig | None = None, **kw: Any):
        super().__init__(env_or_specs, config, **kw)
        object.__setattr__(self, "policy", HierarchicalPolicyModule(self))
        self.tracker = OptionTracker(self.config.n_envs, self.config.gamma)
        self._eval_tracker: OptionTracker | None = None
        self.option_counts = np.zeros(self.k, np.int64)
        self.last_decisions: list[list[Decision]] = []
        """the high-level transitions completed in the last rollout, per env in time order (for inspection)"""

    # -- networks -----------------------------------------------------------------------------------
    def _build_networks(self) -> None:
        c = self.config
        spec = self.obs_spec
        if self.device.type != "cpu":
            raise ConfigError(f"HPPOConfig.device: HPPO runs on the CPU for now (its networks are small), got {c.device!r}")
        if not isinstance(spec, Spec) or len(spec.shape) != 1 or np.dtype(spec.dtype).kind != "f":
            raise SpecError(f"HPPO: needs a flat float vector observation, got {spec!r}")
        self.obs_dim = int(spec.shape[0])
        self.skill_names = expand_skills(c.skills, "HPPOConfig.skills") if c.skills else []
        self.k = len(self.skill_names) if self.skill_names else int(c.num_options)
        self.high = HighLevel(self.obs_dim, self.k, c.net_arch, c.activation)
        if self.skill_names:
            self.skills: SkillLibrary | None = SkillLibrary(self.skill_names)
            self.options: LearnedOptions | None = None
        else:
            self.skills = None
            self.act_dim = 1 if self.discrete else int(np.prod(self.action_spec.shape))
            self.options = LearnedOptions(self.obs_dim, self.k, c.net_arch, c.activation, self.discrete, self.act_dim,
                                          getattr(self, "n_actions", 0), c.log_std_init)
        self.beta = Termination(self.obs_dim, self.k, c.net_arch, c.activation) if c.termination == "learned" else None

    def _build_optimizers(self) -> None:
        lr = self.config.learning_rate
        self.opt_high = make_adam(self.high.parameters(), lr, eps=1e-5)
        self.opt_low = None if self.options is None else make_adam(self.options.parameters(), lr, eps=1e-5)
        self.opt_beta = None if self.beta is None else make_adam(self.beta.parameters(), lr, eps=1e-5)

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"high": self.opt_high, "low": self.opt_low, "termination": self.opt_beta}  # type: ignore[dict-item]

    def _settable(self) -> dict[str, Callable[[float], None]]:
        return {"lr": self.set_learning_rate,
                "high_ent_coef": lambda v: setattr(self.config, "high_ent_coef", float(v))}

    def _actor_net(self) -> nn.Module:
        parts: dict[str, nn.Module] = {"high": self.high}
        parts["low"] = self.skills if self.skills is not None else self.options  # type: ignore[assignment]
        if self.beta is not None:
            parts["termination"] = self.beta
        return nn.ModuleDict(parts)

    @property
    def option_names(self) -> list[str]:
        return list(self.skill_names) if self.skill_names else [f"option_{i}" for i in range(self.k)]

    # -- acting -------------------------------------------------------------------------------------
    def _low_action(self, obs: torch.Tensor, option: torch.Tensor, deterministic: bool
                    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(action as stored: 0-based index or unclipped, its log-prob, V(s, o)); log-prob and value are None
        for scripted skills."""
        if self.skills is not None:
            return self.skills(obs, option), None, None
        x = with_option(obs, option, self.k)
        o = self.options
        value = o.vf(x).squeeze(-1)  # type: ignore[union-attr]
        if self.discrete:
            logits = o.pi.logits(x)  # type: ignore[union-attr]
            if deterministic:
                return logits.argmax(-1), None, value
            a = torch.distributions.Categorical(logits=logits).sample()
            return a, torch.log_softmax(logits, -1).gather(-1, a.unsqueeze(-1)).squeeze(-1), value
        mu = o.pi.mean_action(x)  # type: ignore[union-attr]
        if deterministic:
            return mu, None, value
        log_std = o.pi.log_std  # type: ignore[union-attr]
        eps = torch.randn(mu.shape, generator=self.gen)
        logp = (-0.5 * eps.square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        return mu + log_std.exp() * eps, logp, value

    def _to_env(self, a: torch.Tensor) -> np.ndarray:
        if self.discrete:
            return self._env_action(a)
        return self._env_action(torch.minimum(torch.maximum(a, self.act_low), self.act_high))

    def _decide(self, tracker: OptionTracker, obs: torch.Tensor, deterministic: bool) -> None:
        idx = np.flatnonzero(tracker.needs_decision)
        if idx.size == 0:
            return
        logits = self.high.pi.logits(obs[idx])
        if deterministic:
            opts = logits.argmax(-1)
        else:
            u = torch.rand(logits.shape, generator=self.gen)
            opts = torch.argmax(logits - torch.log(-torch.log(u.clamp_min(1e-20))), dim=-1)  # Gumbel-max
        logp = torch.log_softmax(logits, -1).gather(-1, opts.unsqueeze(-1)).squeeze(-1)
        for j, i in enumerate(idx):
            tracker.start(int(i), obs[i].cpu().numpy(), int(opts[j]), float(logp[j]))

    def _terminations(self, tracker: OptionTracker, next_obs: torch.Tensor, episode_end: np.ndarray,
                      deterministic: bool) -> np.ndarray:
        draw = None
        if self.beta is not None:
            with torch.no_grad():
                b = self.beta(with_option(next_obs, torch.as_tensor(tracker.option), self.k))
            draw = (b > 0.5).numpy() if deterministic else (torch.rand(b.shape, generator=self.gen) < b).numpy()
        return option_ends(tracker.age, self.config.max_duration, draw, episode_end)

    def reset_options(self) -> None:
        """Forget the running options of ``predict`` (a new episode starts with a fresh high-level decision)."""
        self._eval_tracker = None

    def _act(self, obs: Any, deterministic: bool) -> np.ndarray:
        """Acting outside training (``predict``): the high level decides when the running option has ended; the
        option steps are counted per call (one call = one env step)."""
        n = obs.shape[0]
        if self._eval_tracker is None or self._eval_tracker.n != n:
            self._eval_tracker = OptionTracker(n, self.config.gamma)
        t = self._eval_tracker
        if not t.needs_decision.all():  # the option that ran last call may end in this state
            t.add_reward(np.zeros(n))
            ends = self._terminations(t, obs, np.zeros(n, bool), deterministic)
            t.needs_decision |= ends
        self._decide(t, obs, deterministic)
        a, _, _ = self._low_action(obs, torch.as_tensor(t.option), deterministic)
        return self._to_env(a)

    # -- collection and update ------------------------------------------------------------------------
    def _iteration(self) -> None:
        c = self.config
        n, ne = c.n_steps, c.n_envs
        tr = self.tracker
        learned = self.options is not None
        low_obs = np.zeros((n, ne, self.obs_dim), np.float32)
        low_opt = np.zeros((n, ne), np.int64)
        low_act = np.zeros((n, ne) if self.discrete else (n, ne, self.act_dim), np.int64 if self.discrete else np.float32) \
            if learned else None
        low_logp, low_val = np.zeros((n, ne), np.float32), np.zeros((n, ne), np.float32)
        rewards, terms, ends = np.zeros((n, ne)), np.zeros((n, ne), bool), np.zeros((n, ne), bool)
        next_obs_buf = np.zeros((n, ne, self.obs_dim), np.float32)
        beta_obs: list[np.ndarray] = []
        beta_opt: list[int] = []
        self.train(False)
        with torch.no_grad():
            for t in range(n):
                obs = self._obs_to_tensor(self._last_obs)
                self._decide(tr, obs, False)
                opt = torch.as_tensor(tr.option.copy())
                self.option_counts += np.bincount(tr.option, minlength=self.k)
                a, logp, val = self._low_action(obs, opt, False)
                new_obs, rew, term, trunc, final = self.vec_env.step(self._to_env(a))
                self.num_timesteps += ne
                done = term | trunc
                nxt = np.array(new_obs, np.float32, copy=True)
                for i in np.flatnonzero(done):
                    nxt[i] = final[i]
                low_obs[t], low_opt[t] = np.asarray(self._last_obs), tr.option
                if learned:
                    low_act[t] = a.numpy()  # type: ignore[index]
                    low_logp[t], low_val[t] = logp.numpy(), val.numpy()  # type: ignore[union-attr]
                rewards[t], terms[t], ends[t], next_obs_buf[t] = rew, term, done, nxt
                tr.add_reward(rew)
                nxt_t = torch.as_tensor(nxt)
                finished = self._terminations(tr, nxt_t, done, False)
                for i in range(ne):
                    if self.beta is not None and not done[i]:
                        beta_obs.append(nxt[i])
                        beta_opt.append(int(tr.option[i]))
                    if finished[i]:
                        tr.finish(i, nxt[i], bool(term[i]), bool(done[i]))
                self._last_obs = new_obs
        decisions = tr.take()
        self.last_decisions = decisions
        m: dict[str, Any] = {}
        self.train(True)
        with update_scope():
            m.update(self._update_high(decisions))
            if learned:
                m.update(self._update_low(low_obs, low_opt, low_act, low_logp, low_val, rewards, terms, ends,
                                          next_obs_buf))
            if self.beta is not None and beta_obs:
                m.update(self._update_termination(np.stack(beta_obs), np.asarray(beta_opt)))
        self.train(False)
        m["option_duration_mean"] = float(np.mean([d.duration for ds in decisions for d in ds])) \
            if any(decisions) else float("nan")
        self.num_updates += 1
        self._metrics = m

    def _high_targets(self, decisions: list[list[Decision]]) -> tuple[list[Decision], np.ndarray, np.ndarray]:
        """All decisions with their semi-MDP advantages and Q targets, computed per env in time order."""
        c = self.config
        flat = [d for ds in decisions for d in ds]
        with torch.no_grad():
            v = self.high.value(torch.as_tensor(np.stack([d.obs for d in flat]))).numpy()
            v2 = self.high.value(torch.as_tensor(np.stack([d.next_obs for d in flat]))).numpy()
        advs, rets, j = [], [], 0
        for ds in decisions:
            if not ds:
                continue
            sl = slice(j, j + len(ds))
            a, r = smdp_gae(np.array([d.reward for d in ds]), np.array([d.duration for d in ds]), v[sl], v2[sl],
                            np.array([d.terminal for d in ds]), np.array([d.end for d in ds]), c.gamma, c.gae_lambda)
            advs.append(a)
            rets.append(r)
            j += len(ds)
        return flat, np.concatenate(advs), np.concatenate(rets)

    def _update_high(self, decisions: list[list[Decision]]) -> dict[str, float]:
        c = self.config
        if sum(len(ds) for ds in decisions) < 2:
            return {}
        flat, adv, ret = self._high_targets(decisions)
        obs = torch.as_tensor(np.stack([d.obs for d in flat]))
        opt = torch.as_tensor([d.option for d in flat])
        old = torch.as_tensor([d.logp for d in flat], dtype=torch.float32)
        adv_t, ret_t = torch.as_tensor(adv, dtype=torch.float32), torch.as_tensor(ret, dtype=torch.float32)
        n = len(flat)
        out: dict[str, float] = {}
        for _ in range(c.n_epochs):
            perm = torch.randperm(n, generator=self.gen)
            for s in range(0, n, c.high_batch_size):
                b = perm[s:s + c.high_batch_size]
                logp, ent = self.high.pi.log_prob_entropy(obs[b], opt[b])
                q = self.high.q(obs[b]).gather(-1, opt[b].unsqueeze(-1)).squeeze(-1)
                pg = clipped_surrogate(logp, old[b], adv_t[b], c.clip_range)
                vl = 0.5 * (q - ret_t[b]).square().mean()
                loss = pg + c.vf_coef * vl - c.high_ent_coef * ent.mean()
                self.opt_high.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(self.high.parameters(), c.max_grad_norm)
                self.opt_high.step()
                out = {"high_policy_loss": float(pg.detach()), "high_value_loss": float(vl.detach()),
                       "high_entropy": float(ent.detach().mean())}
        out["high_decisions"] = float(n)
        return out

    def _update_low(self, obs: np.ndarray, opt: np.ndarray, act: np.ndarray, old_logp: np.ndarray,
                    val: np.ndarray, rewards: np.ndarray, terms: np.ndarray, ends: np.ndarray,
                    next_obs: np.ndarray) -> dict[str, float]:
        c = self.config
        n, ne = rewards.shape
        o = self.options
        with torch.no_grad():  # V(s', o) with the option that ran (the low level's episode goes on through options)
            nv = o.vf(with_option(torch.as_tensor(next_obs.reshape(n * ne, -1)),  # type: ignore[union-attr]
                                  torch.as_tensor(opt.reshape(-1)), self.k)).reshape(n, ne).numpy()
        adv, ret = np.zeros((n, ne)), np.zeros((n, ne))
        for i in range(ne):
            adv[:, i], ret[:, i] = gae(rewards[:, i], val[:, i], nv[:, i], terms[:, i], ends[:, i], c.gamma, c.gae_lambda)
        x = with_option(torch.as_tensor(obs.reshape(n * ne, -1)), torch.as_tensor(opt.reshape(-1)), self.k)
        a = torch.as_tensor(act.reshape(n * ne, *act.shape[2:]))
        old = torch.as_tensor(old_logp.reshape(-1))
        adv_t, ret_t = torch.as_tensor(adv.reshape(-1), dtype=torch.float32), torch.as_tensor(ret.reshape(-1), dtype=torch.float32)
        out: dict[str, float] = {}
        for _ in range(c.n_epochs):
            perm = torch.randperm(n * ne, generator=self.gen)
            for s in range(0, n * ne, c.batch_size):
                b = perm[s:s + c.batch_size]
                logp, ent = o.pi.log_prob_entropy(x[b], a[b])  # type: ignore[union-attr]
                v = o.vf(x[b]).squeeze(-1)  # type: ignore[union-attr]
                pg = clipped_surrogate(logp, old[b], adv_t[b], c.clip_range)
                vl = 0.5 * (v - ret_t[b]).square().mean()
                loss = pg + c.vf_coef * vl - c.ent_coef * ent.mean()
                self.opt_low.zero_grad(set_to_none=True)  # type: ignore[union-attr]
                loss.backward()
                nn.utils.clip_grad_norm_(o.parameters(), c.max_grad_norm)  # type: ignore[union-attr]
                self.opt_low.step()  # type: ignore[union-attr]
                out = {"policy_loss": float(pg.detach()), "value_loss": float(vl.detach()), "entropy": float(ent.detach().mean())}
        return out

    def _update_termination(self, obs: np.ndarray, opt: np.ndarray) -> dict[str, float]:
        """Option-critic's termination step: lower beta(s', o) where o is still better than the high level's
        average (Q(s', o) - V(s') + xi > 0), raise it where it is worse."""
        x = torch.as_tensor(obs)
        o = torch.as_tensor(opt)
        with torch.no_grad():
            q = self.high.q(x).gather(-1, o.unsqueeze(-1)).squeeze(-1)
            adv = q - self.high.value(x) + self.config.termination_reg
        beta = self.beta(with_option(x, o, self.k))  # type: ignore[misc]
        loss = (beta * adv).mean()
        self.opt_beta.zero_grad(set_to_none=True)  # type: ignore[union-attr]
        loss.backward()
        nn.utils.clip_grad_norm_(self.beta.parameters(), self.config.max_grad_norm)  # type: ignore[union-attr]
        self.opt_beta.step()  # type: ignore[union-attr]
        return {"termination_loss": float(loss.detach()), "beta_mean": float(beta.detach().mean())}

    # -- checkpoints and deployment -----------------------------------------------------------------
    def _extra_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        return {"skills": list(self.skill_names), "num_options": self.k}, {"option_counts": self.option_counts.copy()}

    def _load_extra_state(self, meta: dict, tensors: Mapping[str, np.ndarray]) -> None:
        if list(meta.get("skills", [])) != list(self.skill_names):
            raise CheckpointError(f"checkpoint skills {meta.get('skills')} differ from this HPPO's {self.skill_names} "
                                  "(a skill set changed between saving and loading)")
        if "option_counts" in tensors:
            self.option_counts = np.array(tensors["option_counts"], np.int64)
        self.tracker.reset()  # running options are not saved: the next rollout starts with fresh decisions
        self._eval_tracker = None

    def _feature_spec(self) -> Spec:
        return Spec((self.obs_dim,), "float32")

    def deployable_parts(self) -> dict[str, nn.Module]:
        raise SpecError("HPPO: a hierarchical policy has no single graph (the running option is state); export its "
                        "levels with deployable_levels() (tinker export does)")

    def deployable_levels(self) -> dict[str, tuple[nn.Module, Spec, Spec]]:
        """Each level as (CPU module in eval mode, input spec, output spec): ``high`` obs -> [option index];
        ``low`` ``obs ⊕ one_hot(option)`` -> env action; with learned termination, ``termination``
        ``obs ⊕ one_hot(option)`` -> [beta]. No data-dependent control flow (ONNX-exportable)."""
        import copy

        d, k = self.obs_dim, self.k
        obs_spec = Spec((d,), "float32", self.obs_spec.low, self.obs_spec.high)  # type: ignore[union-attr]
        aug = Spec((d + k,), "float32")
        high = HighArgmax(self.high)
        if self.skills is not None:
            low: nn.Module = SkillLowHead(self.skills, d)
        else:
            low = LearnedLowHead(self.options, None if self.discrete else self.act_low,  # type: ignore[arg-type]
                                 None if self.discrete else self.act_high, getattr(self, "action_offset", 0))
        levels: dict[str, tuple[nn.Module, Spec, Spec]] = {
            "high": (high, obs_spec, Spec((1,), "int64", 0, k - 1)),
            "low": (low, aug, self.action_spec),
        }
        if self.beta is not None:
            levels["termination"] = (TerminationHead(self.beta), aug, Spec((1,), "float32", 0.0, 1.0))
        out = {}
        for name, (mod, i, o) in levels.items():
            mod = copy.deepcopy(mod).cpu().eval()
            for p in mod.parameters():
                p.requires_grad_(False)
            out[name] = (mod, i, o)
        return out

    def hierarchy_metadata(self) -> dict:
        """What a deployed runtime needs to run the levels together (and nothing it can read from the models)."""
        return {"num_options": self.k, "options": self.option_names, "termination": self.config.termination,
                "max_duration": int(self.config.max_duration), "beta_threshold": 0.5,
                "low_level": "scripted" if self.skills is not None else "learned"}

    def export_metadata(self) -> dict:
        return {**super().export_metadata(), "hierarchy": self.hierarchy_metadata()}


__all__ = ["HPPO", "HPPOConfig", "clipped_surrogate"]
