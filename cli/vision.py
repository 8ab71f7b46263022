"""``tinker vision``: the camera in the loop for ArmReach: data, train, export and benchmark the target locator."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

ORDER = 45

EPILOG = """\
how it works (the modular split): a small CNN (tinker_core.nn.locator.TargetLocator: per-view heatmaps, spatial
soft-argmax) finds the target in two 64x64 camera views, and its 3D position is triangulated through the camera's
nominal model (--head mlp: a learned map instead); the estimate replaces the target terms of the shipped state
policy's observation (LocatedState), and that policy acts on it. The locator is trained by supervision in
simulation: images with domain randomization of what a real camera varies (sim/config/vision_randomization.yaml:
pose shift and tilt, field of view, light, image noise; marker colour), labelled with the true target position.
Ground truth labels and scores; it is never a policy input.
The same network also finds the end effector it sees (the hand; --no-hand: not): in the loop, forward kinematics
says where the hand really is, so the difference measures a moved camera's error (through the camera's geometry
the target is misplaced by the same vector), and the held target is corrected by it
(tinker_core.loop.held_estimate.EstimateHold). The bundle then has hand.onnx beside perception.onnx.

steps (defaults write under runs/vision/):
  tinker vision data --episodes 2500                 labelled images -> runs/vision/train.npz
  tinker vision train --epochs 12                    locator -> runs/vision/locator.pt (prints val error, cm)
  tinker vision export -o pretrained/arm_reach_vision  bundle: perception.onnx (image+state -> features) + actor
  tinker eval pretrained/arm_reach_vision --episodes 100
  tinker eval pretrained/arm_reach_vision --dynamics sim/config/dynamics/shifted_camera.yaml --episodes 100
  tinker vision bench pretrained/arm_reach_vision    perception latency p50/p99 (onnxruntime, 1 thread)
