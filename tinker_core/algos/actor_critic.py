"""What the actor-critic algorithms (PPO, IMPALA) share: perception, a policy head ``pi`` and a value MLP ``vf``
built and initialized the same way, the actor that is deployed, and the policy-side diagnostics."""

from __future__ import annotations

import math

import numpy as np
from torch import nn

from tinker_core.algos.networks import ArgmaxHead, CategoricalActor, ClippedMeanHead, GaussianActor
from tinker_core.nn import build_perception, mlp


class ActorCritic:
    """Mixin for an `Algorithm` whose config has ``perception``, ``net_arch`` and ``activation``: builds
    ``perception``, ``pi`` (``logits`` for discrete actions, else ``mean``) and ``vf``; says what is exported (the
    actor, deterministic) and what the losses say about the policy's health."""

    def _build_actor_critic(self, log_std_init: float = 0.0, sde: bool = False, ortho_init: bool = True) -> None:
        """The networks, with SB3's orthogonal initialization (gain sqrt 2, 0.01 for the policy's output layer, 1
        for the value's) unless ``ortho_init`` is off."""
        c = self.config
        self.perception = build_perception(self.obs_spec, c.perception)
        fdim = self.perception.features_dim
        if self.discrete:
            self.pi = CategoricalActor(fdim, c.net_arch, self.n_actions, c.activation)
            out = self.pi.logits[-1]
        else:
            self.act_dim = int(np.prod(self.action_spec.shape))
            self.pi = GaussianActor(fdim, c.net_arch, self.act_dim, c.activation, log_std_init, sde=sde)
            out = self.pi.mean[-1]
        self.vf = mlp(fdim, c.net_arch, 1, c.activation)
        if ortho_init:
            for m in list(self.pi.modules()) + list(self.vf.modules()):
                if isinstance(m, nn.Linear):
                    nn.init.orthogonal_(m.weight, math.sqrt(2))
                    nn.init.zeros_(m.bias)
            nn.init.orthogonal_(out.weight, 0.01)
            nn.init.orthogonal_(self.vf[-1].weight, 1.0)

    def _diagnose(self, m: dict[str, float]) -> None:
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
