"""Replay memory benchmark: bytes per image transition (raw vs lz4 vs JPEG) on frames from the sim camera
with the arm moving, sampling throughput (batch 256) against an uncompressed numpy buffer in the same run,
and prioritized sampling time at 1e6 capacity against numpy's O(n) weighted choice.

    python benchmarks/replay.py [--quick]

Writes benchmarks/results/replay.json (``--quick``: replay.quick.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

# benchmarks/ is sys.path[0] when run as `python benchmarks/NAME.py`
from _common import ROOT, arg_parser, header, machine, write_result

sys.path.insert(0, str(ROOT))

from tinker_core.replay import PrioritizedReplay, ReplayBuffer, StorageConfig, SumTree  # noqa: E402
from tinker_core.transition import Transition  # noqa: E402


def sim_camera_transitions(n: int, seed: int = 0) -> list[Transition]:
    """``n`` transitions of tinker/ArmReach-v0 with the 84x84 camera, randomized, random actions (the arm moves)."""
    import tinker_sim as sim

    env = sim.make("tinker/ArmReach-v0", camera=True, image_size=84, randomize=True)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    for _ in range(n):
        a = env.action_space.sample()
        nxt, r, term, trunc, info = env.step(a)
        out.append(Transition(obs, a, float(r), term, trunc, {"source": "sim"}, nxt))
        obs = env.reset()[0] if (term or trunc) else nxt
    env.close()
    return out


def with_noise(ts: list[Transition], sigma: float, seed: int = 1) -> list[Transition]:
    """The same stream with Gaussian sensor noise on every frame (a frame shared by t and t+1 stays shared)."""
    rng = np.random.default_rng(seed)
    cache: dict[int, np.ndarray] = {}

    def noisy(img: np.ndarray) -> np.ndarray:
        k = id(img)
        if k not in cache:
            cache[k] = np.clip(img + rng.normal(0, sigma, img.shape), 0, 255).astype(np.uint8)
        return cache[k]

    return [Transition({**t.obs, "image": noisy(t.obs["image"])}, t.action, t.reward, t.terminated, t.truncated,
                       t.info, {**t.next_obs, "image": noisy(t.next_obs["image"])}) for t in ts]


class NumpyBuffer:
    """The competitor: an uncompressed ring of numpy arrays, obs and next_obs stored separately."""

    def __init__(self, ts: list[Transition]):
        n = len(ts)
        self.img = np.stack([t.obs["image"] for t in ts])
        self.next_img = np.stack([t.next_obs["image"] for t in ts])
        self.state = np.stack([t.obs["state"] for t in ts])
        self.next_state = np.stack([t.next_obs["state"] for t in ts])
        self.action = np.stack([t.action for t in ts])
        self.reward = np.array([t.reward for t in ts], np.float32)
        self.done = np.array([t.terminated for t in ts])
        self.rng = np.random.default_rng(0)
        self.n = n

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.img, self.next_img, self.state, self.next_state, self.action,
                                      self.reward, self.done))

    def sample(self, b: int):
        i = self.rng.integers(0, self.n, b)
        return (self.img[i], self.next_img[i], self.state[i], self.next_state[i], self.action[i], self.reward[i],
                self.done[i])


def per_transition_bytes(ts: list[Transition], codec: str, **kw) -> tuple[float, float, ReplayBuffer]:
    buf = ReplayBuffer(len(ts), storage=StorageConfig(image_codec=codec, keep_info=False, **kw))
    buf.extend(ts)
    st = buf.storage
    img = sum(len(b) for arr in (st.frames["image"], st.next_frames["image"]) for b in arr if b is not None)
    return buf.nbytes() / len(ts), img / len(ts), buf


def time_sampling(fn, reps: int, batch: int, clock=time.perf_counter) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = clock()
        fn(batch)
        out.append(clock() - t0)
    return out


def main() -> None:
    ap = arg_parser(__doc__, "fewer frames and repetitions (about a minute)",
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    args = ap.parse_args()
    n = 600 if args.quick else 3000
    reps = 15 if args.quick else 60
    cap_prio = 100_000 if args.quick else 1_000_000
    batch = 256
    fig: dict = {}

    t0 = time.perf_counter()
    ts = sim_camera_transitions(n)
    fig["sim_frames"] = n
    fig["sim_collect_s"] = round(time.perf_counter() - t0, 2)
    frame = ts[0].obs["image"].nbytes
    np_buf = NumpyBuffer(ts)
    raw_per_t = np_buf.nbytes() / n
    fig["raw_frame_bytes"] = frame
    fig["raw_per_transition_bytes"] = round(raw_per_t, 1)
    bufs = {}
    for codec in ("lz4", "jpeg"):
        per_t, img_per_t, bufs[codec] = per_transition_bytes(ts, codec)
        fig[f"{codec}_per_transition_bytes"] = round(per_t, 1)
        fig[f"{codec}_image_bytes_per_transition"] = round(img_per_t, 1)
        fig[f"{codec}_ratio_vs_raw"] = round(raw_per_t / per_t, 2)
        # without the shared-frame saving: one compressed frame against one raw frame
        frames_per_t = 1 + (1 - bufs[codec].storage.linked.mean())  # obs frame + the unshared next frames
        fig[f"{codec}_frame_ratio_vs_raw_frame"] = round(frame / (img_per_t / frames_per_t), 2)
    per_t, _, _ = per_transition_bytes(ts, "lz4", lz4_level=4)
    fig["lz4hc4_per_transition_bytes"] = round(per_t, 1)
    fig["lz4hc4_ratio_vs_raw"] = round(raw_per_t / per_t, 2)
    noisy = with_noise(ts, sigma=6.0)
    raw_noisy = NumpyBuffer(noisy).nbytes() / n
    for codec in ("lz4", "jpeg"):
        per_t, _, _ = per_transition_bytes(noisy, codec)
        fig[f"noisy_sigma6_{codec}_per_transition_bytes"] = round(per_t, 1)
        fig[f"noisy_sigma6_{codec}_ratio_vs_raw"] = round(raw_noisy / per_t, 2)

    # sampling: alternate tinker and numpy in the same loop
    lz = bufs["lz4"]
    jp = bufs["jpeg"]
    lz1 = ReplayBuffer(n, storage=StorageConfig(image_codec="lz4", keep_info=False, decode_threads=1))
    lz1.extend(ts)
    fig["lz4_decode_threads"] = lz.storage.config.decode_threads
    t_lz, t_np, t_jp, t_lz1 = [], [], [], []
    for _ in range(reps):
        t_np += time_sampling(np_buf.sample, 1, batch)
        t_lz += time_sampling(lambda b: lz.sample(b, with_info=False), 1, batch)
        t_lz1 += time_sampling(lambda b: lz1.sample(b, with_info=False), 1, batch)
        t_jp += time_sampling(lambda b: jp.sample(b, with_info=False), 1, batch)
    med = statistics.median
    fig["numpy_sample256_per_s"] = round(1 / med(t_np), 1)
    fig["lz4_sample256_per_s"] = round(1 / med(t_lz), 1)
    fig["lz4_1thread_sample256_per_s"] = round(1 / med(t_lz1), 1)
    fig["jpeg_sample256_per_s"] = round(1 / med(t_jp), 1)
    fig["lz4_sampling_ratio_vs_numpy"] = round(med(t_np) / med(t_lz), 3)
    fig["lz4_1thread_sampling_ratio_vs_numpy"] = round(med(t_np) / med(t_lz1), 3)
    fig["jpeg_sampling_ratio_vs_numpy"] = round(med(t_np) / med(t_jp), 3)
    # the same single-thread pair in CPU time of the calling thread: what a busy shared machine cannot skew
    c_np, c_lz1 = [], []
    for _ in range(reps):
        c_np += time_sampling(np_buf.sample, 1, batch, clock=time.thread_time)
        c_lz1 += time_sampling(lambda b: lz1.sample(b, with_info=False), 1, batch, clock=time.thread_time)
    fig["lz4_1thread_sampling_cpu_ratio_vs_numpy"] = round(med(c_np) / med(c_lz1), 3)

    # prioritized sampling at 1e6: the sum tree vs numpy's O(n) weighted choice, and the whole buffer
    rng = np.random.default_rng(0)
    pri = rng.random(cap_prio) + 1e-3
    tree = SumTree(cap_prio)
    tree.set_leaves(pri)
    t_tree, t_choice, t_upd = [], [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        idx = tree.sample(batch, rng)
        t_tree.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        tree.update(idx, rng.random(batch))
        t_upd.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        rng.choice(cap_prio, size=batch, p=pri / pri.sum())
        t_choice.append(time.perf_counter() - t0)
    fig["prio_capacity"] = cap_prio
    fig["sumtree_sample256_us"] = round(statistics.median(t_tree) * 1e6, 1)
    fig["sumtree_update256_us"] = round(statistics.median(t_upd) * 1e6, 1)
    fig["numpy_weighted_choice256_us"] = round(statistics.median(t_choice) * 1e6, 1)
    fig["sumtree_speedup_vs_numpy_choice_ratio"] = round(statistics.median(t_choice) / statistics.median(t_tree), 1)
    pr = PrioritizedReplay(cap_prio, storage=StorageConfig(keep_info=False), seed=0)
    state_ts = [Transition(t.obs["state"], t.action, t.reward, t.terminated, t.truncated, {}, t.next_obs["state"])
                for t in ts]
    t0 = time.perf_counter()
    k = 0
    while k < cap_prio:
        m = min(len(state_ts), cap_prio - k)
        pr.extend(state_ts[:m])
        k += m
    fig["prio_fill_per_s"] = round(cap_prio / (time.perf_counter() - t0), 1)
    pr.update_priorities(np.arange(cap_prio), rng.random(cap_prio))
    t_full = []
    for _ in range(reps):
        t0 = time.perf_counter()
        _, slots, _w = pr.sample(batch, with_info=False)
        pr.update_priorities(slots, rng.random(batch))
        t_full.append(time.perf_counter() - t0)
    fig["prioritized_sample_and_update256_state_us"] = round(statistics.median(t_full) * 1e6, 1)
    fig["prioritized_state_buffer_bytes"] = pr.nbytes()

    result = {
        **header("replay", args.quick, machine()),
        "figures": fig,
        "goals": {"lz4_ratio_vs_raw": ">= 8.0", "lz4_sampling_ratio_vs_numpy": ">= 0.5"},
        "notes": ("raw = an uncompressed numpy buffer storing obs and next_obs images and state (as a plain replay "
                  "does); tinker stores each frame once when it is both next_obs of t and obs of t+1. "
                  "*_frame_ratio_vs_raw_frame compares one compressed frame with one raw frame, without that saving. "
                  "noisy = Gaussian noise sigma 6 on every frame. lz4 sampling uses the default StorageConfig "
                  "(decode_threads frames decoded in parallel, straight into the batch); lz4_1thread decodes in the "
                  "caller's thread. numpy's fancy indexing is one thread either way. *_cpu_ratio_* compares CPU time of the "
                  "calling thread (time.thread_time), which preemption on a loaded machine does not inflate."),
    }
    write_result("replay", args.quick, result)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
