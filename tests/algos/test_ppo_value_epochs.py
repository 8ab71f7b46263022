"""PPO's extra value passes (`PPOConfig.value_epochs`): they move the value MLP only, fit the rollout's returns,
keep their own learning rate under a schedule and survive a checkpoint. Why they exist (RL Zoo's
MountainCarContinuous entry, whose value function lags the policy) is measured in docs/benchmarks_third_party.md."""

from __future__ import annotations

import pytest
import torch

from tinker_core.algos import PPO, PPOConfig
from tinker_core.errors import ConfigError

CFG = dict(n_steps=64, n_epochs=2, batch_size=32, learning_rate=1e-3, gamma=0.99, seed=3)


def _flat(params) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in params])


@pytest.mark.parametrize("compiled", [True, False])
def test_value_passes_move_the_value_only_and_fit_its_returns(compiled):
    """One rollout and update each: the policy ends where it does without the extra passes (they run after the
    joint update), the value MLP elsewhere, and closer to the returns it was fitted on."""
    returns = {}
    algos = []
    for k in (0, 30):
        algo = PPO("Pendulum-v1", PPOConfig(**CFG, value_epochs=k, compiled_update=compiled, normalize_reward=True))
        seen = returns.setdefault(k, [])
        orig = algo._update

        def spy(obs, actions, values, logp, adv, ret, orig=orig, seen=seen):
            out = orig(obs, actions, values, logp, adv, ret)
            seen.append((obs.reshape(-1, obs.shape[-1]).clone(), ret.reshape(-1).clone()))
            return out

        algo._update = spy
        algo.learn(CFG["n_steps"], progress=False)
        algos.append(algo)
    plain, extra = algos
    assert torch.equal(_flat(plain.pi.parameters()), _flat(extra.pi.parameters()))
    assert not torch.allclose(_flat(plain.vf.parameters()), _flat(extra.vf.parameters()))
    obs, ret = returns[30][0]
    assert torch.equal(obs, returns[0][0][0])

    def mse(algo):
        with torch.no_grad():
            return float(((algo.vf(algo.perception(obs)).squeeze(-1) - ret) ** 2).mean())

    assert mse(extra) < 0.75 * mse(plain)  # measured 0.53: one rollout's returns are partly not a function of the state


def test_value_learning_rate_is_kept_under_a_schedule():
    algo = PPO("Pendulum-v1", PPOConfig(**CFG, value_epochs=2, value_learning_rate=5e-3))
    algo.set_learning_rate(1e-5)
    assert algo.opt.param_groups[0]["lr"] == pytest.approx(1e-5)
    assert algo.value_opt.param_groups[0]["lr"] == pytest.approx(5e-3)


def test_value_optimizer_is_checkpointed(tmp_path):
    algo = PPO("Pendulum-v1", PPOConfig(**CFG, value_epochs=2))
    algo.learn(CFG["n_steps"], progress=False)
    path = algo.save(tmp_path / "ck")
    again = PPO.load(path)
    assert again.value_opt is not None
    s0, s1 = algo.value_opt.state_dict()["state"], again.value_opt.state_dict()["state"]
    assert s0.keys() == s1.keys() and s0
    for k in s0:
        assert torch.equal(s0[k]["exp_avg_sq"], s1[k]["exp_avg_sq"])


@pytest.mark.parametrize("kw, msg", [
    (dict(value_epochs=-1), "value_epochs: expected >= 0 (0: no extra value passes), got -1"),
    (dict(value_learning_rate=0.0), "value_learning_rate: expected > 0, got 0.0"),
])
def test_bad_settings_are_refused(kw, msg):
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        PPOConfig(**CFG, **kw)
