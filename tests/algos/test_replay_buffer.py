"""The off-policy algorithms' ring buffer (tinker_core/algos/buffers.py): what goes in comes out of
the rows sampled, across the wrap-around, for flat and dict observations; the CPU path (numpy views of
the storage) stores and samples exactly what the general torch path does."""

from __future__ import annotations

import numpy as np
import torch

from tinker_core.algos.buffers import ReplayBuffer
from tinker_core.spec import DictSpec, Spec

FLAT = Spec((3,))
DICT = DictSpec({"image": Spec((2, 2), "uint8"), "joints": Spec((2,))})


def _rows(rng: np.random.Generator, n: int, spec, act_dim: int = 2):
    def obs():
        if isinstance(spec, DictSpec):
            return {"image": rng.integers(0, 256, (n, 2, 2)).astype(np.uint8), "joints": rng.normal(size=(n, 2))}
        return rng.normal(size=(n, 3))  # float64, as envs give: stored as float32

    return (obs(), rng.uniform(-1, 1, (n, act_dim)).astype(np.float32), rng.normal(size=n).astype(np.float32),
            obs(), rng.random(n) < 0.3)


def _fill(buf: ReplayBuffer, spec, sizes, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    added = []
    for n in sizes:
        rows = _rows(rng, n, spec)
        buf.add(*rows)
        added.append(rows)
    return added


def _as_np(x):
    return {k: v.numpy() for k, v in x.items()} if isinstance(x, dict) else x.numpy()


def test_rows_round_trip_through_the_wrap_around():
    buf = ReplayBuffer(5, FLAT, (2,), False, torch.device("cpu"))
    (o1, a1, r1, n1, d1), (o2, a2, r2, n2, d2) = _fill(buf, FLAT, [3, 4])  # the second add wraps: rows 3, 4, 0, 1
    assert len(buf) == 5 and buf.full and buf.pos == 2
    s = buf.get(torch.tensor([2, 3, 4, 0, 1]))
    np.testing.assert_array_equal(s.obs.numpy(), np.concatenate([o1[2:], o2]).astype(np.float32))
    np.testing.assert_array_equal(s.next_obs.numpy(), np.concatenate([n1[2:], n2]).astype(np.float32))
    np.testing.assert_array_equal(s.actions.numpy(), np.concatenate([a1[2:], a2]))
    np.testing.assert_array_equal(s.rewards.numpy(), np.concatenate([r1[2:], r2]))
    np.testing.assert_array_equal(s.dones.numpy(), np.concatenate([d1[2:], d2]).astype(np.float32))
    assert s.obs.dtype == torch.float32 and s.dones.dtype == torch.float32
    # the checkpoint's tensors are the same storage
    np.testing.assert_array_equal(buf.tensors()["rewards"][[3, 4, 0, 1]], r2)


def test_dict_observations_keep_their_dtypes():
    buf = ReplayBuffer(8, DICT, (2,), False, torch.device("cpu"))
    [(o, _, _, n, _)] = _fill(buf, DICT, [4])
    s = buf.get(np.array([1, 3]))
    assert s.obs["image"].dtype == torch.uint8
    np.testing.assert_array_equal(s.obs["image"].numpy(), o["image"][[1, 3]])
    np.testing.assert_array_equal(s.next_obs["joints"].numpy(), n["joints"][[1, 3]].astype(np.float32))


def test_the_numpy_path_stores_and_samples_what_the_torch_path_does():
    for spec in (FLAT, DICT):
        fast = ReplayBuffer(6, spec, (2,), False, torch.device("cpu"))
        general = ReplayBuffer(6, spec, (2,), False, torch.device("cpu"))
        general._views = None  # what a non-CPU device takes
        _fill(fast, spec, [2, 3, 3], seed=1)
        _fill(general, spec, [2, 3, 3], seed=1)
        idx = torch.randint(0, 6, (16,), generator=torch.Generator().manual_seed(0))
        got, want = fast.get(idx), general.get(idx)
        assert got.demo is None and want.demo is None  # a buffer's own rows are no demonstrations
        for a, b in zip(got[:5], want[:5]):
            a, b = _as_np(a), _as_np(b)
            if isinstance(a, dict):
                for k in a:
                    assert a[k].dtype == b[k].dtype
                    np.testing.assert_array_equal(a[k], b[k])
            else:
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(a, b)


def test_discrete_actions_are_stored_as_indices():
    buf = ReplayBuffer(4, FLAT, (), True, torch.device("cpu"))
    buf.add(np.zeros((2, 3)), np.array([1, 0]), np.zeros(2, np.float32), np.zeros((2, 3)), np.zeros(2, bool))
    s = buf.get(torch.tensor([0, 1]))
    assert s.actions.dtype == torch.long and s.actions.tolist() == [1, 0]
