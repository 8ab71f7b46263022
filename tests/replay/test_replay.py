"""Replay layer: sum-tree sampling, importance weights, codecs, persistence, state capacity."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tinker_core.errors import CheckpointError, ConfigError, ValidationError
from tinker_core.replay import (PrioritizedReplay, ReplayBuffer, StorageConfig, SumTree, estimate_state_bytes,
                                load_replay)
from tinker_core.transition import Transition


def state_t(i: int, obs_dim: int = 5) -> Transition:
    o = np.full(obs_dim, i, np.float32)
    return Transition(obs=o, action=np.array([i, -i], np.float32), reward=float(i), terminated=i % 7 == 6,
                      info={"id": i, "source": "sim"}, next_obs=o + 0.5)


def frames_stream(n: int, size: int = 32, noise: bool = False, seed: int = 0) -> list[Transition]:
    """A moving square on a flat background: consecutive transitions share frames, as an env's do."""
    rng = np.random.default_rng(seed)
    imgs = []
    for k in range(n + 1):
        im = np.full((size, size, 3), 90, np.uint8)
        x = 2 + k % (size - 10)
        im[8:16, x:x + 6] = (200, 40, 40)
        if noise:
            im = np.clip(im.astype(int) + rng.integers(-20, 20, im.shape), 0, 255).astype(np.uint8)
        imgs.append(im)
    return [Transition(obs={"image": imgs[k], "joints": np.full(3, k, np.float32)}, action=np.zeros(2, np.float32),
                       reward=float(k), terminated=False, info={"id": k},
                       next_obs={"image": imgs[k + 1], "joints": np.full(3, k + 1, np.float32)}) for k in range(n)]


# -- sum tree ------------------------------------------------------------------------------------
def test_sumtree_total_and_prefix_find():
    t = SumTree(5)
    t.update(np.arange(5), [1.0, 2.0, 0.0, 3.0, 4.0])
    assert t.total == pytest.approx(10.0)
    # cumulative ranges: 0:[0,1) 1:[1,3) 2:empty 3:[3,6) 4:[6,10)
    assert t.find([0.0, 0.99, 1.0, 2.99, 3.0, 5.99, 6.0, 9.99]).tolist() == [0, 0, 1, 1, 3, 3, 4, 4]
    t.update([4], [0.0])
    assert t.total == pytest.approx(6.0)
    assert t.find([5.9999]).tolist() == [3]


def test_sumtree_sampling_is_proportional_to_priority():
    rng = np.random.default_rng(1)
    p = rng.random(37) * (rng.random(37) > 0.3)
    t = SumTree(37)
    t.update(np.arange(37), p)
    n = 200_000
    counts = np.bincount(t.sample(n, rng), minlength=37)
    expected = p / p.sum() * n
    assert counts[p == 0].sum() == 0
    # chi-square goodness of fit over the non-empty slots (df ~ 25; 99.9% quantile ~ 52)
    m = p > 0
    chi2 = float((((counts[m] - expected[m]) ** 2) / expected[m]).sum())
    assert chi2 < 60.0, chi2


def test_sumtree_rejects_bad_priorities():
    t = SumTree(4)
    with pytest.raises(ValidationError, match="priority"):
        t.update([1], [-1.0])
    with pytest.raises(ValidationError, match="slots in"):
        t.update([4], [1.0])


# -- prioritized replay ----------------------------------------------------------------------------
def test_prioritized_importance_weights_and_updates():
    buf = PrioritizedReplay(64, alpha=1.0, beta=1.0, seed=0)
    for i in range(10):
        buf.add(state_t(i))
    batch, slots, w = buf.sample(8)
    assert len(batch) == 8 and w.shape == (8,)
    np.testing.assert_allclose(w, 1.0)  # all new transitions share the max priority
    td = np.zeros(10)
    td[3] = 9.0
    buf.update_priorities(np.arange(10), td)
    batch, slots, w = buf.sample(2000)
    frac3 = float(np.mean(slots == 3))
    p = (np.abs(td) + buf.eps) ** buf.alpha
    assert frac3 == pytest.approx(p[3] / p.sum(), abs=0.02)
    # w_i = (N P(i))^-beta / max_j w_j: the most likely slot gets the smallest weight
    P = p / p.sum()
    raw = (10 * P[slots]) ** -1.0
    np.testing.assert_allclose(w, raw / raw.max(), rtol=1e-5)
    assert (batch.reward == slots.astype(np.float32)).all()  # the batch is the sampled slots


