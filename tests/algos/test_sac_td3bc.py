"""SAC's ``td3bc_alpha``: the actor imitates the batch's demonstration rows (``demo_mask``) beside its RL loss, so a
policy pretrained by imitation is fine-tuned without being unlearned first (TD3+BC's rule)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tinker_core.algos import load_algorithm
from tinker_core.algos.sac import SAC, SACConfig
from tinker_core.errors import ConfigError
from tinker_core.transition import TransitionBatch


def _batch(n: int, seed: int = 0) -> TransitionBatch:
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    demo_action = np.clip(obs[:, :1] * 1.5, -1.5, 1.5).astype(np.float32)  # a demonstrator's rule, in env units
    return TransitionBatch(obs=obs, action=demo_action, reward=rng.normal(size=n).astype(np.float32),
                           terminated=np.zeros(n, bool), truncated=np.zeros(n, bool),
                           next_obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32), info=[{}] * n)


def _distance_to_demos(algo: SAC, batch: TransitionBatch) -> float:
    return float(np.abs(algo.predict(batch.obs) - batch.action).mean())


@pytest.mark.parametrize("masked, sde", [(True, False), (False, False), (True, True)])
def test_the_actor_moves_to_the_demonstrations_only_where_rows_are_marked(masked, sde):
    algo = SAC("Pendulum-v1", SACConfig(net_arch=[32, 32], seed=0, td3bc_alpha=0.05, use_sde=sde, prior_anchor=False))
    assert algo.update_path == "autograd"  # the written-out steps have no imitation term
    batch = _batch(64)
    before = _distance_to_demos(algo, batch)
    mask = np.ones(64, bool) if masked else None
    for _ in range(300):
        out = algo.train_on_batch(batch, demo_mask=mask)
    after = _distance_to_demos(algo, batch)
    if masked:
        assert after < 0.35 * before, (before, after)
        assert out["imitation_loss"] > 0
    else:  # no demonstrations in the batch: the RL term alone, which knows nothing of the demonstrator's rule
        assert after > 0.5 * before, (before, after)
        assert out["imitation_loss"] == 0


def _drift(anchor: bool, updates: int = 300) -> tuple[SAC, float]:
    """How far the actor's actions moved from its starting ones after updates on live rows only (no demonstration
    marked): the RL term alone moves them; ``prior_anchor`` holds them near the start."""
    algo = SAC("Pendulum-v1", SACConfig(net_arch=[32, 32], seed=0, td3bc_alpha=0.005, prior_anchor=anchor,
                                        learning_rate=3e-3))
    batch = _batch(64, seed=1)
    start = algo.predict(batch.obs)
    for _ in range(updates):
        algo.train_on_batch(batch, demo_mask=np.zeros(64, bool))
    return algo, float(np.abs(algo.predict(batch.obs) - start).mean())


def test_prior_anchor_holds_the_live_rows_at_the_starting_actor():
    _, free = _drift(False)
    _, anchored = _drift(True)
    assert free > 0.3, free  # the RL term does move an unanchored actor (Pendulum's actions: -2..2)
    assert anchored < 0.1 * free, (anchored, free)


def test_the_starting_actor_travels_with_the_checkpoint(tmp_path):
    algo, _ = _drift(True, updates=50)
    obs = _batch(32, seed=2).obs
    start = algo.anchor_action(torch.as_tensor(algo._prepare_obs(obs))).numpy()
    assert np.abs(start - algo.predict(obs) / 2.0).max() > 1e-4  # the actor has moved away from its anchor
    algo.save(tmp_path / "ck")
    loaded = load_algorithm(tmp_path / "ck", device="cpu")
    assert loaded.anchor is not None  # resumed, it anchors to where the fine-tuning began, not to where it is
    np.testing.assert_allclose(loaded.anchor_action(torch.as_tensor(loaded._prepare_obs(obs))).numpy(), start,
                               atol=1e-6)


def test_plain_sac_ignores_the_mask_and_keeps_its_compiled_step():
    algo = SAC("Pendulum-v1", SACConfig(net_arch=[32, 32], seed=0))
    assert algo.update_path != "autograd"
    out = algo.train_on_batch(_batch(16), demo_mask=np.ones(16, bool))
    assert "imitation_loss" not in out


@pytest.mark.parametrize("alpha", [0, -1.0])
def test_a_weight_that_is_not_positive_is_refused(alpha):
    with pytest.raises(ConfigError, match="td3bc_alpha: expected a number > 0"):
        SACConfig(td3bc_alpha=alpha)
