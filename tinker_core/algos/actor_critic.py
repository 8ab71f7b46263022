"""What the actor-critic algorithms (PPO, IMPALA) share over ``perception`` and a policy head ``pi``: the actor
that is deployed and the policy-side diagnostics."""

from __future__ import annotations

import math

from torch import nn

from tinker_core.algos.networks import ArgmaxHead, ClippedMeanHead


class ActorCriticDeploy:
    """Mixin for an `Algorithm` with ``perception``, ``pi`` (``logits`` for discrete actions, else ``mean``) and a
    value function: what is exported (the actor, deterministic) and what its losses say about its health."""

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