def test_prioritized_rejects_mismatched_td_errors():
    buf = PrioritizedReplay(8)
    buf.add(state_t(0))
    with pytest.raises(ValidationError, match="one value per slot"):
        buf.update_priorities([0, 0], [1.0])
    with pytest.raises(ConfigError, match="alpha"):
        PrioritizedReplay(8, alpha=2.0)


# -- storage -------------------------------------------------------------------------------------
def test_ring_overwrites_oldest_and_keeps_fields():
    buf = ReplayBuffer(8, seed=0)
    for i in range(20):
        buf.add(state_t(i))
    assert len(buf) == 8 and buf.total_added == 20
    b = buf.storage.get(np.arange(8))
    assert sorted(b.reward.tolist()) == list(range(12, 20))
    for k in range(8):
        i = int(b.reward[k])
        assert b.info[k] == {"id": i, "source": "sim"}
        np.testing.assert_array_equal(b.next_obs[k], np.full(5, i + 0.5, np.float32))
        assert b.terminated[k] == (i % 7 == 6)


def test_add_checks_shapes():
    buf = ReplayBuffer(4)
    buf.add(state_t(0))
    with pytest.raises(ValidationError, match=r"replay.add.obs.*shape \(5,\).*shape \(4,\)"):
        buf.add(state_t(1, obs_dim=4))


@pytest.mark.parametrize("codec_name", ["lz4", "none"])
def test_image_lz4_roundtrip_is_exact_and_dedups_frames(codec_name):
    ts = frames_stream(50)
    buf = ReplayBuffer(40, storage=StorageConfig(image_codec=codec_name, chunk_size=16))
    buf.extend(ts)
    b = buf.storage.get(np.arange(40))
    for k in range(40):
        src = ts[int(b.reward[k])]
        np.testing.assert_array_equal(b.obs["image"][k], src.obs["image"])
        np.testing.assert_array_equal(b.next_obs["image"][k], src.next_obs["image"])
        np.testing.assert_array_equal(b.next_obs["joints"][k], src.next_obs["joints"])
    # consecutive frames are stored once: all but the newest slot point at their successor
    assert int(buf.storage.linked.sum()) == 39


def test_jpeg_roundtrip_within_tolerance_and_smaller():
    ts = frames_stream(30, size=64)
    lz = ReplayBuffer(30, storage=StorageConfig(image_codec="lz4"))
    jp = ReplayBuffer(30, storage=StorageConfig(image_codec="jpeg", jpeg_quality=85))
    lz.extend(ts)
    jp.extend(ts)
    b = jp.storage.get(np.arange(30))
    for k in range(30):
        src = ts[int(b.reward[k])].obs["image"].astype(np.float32)
        assert np.abs(b.obs["image"][k].astype(np.float32) - src).mean() < 3.0
    raw = 30 * 64 * 64 * 3
    assert jp.nbytes() < raw and lz.nbytes() < raw


def test_uniform_sampling_covers_the_buffer():
    buf = ReplayBuffer(16, seed=3)
    buf.extend(state_t(i) for i in range(16))
    seen = np.concatenate([buf.sample(64).reward for _ in range(20)])
    assert set(seen.astype(int).tolist()) == set(range(16))


