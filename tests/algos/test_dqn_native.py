"""The compiled DQN step (dqn_native.cpp) against DQN's autograd step, and what DQN does when the compiled
step cannot be built or does not apply.

The compiled step is really built here (once per machine, cached); only a machine without a C++ compiler
skips, and says so. Checkpoint resume with the compiled step is in test_checkpoint_resume.py (DQN's MLP
default runs it).
"""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
import torch

from tinker_core.algos import DQN, DQNConfig, native
from tinker_core.algos.dqn_native import NativeDQNUpdate
from tinker_core.transition import TransitionBatch

needs_compiler = pytest.mark.skipif(shutil.which("c++") is None and shutil.which("g++") is None,
                                    reason="no C++ compiler on this machine: the compiled DQN step cannot be built")


@pytest.fixture(autouse=True)
def fresh_process_memory(monkeypatch):
    """What was already said in this test process (other tests build DQNs too) is forgotten."""
    monkeypatch.setattr(native, "_slow_paths", set())


def _batch(rng: np.random.Generator, n: int, reward_scale: float) -> TransitionBatch:
    lo, hi = [-2.4, -3, -0.2, -3], [2.4, 3, 0.2, 3]
    return TransitionBatch(obs=rng.uniform(lo, hi, (n, 4)).astype(np.float32), action=rng.integers(0, 2, n),
                           reward=(reward_scale * rng.standard_normal(n)).astype(np.float32),
                           terminated=rng.random(n) < 0.2, truncated=np.zeros(n, bool),
                           next_obs=rng.uniform(lo, hi, (n, 4)).astype(np.float32))


def _params(algo: DQN) -> list[torch.Tensor]:
    return [*algo.q_net.parameters(), *algo.q_net_target.parameters()]


@needs_compiler
@pytest.mark.parametrize("kw,per,reward_scale", [
    (dict(net_arch=[64, 64]), False, 0.5),  # the quadratic part of the Huber loss, no clipping
    (dict(net_arch=[64, 64], max_grad_norm=0.05), False, 5.0),  # its linear part, gradients clipped
    (dict(net_arch=[64, 64], double_q=False), False, 2.0),  # plain max-Q targets
    (dict(net_arch=[64, 64], prioritized=True), True, 2.0),  # importance weights (prioritized replay)
    (dict(net_arch=[48, 32, 24], activation="tanh", max_grad_norm=0.05), False, 3.0),
    (dict(net_arch=[], max_grad_norm=0.05), False, 3.0),  # no hidden layer: the output layer on the observation
])
def test_compiled_step_is_the_autograd_step(kw, per, reward_scale):
    """Same loss, Q mean, gradient norm, TD errors, clipped gradients and weights (Adam's steps, the first of
    which creates its state, and the target copies every third update), step after step, up to float rounding."""
    algos = [DQN("CartPole-v1", DQNConfig(learning_rate=1e-3, target_update_interval=3, seed=0, compiled_step=c,
                                          **kw)) for c in (True, False)]
    assert algos[0].update_path == "compiled" and algos[1].update_path == "autograd"
    assert algos[1]._native is None
    rng = np.random.default_rng(1)
    norms = []
    for step in range(6):
        batch = _batch(rng, 64, reward_scale)
        w = rng.uniform(0.2, 1.0, 64).astype(np.float32) if per else None
        out = [a.train_on_batch(batch, w) for a in algos]
        assert algos[0].update_path == "compiled", native.unavailable_reason()
        for k in ("loss", "q_mean", "grad_norm/q"):
            assert out[0][k] == pytest.approx(out[1][k], rel=1e-5, abs=1e-6), (step, k)
        norms.append(out[1]["grad_norm/q"])
        np.testing.assert_allclose(out[0]["td_errors"], out[1]["td_errors"], rtol=1e-5, atol=1e-5)
        for g0, g1 in zip(*(a.q_net.parameters() for a in algos)):
            torch.testing.assert_close(g0.grad, g1.grad, rtol=1e-4, atol=1e-6)
        for p0, p1 in zip(*(_params(a) for a in algos)):
            torch.testing.assert_close(p0, p1, rtol=1e-5, atol=1e-5)
    assert algos[0].num_updates == algos[1].num_updates == 6
    clipped = sum(n > algos[1].config.max_grad_norm for n in norms)
    assert clipped == 6 if reward_scale >= 3.0 else clipped == 0  # the cases meant to clip did, the others not
    st = [a.q_opt.state[a.q_net[0].weight]["step"] for a in algos]
    assert float(st[0]) == float(st[1]) == 6.0


