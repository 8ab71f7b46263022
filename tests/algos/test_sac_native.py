"""The compiled SAC step (sac_native.cpp) against the Python one (`SACUpdate`, itself held to
Stable-Baselines3's step in test_sac_update.py), and what SAC does when the compiled step cannot be built.

The compiled step is really built here (once per machine, cached); only a machine without a C++
compiler skips, and says so. Checkpoint resume of the compiled step is in test_checkpoint_resume.py
(SAC's MLP default runs it).
"""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
import torch

from tinker_core.algos import SAC, SACConfig
from tinker_core.algos import native
from tinker_core.algos.sac_native import NativeSACUpdate
from tinker_core.algos.sac_update import SACUpdate
from tinker_core.errors import ConfigError
from tinker_core.transition import TransitionBatch

needs_compiler = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                    reason="no C++ compiler on this machine: the compiled SAC step cannot be built")


def _batch(rng: np.random.Generator, n: int) -> TransitionBatch:
    lo, hi = [-1, -1, -8], [1, 1, 8]
    return TransitionBatch(obs=rng.uniform(lo, hi, (n, 3)).astype(np.float32),
                           action=rng.uniform(-2, 2, (n, 1)).astype(np.float32),
                           reward=rng.uniform(-16, 0, n).astype(np.float32), terminated=rng.random(n) < 0.1,
                           truncated=np.zeros(n, bool), next_obs=rng.uniform(lo, hi, (n, 3)).astype(np.float32))


def _grads(algo: SAC) -> list[torch.Tensor]:
    return [p.grad for p in [*algo.actor.parameters(), *algo.critic.parameters(), algo.log_ent_coef]]


@pytest.fixture
def products():
    """Selects the compiled step's product library for one test (`native.use_gemm`) and puts the
    machine's choice back after it; skips where the library cannot be had here."""
    assert native.load(), native.unavailable_reason()
    before = native.gemm()

    def use(name: str) -> None:
        if native.use_gemm(name) != name:
            pytest.skip(f"{name} is not available to the compiled step on this machine")

    yield use
    native.use_gemm(before)


@needs_compiler
@pytest.mark.parametrize("gemm", native.GEMMS)
@pytest.mark.parametrize("kw,per", [
    (dict(net_arch=[64, 64]), False),
    (dict(net_arch=[64, 64]), True),  # importance weights (prioritized replay)
    (dict(net_arch=[48, 32], activation="tanh"), False),
    (dict(net_arch=[32, 24, 16], n_critics=3, ent_coef="0.2"), False),
])
def test_compiled_step_is_the_python_step(kw, per, gemm, products):
    """Same losses, gradients, TD errors and weights, step after step, up to float rounding, with the
    products through either library."""
    products(gemm)
    algos = [SAC("Pendulum-v1", SACConfig(learning_rate=1e-3, seed=0, compiled_step=c, **kw)) for c in (True, False)]
    assert isinstance(algos[0]._update, NativeSACUpdate) and type(algos[1]._update) is SACUpdate
    assert algos[0]._update.compiled, native.unavailable_reason()
    rng = np.random.default_rng(1)
    for step in range(5):
        batch = _batch(rng, 96)
        w = rng.uniform(0.2, 1.0, 96).astype(np.float32) if per else None
        out = [a.train_on_batch(batch, w) for a in algos]
        for k in ("critic_loss", "actor_loss", "entropy", "q_mean", "ent_coef"):
            assert out[0][k] == pytest.approx(out[1][k], rel=1e-5, abs=1e-5), (step, k)
        np.testing.assert_allclose(out[0]["td_errors"], out[1]["td_errors"], rtol=1e-5, atol=1e-5)
        for g0, g1 in zip(_grads(algos[0]), _grads(algos[1])):
            if g1 is None:
                assert g0 is None or not algos[0].auto_ent
                continue
            torch.testing.assert_close(g0, g1, rtol=1e-4, atol=1e-6)
    for p0, p1 in zip(*([*a.actor.parameters(), *a.critic.parameters(), *a.critic_target.parameters()]
                        for a in algos)):
        torch.testing.assert_close(p0, p1, rtol=1e-5, atol=1e-5)