# -- persistence ---------------------------------------------------------------------------------
def test_persistence_roundtrip_prioritized_images(tmp_path):
    ts = frames_stream(70)
    buf = PrioritizedReplay(64, storage=StorageConfig(chunk_size=16), seed=0)
    buf.extend(ts[:40])
    assert buf.save(tmp_path / "r") == 40
    buf.update_priorities(np.arange(10), np.linspace(0, 5, 10))
    buf.extend(ts[40:])  # wraps around: the ring overwrites the first 6 slots
    acked = buf.save(tmp_path / "r")
    assert acked == 70
    back = load_replay(tmp_path / "r")
    assert isinstance(back, PrioritizedReplay) and back.acked == 70 and len(back) == 64
    np.testing.assert_array_equal(back.tree.leaves(), buf.tree.leaves())
    a, b = buf.storage.get(np.arange(64)), back.storage.get(np.arange(64))
    np.testing.assert_array_equal(a.obs["image"], b.obs["image"])
    np.testing.assert_array_equal(a.next_obs["image"], b.next_obs["image"])
    assert a.info == b.info
    # the restored buffer keeps filling and saving where it stopped
    back.add(ts[0])
    assert back.save(tmp_path / "r") == 71
    files = sorted(p.name for p in (tmp_path / "r").iterdir())
    assert len([f for f in files if f.startswith("c")]) == 4  # one file per chunk, old generations removed


def test_unsaved_transitions_are_not_acknowledged(tmp_path):
    buf = ReplayBuffer(100)
    buf.extend(state_t(i) for i in range(30))
    buf.save(tmp_path)
    buf.extend(state_t(i) for i in range(30, 45))  # never saved
    back = ReplayBuffer.load(tmp_path)
    assert back.acked == 30 and len(back) == 30
    assert sorted(x["id"] for x in back.storage.get(np.arange(30)).info) == list(range(30))


def test_damaged_chunk_is_refused(tmp_path):
    buf = ReplayBuffer(10)
    buf.extend(state_t(i) for i in range(10))
    buf.save(tmp_path)
    idx = json.loads((tmp_path / "index.json").read_text())
    f = tmp_path / idx["chunks"]["0"]["file"]
    data = bytearray(f.read_bytes())
    data[-3] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256"):
        load_replay(tmp_path)
    with pytest.raises(CheckpointError, match="not a saved replay"):
        load_replay(tmp_path / "nothing")


def test_million_state_transitions_fit_in_memory():
    """1e6 transitions of a 30-dim state and 7-dim action: estimate, then check it against a real buffer."""
    est = estimate_state_bytes(obs_dim=30, action_dim=7, capacity=1_000_000)
    assert est < 400 * 2 ** 20  # ~290 MB, well within the machine's 24 GB
    buf = ReplayBuffer(1_000_000, storage=StorageConfig(keep_info=False))
    t = Transition(obs=np.zeros(30, np.float32), action=np.zeros(7, np.float32), reward=0.0, terminated=False,
                   next_obs=np.zeros(30, np.float32))
    buf.add(t)
    assert abs(buf.nbytes() - est) <= 1_000_000 + 64  # the arrays are allocated up front; plus the link flags


def test_threaded_decode_matches_single_thread():
    ts = frames_stream(80)
    one = ReplayBuffer(80, storage=StorageConfig(decode_threads=1))
    two = ReplayBuffer(80, storage=StorageConfig(decode_threads=2, lz4_level=4))
    one.extend(ts)
    two.extend(ts)
    a, b = one.storage.get(np.arange(80)), two.storage.get(np.arange(80))
    np.testing.assert_array_equal(a.obs["image"], b.obs["image"])
    np.testing.assert_array_equal(a.next_obs["image"], b.next_obs["image"])
    with pytest.raises(ConfigError, match="decode_threads"):
        StorageConfig(decode_threads=0)


def episodes_stream(n: int, every: int = 7, size: int = 24) -> list[Transition]:
    """Frames with a reset every ``every`` steps, so some next frames are not the following obs."""
    rng = np.random.default_rng(5)
    out = []
    for k in range(n):
        im = np.full((size, size, 3), k % 251, np.uint8)
        im[k % size] = rng.integers(0, 255, (size, 3), dtype=np.uint8)
        nxt = im.copy() + 1 if (k + 1) % every == 0 else None
        out.append([im, nxt])
    for k in range(n):  # within an episode, next_obs of k is the very obs of k+1
        if out[k][1] is None:
            out[k][1] = out[k + 1][0] if k + 1 < n else out[k][0] + 2
    return [Transition(obs={"image": o, "joints": np.full(2, k, np.float32)}, action=np.zeros(1, np.float32),
                       reward=float(k), terminated=(k + 1) % every == 0, info={},
                       next_obs={"image": x, "joints": np.full(2, k + 1, np.float32)})
            for k, (o, x) in enumerate(out)]