"""


def register(sub: Any) -> None:
    p = sub.add_parser("vision", help="camera-based ArmReach: train, export and benchmark the target locator",
                       description="Train a CNN that finds the reach target in the camera image (supervised in "
                                   "randomized simulation), put it in front of the shipped state policy as an ONNX "
                                   "bundle that `tinker eval` runs, and measure its latency.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    vs = p.add_subparsers(dest="vision_command", metavar="STEP", required=True)
    d = vs.add_parser("data", help="render labelled camera images of randomized ArmReach episodes")
    d.add_argument("--episodes", type=int, default=2500, help="episodes (2 images each; default 2500)")
    d.add_argument("--seed", type=int, default=1, help="seed (default 1; eval seeds are 1000+)")
    d.add_argument("--out", default="runs/vision/train.npz", help="output .npz (default runs/vision/train.npz)")
    d.set_defaults(func=run_data)
    t = vs.add_parser("train", help="train the locator by supervision (MSE to the true target position)")
    t.add_argument("--data", nargs="+", default=["runs/vision/train.npz"],
                   help="one or more datasets from 'tinker vision data' (concatenated)")
    t.add_argument("--epochs", type=int, default=12, help="passes over the data (default 12)")
    t.add_argument("--batch", type=int, default=64, help="batch size (default 64)")
    t.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate, cosine-decayed (default 2e-3)")
    t.add_argument("--seed", type=int, default=0, help="torch seed (default 0)")
    t.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    t.add_argument("--keypoints", type=int, default=None,
                   help="heatmaps per view (default 8 with the hand, 4 without)")
    t.add_argument("--head", choices=("triangulate", "mlp"), default="triangulate",
                   help="how heatmaps become positions: 'triangulate' (default) through the simulated camera's "
                        "nominal model, one heatmap per view for the target and one for the hand, so that a moved "
                        "camera misplaces both by the same vector; 'mlp': a learned map from 8 (4) keypoints per view")
    t.add_argument("--convs", type=int, default=None,
                   help="3x3 layers at the start of the trunk (default 3 for triangulate, 1 for mlp)")
    t.add_argument("--no-hand", dest="hand", action="store_false",
                   help="find the target only; by default the locator also learns to find the end effector (the "
                        "data's 'hands'), which calibrates a moved camera in the loop")
    t.add_argument("--out", default="runs/vision/locator.pt", help="weights + config (default runs/vision/locator.pt)")
    t.set_defaults(func=run_train)
    e = vs.add_parser("export", help="bundle = locator + the shipped state policy's actor (+ hand.onnx from a hand "
                                     "locator), ONNX, parity-checked")
    e.add_argument("--locator", default="runs/vision/locator.pt", help="trained locator (default runs/vision/locator.pt)")
    e.add_argument("--checkpoint", default="pretrained/arm_reach/checkpoint", help="state policy checkpoint")
    e.add_argument("-o", "--out", default="runs/vision/bundle", help="bundle directory (default runs/vision/bundle)")
    e.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest difference allowed between torch and onnxruntime on the recorded observations, per "
                        "model (default 1e-4; the whole policy adds the locator's float32 rounding through the actor)")
    e.set_defaults(func=run_export)
    b = vs.add_parser("bench", help="perception (locator) latency through onnxruntime, p50/p99, JSON")
    b.add_argument("bundle", nargs="?", default="pretrained/arm_reach_vision", help="vision bundle")
    b.add_argument("-n", type=int, default=1000, help="inferences (default 1000)")
    b.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (default 1)")
    b.set_defaults(func=run_bench)


def run_data(args: argparse.Namespace) -> int:
    import numpy as np
    from tqdm import tqdm

    from tinker_cli._vision_data import generate
    from tinker_core.errors import ConfigError

    if args.episodes < 1:
        raise ConfigError(f"--episodes must be >= 1, got {args.episodes}")
    bar = tqdm(total=args.episodes, desc="render", unit="ep")
    try:
        x, y, hands = generate(args.episodes, seed=args.seed, on_episode=lambda i: bar.update(1))
    finally:
        bar.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.out, images=x, targets=y, hands=hands)
    print(f"{len(x)} images {x.shape[1:]} -> {args.out}")
    return 0


def load_locator(path: str | Path) -> Any:
    import torch

    from tinker_core.nn.locator import LocatorConfig, TargetLocator

    blob = torch.load(path, map_location="cpu", weights_only=False)
    model = TargetLocator(LocatorConfig(**blob["config"]))
    model.load_state_dict(blob["state_dict"])
    return model.eval()


def run_train(args: argparse.Namespace) -> int:
    import dataclasses
    import time

    import numpy as np
    import torch
    from tqdm import tqdm

    from tinker_core.errors import ConfigError
    from tinker_core.nn.locator import LocatorConfig, TargetLocator

    triangulate = args.head == "triangulate"
    if triangulate and args.keypoints is not None:
        raise ConfigError("--keypoints: a triangulating locator has one heatmap per view for each thing it finds; "
                          "--keypoints goes with --head mlp")
    for path in args.data:
        if not Path(path).is_file():
            raise ConfigError(f"--data {path}: no such file; make one with 'tinker vision data'")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    sets = [np.load(path) for path in args.data]
    x = torch.from_numpy(np.concatenate([d["images"] for d in sets]))
    y = torch.from_numpy(np.concatenate([d["targets"] for d in sets])).float()
    h, w = x.shape[1], x.shape[2]
    convs = args.convs if args.convs is not None else (3 if triangulate else 1)
    if triangulate:
        keypoints, projections = (2 if args.hand else 1), _nominal_projections(h, w // h)
    else:
        keypoints = args.keypoints if args.keypoints is not None else (8 if args.hand else 4)
        projections = None
    ranges = {}
    if args.hand:
        no_hands = [p for p, d in zip(args.data, sets) if "hands" not in d]
        if no_hands:
            raise ConfigError(f"--data {no_hands[0]}: no end-effector labels ('hands'; data made before they were "
                              f"recorded): make it again with 'tinker vision data', or train with --no-hand")
        hands = torch.from_numpy(np.concatenate([d["hands"] for d in sets])).float()
        lo, hi = hands.min(0).values, hands.max(0).values
        target = LocatorConfig()
        ranges = {"center": target.center + ((hi + lo) / 2).tolist(),
                  "half": target.half + ((hi - lo) / 2 * 1.1).tolist()}  # the hands seen, 10% margin
        y = torch.cat([y, hands], dim=1)
    cfg = LocatorConfig(image_size=h, views=w // h, keypoints=keypoints, hand=args.hand, convs=convs,
                        projections=projections, **ranges)
    model = TargetLocator(cfg)
    n_val = max(1, len(x) // 10)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(args.seed))
    val, tr = perm[:n_val], perm[n_val:]
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    steps = args.epochs * ((len(tr) + args.batch - 1) // args.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=steps, pct_start=0.1)
    yn = (y - model.out_center) / model.out_half
    t0 = time.time()
    bar = tqdm(total=steps, desc="train", unit="batch")
    log = []
    for epoch in range(args.epochs):
        model.train()
        order = tr[torch.randperm(len(tr))]
        for i in range(0, len(order), args.batch):
            idx = order[i:i + args.batch]
            loss = torch.nn.functional.mse_loss(model.normalized(x[idx]), yn[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{loss.item():.4f}")
        err = _val_error_m(model, x[val], y[val])
        log.append({"epoch": epoch, **{f"val_{k}_{q}_cm": 100 * float(f(e)) for k, e in err.items()
                                       for q, f in (("mean", np.mean), ("p95", lambda a: np.quantile(a, 0.95)))}})
        bar.write(f"epoch {epoch}: val error " + ", ".join(
            f"{k} mean {log[-1][f'val_{k}_mean_cm']:.2f} cm, p95 {log[-1][f'val_{k}_p95_cm']:.2f} cm" for k in err))
    bar.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"config": dataclasses.asdict(cfg), "state_dict": model.state_dict(), "log": log,
                "data": [str(p) for p in args.data], "n_train": len(tr), "n_val": n_val, "wall_s": time.time() - t0}, args.out)
    print(json.dumps({"out": args.out, "wall_s": round(time.time() - t0, 1), **log[-1]}))
    return 0


def _nominal_projections(image_size: int, views: int) -> list:
    """The simulated ArmReach camera's nominal projections from the robot's base frame (the labels' frame)."""
    from tinker_sim.arm_env import ArmEnv

    env = ArmEnv("reach", camera=True, image_size=image_size, camera_views=views)
    try:
        return env.camera.projections(env.robot.base_position)
    finally:
        env.close()


def _val_error_m(model: Any, x: Any, y: Any) -> dict[str, Any]:
    """Distance from each estimate to its label, m: ``target``, and ``hand`` for a hand locator."""
    import torch

    model.eval()
    with torch.no_grad():
        est = torch.cat([model(x[i:i + 256]) for i in range(0, len(x), 256)])
    n = model.config.target_size
    err = {"target": torch.linalg.norm(est[:, :n] - y[:, :n], dim=1).numpy()}
    if model.config.hand:
        err["hand"] = torch.linalg.norm(est[:, n:] - y[:, n:], dim=1).numpy()
    return err


def run_export(args: argparse.Namespace) -> int:
    import numpy as np

    import tinker_sim  # noqa: F401  (registers the tinker/ ids)
    from tinker_cli._compose import make_env
    from tinker_core.algos import load_algorithm
    from tinker_core.nn.locator import HandLocator, LocatedState
    from tinker_core.spec import spec_from_space
    from tinker_deploy.export import export_bundle

    locator = load_locator(args.locator)
    algo = load_algorithm(args.checkpoint, device="cpu")
    parts, meta = algo.deployable_parts(), dict(algo.export_metadata())
    c = locator.config
    env = make_env("tinker/ArmReach-v0", camera=True, image_size=c.image_size, camera_views=c.views, safety=False,
                   action_chain=meta.get("action_chain_config"))
    u = env.unwrapped
    slots, i = {}, 0
    for t in u.obs_terms:
        slots[t["name"]] = (i, t)
        i += t["size"]
    (ts, tt), (rs, rt), (es, _) = slots["target_pos"], slots["target_minus_ee"], slots["ee_pos"]
    perception = LocatedState(locator, ts, rs, es, tt["offset"], tt["scale"], rt["scale"])
    if type(parts["perception"]).__name__ != "Flatten":
        from tinker_core.errors import ConfigError

        raise ConfigError(f"{args.checkpoint}: expected a state policy with a Flatten perception (it feeds the actor "
                          f"the observation as is), got {type(parts['perception']).__name__}")
    recorded = {"image": [], "state": []}
    obs, _ = env.reset(seed=0)
    for k in range(32):
        if k % 8 == 0:
            obs, _ = env.reset(seed=k)
        recorded["image"].append(obs["image"])
        recorded["state"].append(obs["state"])
        obs, *_ = env.step(env.action_space.sample())
    recorded = {k: np.stack(v) for k, v in recorded.items()}
    meta.update(obs_spec=spec_from_space(env.observation_space), image_terms=["target_pos", "target_minus_ee"],
                env={"id": "tinker/ArmReach-v0", "kwargs": {"camera": True, "image_size": c.image_size,
                                                            "camera_views": c.views}, "env_import": [], "wrappers": []})
    env.close()
    models = {"perception": perception, "actor": parts["actor"]}
    if c.hand:
        models["hand"] = HandLocator(locator)
    out = export_bundle(models, meta, args.out, recorded_obs=recorded,
                        tolerance=args.tolerance, policy_version=int(meta.get("training_step", 0)))
    print(f"vision bundle -> {out}")
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from tinker_deploy.runtime import OnnxPolicy

    perception = OnnxPolicy.from_bundle(args.bundle, part="perception", threads=args.threads)
    hand = perception.hand()
    res = bench_perception(perception, args.n, hand)
    print(json.dumps({"bundle": str(args.bundle), "threads": args.threads, "hand": hand is not None, **res}))
    return 0


def bench_perception(perception: Any, n: int, hand: Any = None) -> dict[str, float]:
    """Time ``n`` single inferences of the perception part on its recorded observations, and of the ``hand`` model
    on the same frame where there is one (the loop runs both each frame); ms percentiles."""
    import os
    import time

    import numpy as np

    obs, _ = perception.bundle.recorded()
    k = len(obs["state"])
    def once(o: dict) -> None:
        perception(o)
        if hand is not None:
            hand(o)

    for i in range(20):
        once({key: v[i % k] for key, v in obs.items()})
    ms = []
    for i in range(n):
        o = {key: v[i % k] for key, v in obs.items()}
        t = time.perf_counter_ns()
        once(o)
        ms.append((time.perf_counter_ns() - t) / 1e6)
    return {"n": n, "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "max_ms": float(np.max(ms)), "loadavg_1m": os.getloadavg()[0], "cpus": os.cpu_count()}
