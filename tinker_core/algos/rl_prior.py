"""An RL starting point from an imitation policy: SAC whose actor is the BC policy, and demonstrations to learn beside.

RLPD-style fine-tuning (Ball et al., 2023) samples demonstrations and online data together; started from a BC
policy, SAC's random critic would first unlearn what imitation taught. So the prior is built in three steps:
`sac_from_imitation` copies BC's observation normalization and actor into a SAC of the same shape (the mean
action is BC's; the noise starts small); `collect_demonstrations` records an expert's episodes with the env's
rewards; `warm_critic` fits the critics to those demonstrations with the actor held still. Fine-tuning then
keeps the actor near the demonstrations with SAC's ``td3bc_alpha``.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import torch

from tinker_core.algos.bc import BC
from tinker_core.algos.sac import SAC
from tinker_core.errors import ConfigError
from tinker_core.replay import ReplayBuffer
from tinker_core.transition import Transition


def sac_from_imitation(bc: BC, sac: SAC, action_std: float = 0.05) -> SAC:
    """Give ``sac`` ``bc``'s observation normalization and actor (trunk and mean head), and a state-independent
    action noise of ``action_std`` (in [-1, 1] units before the tanh). Refuses networks of different shapes."""
    if not 0.0 < action_std < 1.0:
        raise ConfigError(f"action_std: expected 0 < action_std < 1, got {action_std}")
    if (bc.obs_norm is None) != (sac.obs_norm is None):
        raise ConfigError(f"normalize_obs: the BC policy has {bc.obs_norm is not None}, the SAC "
                          f"{sac.obs_norm is not None}; build the SAC with the BC's setting")
    for part in ("trunk", "mu"):
        ours, theirs = getattr(sac.actor, part).state_dict(), getattr(bc.actor, part).state_dict()
        shapes = {k: tuple(v.shape) for k, v in ours.items()}
        if shapes != {k: tuple(v.shape) for k, v in theirs.items()}:
            raise ConfigError(f"actor.{part}: the SAC's layers {shapes} differ from the BC policy's "
                              f"{ {k: tuple(v.shape) for k, v in theirs.items()} }; give the SAC BC's net_arch")
    if type(sac.actor_perception) is not type(bc.actor_perception):
        raise ConfigError(f"perception: the SAC's {type(sac.actor_perception).__name__} differs from the BC "
                          f"policy's {type(bc.actor_perception).__name__}")
    with torch.no_grad():
        if bc.obs_norm is not None:
            sac.obs_norm.load_state_dict(bc.obs_norm.state_dict())  # type: ignore[union-attr]
        sac.actor_perception.load_state_dict(bc.actor_perception.state_dict())
        sac.actor.trunk.load_state_dict(bc.actor.trunk.state_dict())
        sac.actor.mu.load_state_dict(bc.actor.mu.state_dict())
        sac.actor.log_std.weight.zero_()
        sac.actor.log_std.bias.fill_(math.log(action_std))
    return sac


def collect_demonstrations(env: Any, expert: Any, episodes: int, seed: int = 0,
                           progress: Callable[[int, dict], None] | None = None) -> ReplayBuffer:
    """``episodes`` episodes of ``expert`` (``act(obs)``, ``reset()``) on ``env``, with the env's rewards and
    ends, as a replay of raw observations and env-unit actions tagged ``source: demonstration``."""
    if episodes < 1:
        raise ConfigError(f"episodes: expected >= 1, got {episodes}")
    rows: list[Transition] = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        expert.reset()
        ret, info = 0.0, {}
        while True:
            action = np.asarray(expert.act(obs), dtype=np.float32)
            nxt, r, term, trunc, info = env.step(action)
            rows.append(Transition(obs, action, float(r), bool(term), bool(trunc), {"source": "demonstration"}, nxt))
            ret += float(r)
            obs = nxt
            if term or trunc:
                break
        if progress:
            progress(ep, {"return": ret, "success": bool(info.get("is_success", False)), "transitions": len(rows)})
    buf = ReplayBuffer(len(rows), seed=seed)
    for t in rows:
        buf.add(t)
    return buf


def warm_critic(sac: SAC, demos: ReplayBuffer, steps: int, batch_size: int = 256) -> dict:
    """``steps`` updates on demonstration batches with the actor and the entropy coefficient held still: the
    critics learn the demonstrations' values before the actor follows them. Returns the last update's metrics."""
    if steps < 0:
        raise ConfigError(f"critic warm-up steps: expected >= 0, got {steps}")
    opts = [o for o in (sac.actor_opt, sac.ent_opt) if o is not None]
    kept = [[g["lr"] for g in o.param_groups] for o in opts]
    out: dict = {}
    try:
        for o in opts:
            for g in o.param_groups:
                g["lr"] = 0.0
        for _ in range(steps):
            out = sac.train_on_batch(demos.sample(batch_size, with_info=False))
    finally:
        for o, lrs in zip(opts, kept):
            for g, lr in zip(o.param_groups, lrs):
                g["lr"] = lr
    return out