@needs_compiler
def test_learn_runs_the_compiled_step():
    """The learn loop (replay sampling, target updates) goes through the compiled step and changes the weights."""
    algo = DQN("CartPole-v1", DQNConfig(net_arch=[32, 32], batch_size=32, learning_starts=50, train_freq=4,
                                        target_update_interval=20, seed=0))
    before = [p.detach().clone() for p in algo.q_net.parameters()]
    algo.learn(200, progress=False)
    assert algo.update_path == "compiled" and algo.num_updates > 30
    assert all(not torch.equal(b, p) for b, p in zip(before, algo.q_net.parameters()))
    assert all(torch.isfinite(p).all() for p in algo.q_net.parameters())


def test_dqn_says_when_its_networks_leave_the_compiled_step(caplog):
    with caplog.at_level(logging.WARNING, logger="tinker.train"):
        fast = DQN("CartPole-v1", DQNConfig(net_arch=[16], seed=0))
        slow = DQN("CartPole-v1", DQNConfig(net_arch=[16], activation="elu", seed=0))
        DQN("CartPole-v1", DQNConfig(net_arch=[16], activation="elu", seed=1))
        off = DQN("CartPole-v1", DQNConfig(net_arch=[16], compiled_step=False, seed=0))
    assert isinstance(fast._native, NativeDQNUpdate) and slow._native is None and off._native is None
    assert slow.update_path == off.update_path == "autograd"
    said = [r.getMessage() for r in caplog.records if "DQN: the update runs on the autograd path" in r.getMessage()]
    assert len(said) == 2, said  # once per process and reason
    assert "ReLU or Tanh" in said[0] and "compiled_step=False" in said[1]


def test_without_the_build_dqn_trains_through_autograd(monkeypatch, caplog, tmp_path):
    """A build that fails (here: a source that does not compile) is reported, in words, and DQN trains
    through autograd instead, reporting that path."""
    bad = tmp_path / "dqn_native.cpp"
    bad.write_text("this is not C++\n")
    monkeypatch.setattr(native, "SOURCES", [bad])
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("TINKER_NATIVE_CACHE", str(tmp_path / "cache"))
    algo = DQN("CartPole-v1", DQNConfig(net_arch=[16, 16], batch_size=16, learning_starts=20, train_freq=1, seed=0))
    assert algo.update_path == "compiled" and native.unavailable_reason() is None  # not built yet
    with caplog.at_level(logging.WARNING, logger="tinker.train"):
        algo.learn(40, progress=False)
    assert algo.update_path == "autograd" and native.unavailable_reason()
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("compiled steps unavailable" in m for m in msgs) == 1
    assert sum("DQN: the update runs on the autograd path" in m for m in msgs) == 1
    assert algo.num_updates == 20 and all(torch.isfinite(p).all() for p in algo.q_net.parameters())


def test_compiled_step_off_for_other_devices_and_when_disabled(monkeypatch):
    algo = DQN("CartPole-v1", DQNConfig(net_arch=[16, 16], seed=0))
    assert NativeDQNUpdate.create(algo.q_perception, algo.q_net, algo.q_net_target, torch.device("meta")) is None
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("TINKER_NATIVE", "0")
    off = DQN("CartPole-v1", DQNConfig(net_arch=[16, 16], seed=0))
    assert off._native is None and off.update_path == "autograd"


def test_numpy_acting_is_the_torch_forward():
    """Acting one env step at a time goes through numpy views of the Q-network (`NumpyMLP`): the same greedy
    actions as the torch forward, before and after training moved the weights (the views follow them)."""
    algo = DQN("CartPole-v1", DQNConfig(net_arch=[32, 32], batch_size=16, learning_starts=20, train_freq=1, seed=0))
    assert algo._np_q is not None
    obs = np.random.default_rng(0).uniform([-2.4, -3, -0.2, -3], [2.4, 3, 0.2, 3], (256, 4)).astype(np.float32)
    for _ in range(2):
        with torch.no_grad():
            q = algo._q(torch.from_numpy(obs)).numpy()
        np.testing.assert_allclose(algo._np_q(obs), q, rtol=1e-5, atol=1e-6)
        top2 = np.sort(q, axis=1)
        clear = top2[:, -1] - top2[:, -2] > 1e-5  # rows without a near tie: the argmax cannot depend on rounding
        assert clear.sum() > 200
        np.testing.assert_array_equal(algo.predict(obs)[clear], q.argmax(1)[clear])
        algo.learn(60, progress=False)