@needs_compiler
def test_product_library_is_measured_once_per_machine_and_kept(tmp_path, monkeypatch, products, caplog):
    """The first load on a machine measures both libraries and keeps the faster in the build directory;
    later loads take the kept one without measuring; ``TINKER_SAC_GEMM`` overrides, and a wrong value
    is said and ignored."""
    monkeypatch.delenv("TINKER_SAC_GEMM", raising=False)
    with caplog.at_level(logging.INFO, logger="tinker.train"):
        first = native._choose_gemm(tmp_path)
    assert first in native.GEMMS and (tmp_path / "gemm.txt").read_text().strip() == first
    assert any("256x256x256 product" in r.getMessage() for r in caplog.records)
    assert not list(tmp_path.glob("*.tmp"))
    other = "blas" if first == "onednn" else "onednn"
    (tmp_path / "gemm.txt").write_text(other + "\n")  # as if another run had measured the other
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tinker.train"):
        kept = native._choose_gemm(tmp_path)
    assert not caplog.records  # not measured again
    assert kept == native.gemm() and kept in (other, "blas")  # "blas" where oneDNN cannot be found
    monkeypatch.setenv("TINKER_SAC_GEMM", "blas")
    assert native._choose_gemm(tmp_path) == "blas" == native.gemm()
    monkeypatch.setenv("TINKER_SAC_GEMM", "openblas")
    with caplog.at_level(logging.WARNING, logger="tinker.train"):
        assert native._choose_gemm(tmp_path) == kept
    assert any("TINKER_SAC_GEMM=openblas" in r.getMessage() for r in caplog.records)
    with pytest.raises(ConfigError, match="openblas"):
        native.use_gemm("openblas")


def test_without_the_build_sac_runs_the_python_step(monkeypatch, caplog, tmp_path):
    """A build that fails (here: a source that does not compile) is reported once, in words, and
    SAC trains with the Python step instead."""
    bad = tmp_path / "sac_native.cpp"
    bad.write_text("this is not C++\n")
    monkeypatch.setattr(native, "SOURCES", [bad])
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("TINKER_NATIVE_CACHE", str(tmp_path / "cache"))
    algo = SAC("Pendulum-v1", SACConfig(net_arch=[16, 16], batch_size=16, learning_starts=20, seed=0))
    assert isinstance(algo._update, NativeSACUpdate) and native.unavailable_reason() is None  # not built yet
    with caplog.at_level(logging.WARNING, logger="tinker.train"):
        algo.learn(40, progress=False)
    assert not algo._update.compiled and native.unavailable_reason()
    assert sum("compiled steps unavailable" in r.getMessage() for r in caplog.records) == 1
    assert algo.num_updates == 20 and all(torch.isfinite(p).all() for p in algo.actor.parameters())


def test_acting_and_exporting_build_nothing(monkeypatch, tmp_path):
    """The extension is loaded at the first training step: constructing SAC (to act, evaluate or
    export) neither builds nor loads it."""
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("TINKER_NATIVE_CACHE", str(tmp_path / "cache"))
    algo = SAC("Pendulum-v1", SACConfig(net_arch=[16, 16], seed=0))
    algo.predict(np.zeros(3, np.float32))
    algo.predict(np.zeros(3, np.float32), deterministic=False)
    assert native._state == {} and not (tmp_path / "cache").exists()


def test_compiled_step_off_for_other_devices_and_when_disabled(monkeypatch):
    algo = SAC("Pendulum-v1", SACConfig(net_arch=[16, 16], seed=0, compiled_step=False))
    assert type(algo._update) is SACUpdate
    assert NativeSACUpdate.create(algo.actor, algo.critic, algo.critic_target, torch.device("meta")) is None
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("TINKER_NATIVE", "0")
    assert type(SAC("Pendulum-v1", SACConfig(net_arch=[16, 16], seed=0))._update) is SACUpdate
    assert not native.load() and native.unavailable_reason() == "TINKER_NATIVE=0"


def test_each_checkout_has_its_own_build(tmp_path, monkeypatch):
    """Two checkouts with the same sources used to share one build directory, whose build file names the sources'
    paths: each one's first load rebuilt it for the other (16 s inside a learner's first update). The key now holds
    where the sources are: the same files give the same directory, a copy elsewhere another one."""
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        for s in native.SOURCES + native.HEADERS:
            (tmp_path / d / s.name).write_text(s.read_text())
    monkeypatch.setenv("TINKER_NATIVE_CACHE", str(tmp_path / "cache"))

    def key(d: str) -> str:
        monkeypatch.setattr(native, "SOURCES", [tmp_path / d / s.name for s in native.SOURCES])
        monkeypatch.setattr(native, "HEADERS", [tmp_path / d / s.name for s in native.HEADERS])
        return native.build_dir().name

    assert key("a") == key("a") != key("b")
