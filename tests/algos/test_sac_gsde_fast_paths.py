"""SAC with gSDE (``use_sde``) on the written-out Python step (`GSDESACUpdate`) and the compiled step
(`NativeSACUpdate`, sac_native.cpp) against its autograd step, which test_sac_gsde.py holds to Stable-Baselines3's.

The three start from the same weights and take the same minibatches with the same noise matrices (each drawn by
the actor from the algorithm's generator, one per gradient step); after every step each parameter (actor trunk,
clipped mean, log_std, critics, target critics, entropy coefficient) must agree up to float rounding. The
compiled step is really built here (once per machine, cached); only a machine without a C++ compiler skips it.
"""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
import torch

from tinker_core.algos import SAC, SACConfig, native
from tinker_core.algos.networks import GSDESquashedActor
from tinker_core.algos.sac_native import NativeSACUpdate
from tinker_core.algos.sac_update import GSDESACUpdate
from tinker_core.spec import Spec
from tinker_core.transition import TransitionBatch

needs_compiler = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                    reason="no C++ compiler on this machine: the compiled SAC step cannot be built")

OBS, ACT = 5, 3  # several action dimensions: the noise matrix and log_std are [latent, 3]
SPECS = (Spec((OBS,), "float32"), Spec((ACT,), "float32", -2.0, 2.0))


def _paths(**kw) -> dict[str, SAC]:
    """One SAC per path from the same seed (so the same weights): autograd, the Python step, the compiled step."""
    cfg = dict(use_sde=True, log_std_init=-2.5, learning_rate=3e-3, seed=0) | kw
    algos = {"autograd": SAC(SPECS, SACConfig(**cfg)), "python step": SAC(SPECS, SACConfig(compiled_step=False, **cfg)),
             "compiled": SAC(SPECS, SACConfig(**cfg))}
    algos["autograd"]._update = None  # the reference: what non-MLP perceptions run (as the Fabric back-end forces)
    assert type(algos["python step"]._update) is GSDESACUpdate
    assert isinstance(algos["compiled"]._update, NativeSACUpdate) and algos["compiled"]._update.gsde is not None
    assert algos["compiled"]._update.compiled, native.unavailable_reason()
    for algo in algos.values():
        with torch.no_grad():  # means far enough out that some of them clip at +-2 (hardtanh's masked gradient)
            algo.actor.mu[0].weight.mul_(6.0)
            algo.actor.mu[0].bias.fill_(1.5)
    return algos


def _params(algo: SAC) -> dict[str, torch.Tensor]:
    named = {f"actor.{k}": p for k, p in algo.actor.named_parameters()}
    named |= {f"critic.{k}": p for k, p in algo.critic.named_parameters()}
    named |= {f"target.{k}": p for k, p in algo.critic_target.named_parameters()}
    return named | {"log_ent_coef": algo.log_ent_coef}


def _batch(rng: np.random.Generator, n: int) -> TransitionBatch:
    return TransitionBatch(obs=rng.normal(0, 2, (n, OBS)).astype(np.float32),
                           action=rng.uniform(-2, 2, (n, ACT)).astype(np.float32),
                           reward=rng.uniform(-2, 1, n).astype(np.float32), terminated=rng.random(n) < 0.1,
                           truncated=np.zeros(n, bool), next_obs=rng.normal(0, 2, (n, OBS)).astype(np.float32))


@needs_compiler
@pytest.mark.parametrize("kw,per", [
    (dict(net_arch=[64, 64]), False),
    (dict(net_arch=[64, 64]), True),  # importance weights (prioritized replay)
    (dict(net_arch=[48, 32], activation="tanh", ent_coef="0.1"), False),
    (dict(net_arch=[32, 24, 16], n_critics=3), False),
])
def test_python_and_compiled_steps_are_the_autograd_step(kw, per):
    algos = _paths(**kw)
    ref = algos["autograd"]
    start = {k: p.detach().clone() for k, p in _params(ref).items()}
    rng = np.random.default_rng(1)
    clipped = []
    for step in range(4):
        batch = _batch(rng, 96)
        w = rng.uniform(0.2, 1.0, 96).astype(np.float32) if per else None
        with torch.no_grad():
            mean_raw = ref.actor.mu[0](ref.actor.latent_mean(torch.as_tensor(batch.obs))[0])
        clipped.append(float((mean_raw.abs() >= GSDESquashedActor.CLIP_MEAN).float().mean()))
        out = {name: a.train_on_batch(batch, w) for name, a in algos.items()}
        for name in ("python step", "compiled"):
            for k in ("critic_loss", "actor_loss", "entropy", "q_mean", "ent_coef"):
                assert out[name][k] == pytest.approx(out["autograd"][k], rel=1e-5, abs=1e-5), (name, step, k)
            np.testing.assert_allclose(out[name]["td_errors"], out["autograd"]["td_errors"], rtol=1e-5, atol=1e-5)
            for (k, p), q in zip(_params(algos[name]).items(), _params(ref).values()):
                torch.testing.assert_close(p, q, rtol=1e-5, atol=2e-6, msg=lambda m: f"{name} step {step} {k}: {m}")
    assert 0.02 < min(clipped) and max(clipped) < 0.95, clipped  # both branches of the clip are exercised
    moved = {k: float((p.detach() - start[k]).abs().max()) for k, p in _params(ref).items()}
    assert all(v > 1e-4 for k, v in moved.items() if not k.startswith("log_ent") or ref.auto_ent), moved
    assert ref.actor.train_matrix is None and algos["compiled"].actor.train_matrix is None


@needs_compiler
def test_sac_with_gsde_takes_the_compiled_step_without_the_fallback_line(monkeypatch, caplog):
    monkeypatch.setattr(native, "_slow_paths", set())
    with caplog.at_level(logging.WARNING):
        algo = SAC("Pendulum-v1", SACConfig(use_sde=True, learning_starts=0, batch_size=16, net_arch=[16, 16], seed=0))
        algo.learn(40, progress=False)
    assert algo.update_path == "compiled" and algo.num_updates == 40
    assert not [r for r in caplog.records if "not the compiled step" in r.getMessage()]
    # compiled_step=False: the Python step, which is said (the line names the reason, not gSDE)
    with caplog.at_level(logging.WARNING):
        slow = SAC("Pendulum-v1", SACConfig(use_sde=True, compiled_step=False, net_arch=[16, 16], seed=0))
    assert slow.update_path == "python step"
    said = [r.getMessage() for r in caplog.records if "not the compiled step" in r.getMessage()]
    assert said and all("gSDE" not in m and "compiled_step=False" in m for m in said)