@pytest.mark.parametrize("threads", [1, 3])
def test_sampled_image_batches_match_what_was_added(threads, monkeypatch):
    """Decoding straight into the batch (threads or not, C path or portable path) gives back the added frames,
    across episode ends, ring wrap-around, repeated slots and the newest slot's pending next frame."""
    from tinker_core.replay import codec

    ts = episodes_stream(90)
    buf = ReplayBuffer(64, storage=StorageConfig(decode_threads=threads, chunk_size=16), seed=2)
    buf.extend(ts)
    assert 0 < int(buf.storage.linked.sum()) < 63  # some frames shared, some stored apart (episode ends)
    # the ctypes C paths (one call per frame, one call per piece of frames), then lz4.block's portable path
    paths = [(codec._LZ4_INTO, codec._LZ4_FRAMES), (None, None)]
    assert None not in paths[0], "LZ4_decompress_safe and LZ4F_decompress should be reachable in the pinned wheel"
    for into, frames in paths:
        monkeypatch.setattr(codec, "_LZ4_INTO", into)
        monkeypatch.setattr(codec, "_LZ4_FRAMES", frames)
        slots = np.concatenate([np.arange(64), np.random.default_rng(0).integers(0, 64, 200)])
        b = buf.storage.get(slots, with_info=False)
        for j in range(len(slots)):
            src = ts[int(b.reward[j])]
            np.testing.assert_array_equal(b.obs["image"][j], src.obs["image"])
            np.testing.assert_array_equal(b.next_obs["image"][j], src.next_obs["image"])
        assert b.obs["image"].flags.writeable and b.next_obs["image"].flags.writeable


@pytest.mark.parametrize("threads", [1, 2])
def test_damaged_frame_in_memory_is_refused_not_returned(threads, monkeypatch):
    from tinker_core.replay import codec

    buf = ReplayBuffer(40, storage=StorageConfig(decode_threads=threads))
    buf.extend(frames_stream(40))
    buf.storage.frames["image"][3] = buf.storage.frames["image"][3][:-9]  # truncated lz4 block
    for into, frames in [(codec._LZ4_INTO, codec._LZ4_FRAMES), (None, None)]:
        monkeypatch.setattr(codec, "_LZ4_INTO", into)
        monkeypatch.setattr(codec, "_LZ4_FRAMES", frames)
        with pytest.raises(ValidationError, match="replay frame"):
            buf.storage.get(np.arange(40))  # 80 frames: the threaded path when threads > 1


def test_non_finite_or_misshapen_transitions_are_refused():
    """One NaN in replay would poison every batch it is drawn into: add refuses it, naming the field."""
    buf = ReplayBuffer(8)
    buf.add(state_t(0))
    good = state_t(1)
    bad_obs = Transition(np.array([0, np.nan, 0, 0, 0], np.float32), good.action, 0.0, False, False, {}, good.next_obs)
    bad_next = Transition(good.obs, good.action, 0.0, False, False, {}, np.full(5, np.inf, np.float32))
    bad_act = Transition(good.obs, np.array([np.nan, 0], np.float32), 0.0, False, False, {}, good.next_obs)
    bad_rew = Transition(good.obs, good.action, float("nan"), False, False, {}, good.next_obs)
    short_next = Transition(good.obs, good.action, 0.0, False, False, {}, np.zeros(4, np.float32))
    for t, where in [(bad_obs, r"replay.add.obs"), (bad_next, r"replay.add.next_obs"), (bad_act, "replay.add.action"),
                     (bad_rew, "replay.add.reward"), (short_next, "replay.add.next_obs.*shapes")]:
        with pytest.raises(ValidationError, match=where):
            buf.add(t)
    assert len(buf) == 1 and buf.total_added == 1
    buf.add(good)
    assert len(buf) == 2
