"""Perception latency of the camera bundles: the reach locator (perception.onnx of pretrained/arm_reach_vision,
image 64x128 + state, and its hand.onnx on the same frame, as the loop runs them) and the sorter's
(pretrained/arm_sort_vision: both objects located, every object term written, and its hand.onnx), each against its
state-only bundle's perception (pretrained/arm_reach/bundle, pretrained/arm_sort/bundle), in one run, alternating
rounds; onnxruntime, 1 thread, batch 1, recorded observations. Beside them, the sorter's hold with a camera moved
8 cm (`RestingHold`: each object corrected through the camera's model), which the loop runs after perception.

    python benchmarks/vision.py            # 5 rounds of 1000 calls each
    python benchmarks/vision.py --quick    # 2 rounds of 300 calls
"""

from __future__ import annotations

import os
import sys

import numpy as np

from _common import ROOT, arg_parser, header, machine, write_result

sys.path.insert(0, str(ROOT))

from tinker_cli.vision import bench_perception  # noqa: E402
from tinker_deploy.runtime import OnnxPolicy  # noqa: E402


def main() -> None:
    args = arg_parser(__doc__.split("\n\n")[0]).parse_args()
    rounds, n = (2, 300) if args.quick else (5, 1000)
    locator = OnnxPolicy.from_bundle(ROOT / "pretrained/arm_reach_vision", part="perception")
    sorter = OnnxPolicy.from_bundle(ROOT / "pretrained/arm_sort_vision", part="perception")
    hands = {"vision_locator": locator.hand(), "sort_vision_locator": sorter.hand()}
    parts = {"vision_locator": locator,
             "state_perception": OnnxPolicy.from_bundle(ROOT / "pretrained/arm_reach/bundle", part="perception"),
             "sort_vision_locator": sorter,
             "sort_state_perception": OnnxPolicy.from_bundle(ROOT / "pretrained/arm_sort/bundle", part="perception")}
    runs: dict[str, list[dict]] = {k: [] for k in [*parts, "sort_hold_moved_camera"]}
    loads = []
    for _ in range(rounds):
        for name, part in parts.items():
            if name.endswith("state_perception"):
                obs, _ = part.bundle.recorded()
                runs[name].append(_bench_flat(part, obs, n))
            else:
                runs[name].append(bench_perception(part, n, hands.get(name)))
        runs["sort_hold_moved_camera"].append(_bench_hold(sorter, n))
        loads.append(os.getloadavg()[0])
    figures = {k: {"p50_ms": float(np.median([r["p50_ms"] for r in v])),
                   "p99_ms_worst_round": float(max(r["p99_ms"] for r in v)), "rounds": v} for k, v in runs.items()}
    result = {**header("vision", args.quick, machine(("onnxruntime",), extra={"load_avg_1min": loads})),
              "figures": figures, "goals": {"vision_locator_p99_ms": 10.0, "sort_vision_locator_p99_ms": 10.0},
              "vision_locator_includes_hand_model": hands["vision_locator"] is not None,
              "sort_vision_locator_includes_hand_model": hands["sort_vision_locator"] is not None,
              "ratios_p50": {"reach_vision_over_state": figures["vision_locator"]["p50_ms"]
                             / figures["state_perception"]["p50_ms"],
                             "sort_vision_over_state": figures["sort_vision_locator"]["p50_ms"]
                             / figures["sort_state_perception"]["p50_ms"]},
              "met": max(figures[k]["p99_ms_worst_round"] for k in ("vision_locator", "sort_vision_locator")) <= 10.0}
    print(f"wrote {write_result('vision', args.quick, result)}")
    for k, f in figures.items():
        print(f"{k}: p50 {f['p50_ms']:.3f} ms, worst-round p99 {f['p99_ms_worst_round']:.3f} ms")
    for k, r in result["ratios_p50"].items():  # the camera bundle's locator against a state bundle's normalization
        print(f"{k} (p50): {r:.1f}x")


def _bench_hold(perception, n: int) -> dict:
    """The sorter's hold on recorded frames' features, the hand seen 8 cm off (every object corrected)."""
    import time

    from tinker_core.loop.held_estimate import estimate_hold

    m = perception.manifest
    hold = estimate_hold([t for t in m.obs_terms if t.name != "image"], m.image_terms, static=False, calibrate=True,
                         geometry=m.located_geometry)
    obs, _ = perception.bundle.recorded()
    feats = [perception({k: v[i] for k, v in obs.items()}) for i in range(len(obs["state"]))]
    move = np.array([0.03, -0.045, 0.06])  # 8.1 cm: the hand is seen this far off
    hold(feats[0], "1", hand=hold.asm.raw_term(feats[0], "ee_pos") - move)
    ms = []
    for i in range(n):
        f = feats[i % len(feats)]
        hand = hold.asm.raw_term(f, "ee_pos") - move
        t = time.perf_counter_ns()
        hold(f, "1", hand=hand)
        ms.append((time.perf_counter_ns() - t) / 1e6)
    return {"n": n, "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


def _bench_flat(part, obs, n: int) -> dict:
    import time

    ms = []
    for i in range(n):
        t = time.perf_counter_ns()
        part(obs[i % len(obs)])
        ms.append((time.perf_counter_ns() - t) / 1e6)
    return {"n": n, "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


if __name__ == "__main__":
    main()
