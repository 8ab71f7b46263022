"""``tinker vision``: the camera in the loop for ArmReach and ArmSort: data, train, export and benchmark the
locator."""

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

the sorter (ArmSort, two objects: a red cube and a blue cylinder): the locator finds each kind's object (one
heatmap per view for each, triangulated) and tinker_core.nn.located_objects.LocatedObjects writes every object
term of the shipped sorter's observation from it: position, relative to the hand, kind, to its bin, and sorted
(the camera sees it in its bin, not held). An object not held rests on the table or a bin's floor, at a height
the robot knows, so its image points give x and y at that height; its estimate is held while it rests
(tinker_core.loop.resting_hold.RestingHold), each frame's own while it is carried. The hand is found by a locator
of its own (--hand-only): the hold measures a moved camera on it and corrects every object's position through
the camera's model (tinker_core.loop.resting_geometry.RestingGeometry).
  tinker vision data --task sort --episodes 600 --seed 11 --out runs/vision/sort_11.npz   (and --seed 12)
  tinker vision train --data runs/vision/sort_11.npz runs/vision/sort_12.npz --no-hand --out runs/vision/sort_locator.pt
  tinker vision train --data runs/vision/sort_11.npz runs/vision/sort_12.npz --hand-only --out runs/vision/sort_hand.pt
  tinker vision export --locator runs/vision/sort_locator.pt --hand-locator runs/vision/sort_hand.pt
                       -o pretrained/arm_sort_vision --tolerance 5e-4   (one command)
  tinker eval pretrained/arm_sort_vision --episodes 100
"""


def register(sub: Any) -> None:
    p = sub.add_parser("vision", help="camera-based ArmReach and ArmSort: train, export and benchmark the locator",
                       description="Train a CNN that finds the reach target (or the sorter's objects) in the camera "
                                   "image (supervised in "
                                   "randomized simulation), put it in front of the shipped state policy as an ONNX "
                                   "bundle that `tinker eval` runs, and measure its latency.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    vs = p.add_subparsers(dest="vision_command", metavar="STEP", required=True)
    d = vs.add_parser("data", help="render labelled camera images of randomized ArmReach (or ArmSort) episodes")
    d.add_argument("--episodes", type=int, default=2500, help="episodes (2 images each, 6 with --task sort; "
                                                               "default 2500)")
    d.add_argument("--seed", type=int, default=1, help="seed (default 1; eval seeds are 1000+)")
    d.add_argument("--task", choices=("reach", "sort"), default="reach",
                   help="reach (default): the target marker, 2 frames an episode; sort: ArmSort's two objects (the "
                        "red cube, the blue cylinder), 6 frames an episode, driven by the shipped sorter")
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
    t.add_argument("--width", type=int, default=8, help="channels of the trunk (default 8)")
    t.add_argument("--no-hand", dest="hand", action="store_false",
                   help="find the target only; by default the locator also learns to find the end effector (the "
                        "data's 'hands'), which calibrates a moved camera in the loop")
    t.add_argument("--hand-only", action="store_true",
                   help="find the end effector only: the sorter's hand model, trained apart from its objects (a "
                        "hand heatmap beside them finds it to about 5 cm); export it with --hand-locator")
    t.add_argument("--out", default="runs/vision/locator.pt", help="weights + config (default runs/vision/locator.pt)")
    t.set_defaults(func=run_train)
    e = vs.add_parser("export", help="bundle = locator + the shipped state policy's actor (+ hand.onnx from a hand "
                                     "locator), ONNX, parity-checked")
    e.add_argument("--locator", default="runs/vision/locator.pt", help="trained locator (default runs/vision/locator.pt)")
    e.add_argument("--checkpoint", default=None,
                   help="state policy checkpoint (default: the shipped one of the locator's task, "
                        "pretrained/arm_reach/checkpoint or pretrained/arm_sort/checkpoint)")
    e.add_argument("--hand-locator", default=None,
                   help="a hand locator trained apart ('tinker vision train --hand-only'): the bundle's hand.onnx, "
                        "with which the loop measures a moved camera (the sorter's; a reach locator finds the hand "
                        "itself)")
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
        x, y, hands = generate(args.episodes, seed=args.seed, on_episode=lambda i: bar.update(1), task=args.task)
    finally:
        bar.close()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.out, images=x, targets=y, hands=hands, task=args.task)
    print(f"{len(x)} images {x.shape[1:]} -> {args.out}")
    return 0


def load_locator(path: str | Path) -> tuple[Any, str]:
    """A trained locator (`tinker vision train`'s .pt) and the task its data came from ("reach" or "sort"; a
    locator saved before the task was recorded is a reach one, as data made before sort had no task)."""
    import torch

    from tinker_core.nn.locator import LocatorConfig, TargetLocator

    blob = torch.load(path, map_location="cpu", weights_only=False)
    model = TargetLocator(LocatorConfig(**blob["config"]))
    model.load_state_dict(blob["state_dict"])
    return model.eval(), str(blob.get("task") or "reach")


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
    tasks = {str(d["task"]) if "task" in d else "reach" for d in sets}  # data made before sort had no task
    if len(tasks) > 1:
        raise ConfigError(f"--data: the datasets are of different tasks {sorted(tasks)}; train one locator per task")
    task = tasks.pop()
    if args.hand_only and not args.hand:
        raise ConfigError("--hand-only finds the hand and nothing else; --no-hand would leave nothing to find")
    if task == "sort" and args.hand and not args.hand_only:
        raise ConfigError("--data: sort data; a hand heatmap trained beside the sorter's objects finds the hand "
                          "only to about 5 cm (measured 2026-12-07), too coarse to calibrate a camera: train with "
                          "--no-hand, and the hand apart with --hand-only (about 1 cm)")
    x = torch.from_numpy(np.concatenate([d["images"] for d in sets]))
    y = torch.from_numpy(np.concatenate([d["targets"] for d in sets])).float()
    if args.hand_only:
        y = y[:, :0]  # no target: the hand (below) is the one thing found
    h, w = x.shape[1], x.shape[2]
    targets = y.shape[1] // 3
    convs = args.convs if args.convs is not None else (3 if triangulate else 1)
    if triangulate:
        keypoints, projections = targets + int(args.hand), _nominal_projections(h, w // h, task)
    else:
        keypoints = args.keypoints if args.keypoints is not None else (8 if args.hand else 4)
        projections = None
    ranges: dict[str, Any] = {}
    if args.hand_only:
        ranges = {"center": [], "half": [], "prior_rgb": None}
    elif task == "sort":  # the middle of the objects' range as seen (on the table, carried, in the bins); the
        # loss in metres alike in every direction (scaled by the range, which spans 0.8-1 m in y, a y error weighed
        # 9-31 times less than an x or z error, and the locator kept a 1.7 cm bias in y)
        lo, hi = (torch.from_numpy(f(y.numpy(), axis=0)) for f in (np.nanmin, np.nanmax))
        ranges = {"center": ((hi + lo) / 2).tolist(), "half": [0.1] * y.shape[1], "prior_rgb": _kind_contrasts()}
    if args.hand:
        no_hands = [p for p, d in zip(args.data, sets) if "hands" not in d]
        if no_hands:
            raise ConfigError(f"--data {no_hands[0]}: no end-effector labels ('hands'; data made before they were "
                              f"recorded): make it again with 'tinker vision data', or train with --no-hand")
        hands = torch.from_numpy(np.concatenate([d["hands"] for d in sets])).float()
        lo, hi = hands.min(0).values, hands.max(0).values
        # the hands seen, 10% margin; a sort hand in metres alike in every direction, as the sorter's objects
        hand_half = [0.1] * 3 if task == "sort" else ((hi - lo) / 2 * 1.1).tolist()
        target = LocatorConfig(**ranges) if targets else None  # the targets' range (a default one where not given)
        ranges.update(center=(target.center if target else []) + ((hi + lo) / 2).tolist(),
                      half=(target.half if target else []) + hand_half)
        y = torch.cat([y, hands], dim=1)
    cfg = LocatorConfig(image_size=h, views=w // h, keypoints=keypoints, targets=targets, hand=args.hand,
                        convs=convs, width=args.width, projections=projections, **ranges)
    model = TargetLocator(cfg)
    n_val = max(1, len(x) // 10)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(args.seed))
    val, tr = perm[:n_val], perm[n_val:]
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    steps = args.epochs * ((len(tr) + args.batch - 1) // args.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=steps, pct_start=0.1)
    yn = (y - model.out_center) / model.out_half
    known = torch.isfinite(yn).float()
    t0 = time.time()
    bar = tqdm(total=steps, desc="train", unit="batch")
    log = []
    for epoch in range(args.epochs):
        model.train()
        order = tr[torch.randperm(len(tr))]
        for i in range(0, len(order), args.batch):
            idx = order[i:i + args.batch]
            seen = known[idx]  # an object that fell off the table has no label (NaN): no loss
            loss = ((model.normalized(x[idx]) - yn[idx].nan_to_num()) ** 2 * seen).sum() / seen.sum().clamp(min=1)
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
    torch.save({"config": dataclasses.asdict(cfg), "state_dict": model.state_dict(), "log": log, "task": task,
                "data": [str(p) for p in args.data], "n_train": len(tr), "n_val": n_val, "wall_s": time.time() - t0}, args.out)
    print(json.dumps({"out": args.out, "wall_s": round(time.time() - t0, 1), **log[-1]}))
    return 0


def _kind_contrasts() -> list[list[float]]:
    """The colour contrast of each ArmSort object kind (its colour less its grey, the largest weight 1): the sort
    locator's heatmaps start as detectors of the red, then the blue object."""
    import numpy as np

    from tinker_sim.tasks.sort import KIND_COLORS

    out = []
    for rgba in KIND_COLORS:
        c = np.asarray(rgba[:3]) - np.mean(rgba[:3])
        out.append((c / np.abs(c).max()).round(3).tolist())
    return out


def _nominal_projections(image_size: int, views: int, task: str = "reach") -> list:
    """The simulated camera's nominal projections from the robot's base frame (the labels' frame)."""
    from tinker_sim.arm_env import ArmEnv

    env = ArmEnv(task, camera=True, image_size=image_size, camera_views=views)
    try:
        return env.camera.projections(env.robot.base_position)
    finally:
        env.close()


def _val_error_m(model: Any, x: Any, y: Any) -> dict[str, Any]:
    """Distance from each estimate to its label, m: ``target``, and ``hand`` for a hand locator."""
    import numpy as np
    import torch

    model.eval()
    with torch.no_grad():
        est = torch.cat([model(x[i:i + 256]) for i in range(0, len(x), 256)])
    n, k = model.config.target_size, model.config.targets
    names = ["target"] if k == 1 else [f"obj{i}" for i in range(k)]
    err = {name: torch.linalg.norm(est[:, i * n // k:(i + 1) * n // k] - y[:, i * n // k:(i + 1) * n // k],
                                   dim=1).numpy() for i, name in enumerate(names)}
    err = {name: e[np.isfinite(e)] for name, e in err.items()}  # objects off the table have no label
    if model.config.hand:
        err["hand"] = torch.linalg.norm(est[:, n:] - y[:, n:], dim=1).numpy()
    return err


def run_export(args: argparse.Namespace) -> int:
    import numpy as np
    from torch import nn

    import tinker_sim  # noqa: F401  (registers the tinker/ ids)
    from tinker_cli._compose import make_env
    from tinker_cli._vision_data import TASKS
    from tinker_core.algos import load_algorithm
    from tinker_core.errors import ConfigError
    from tinker_core.loop.observation import ObservationAssembly
    from tinker_core.nn.locator import HandLocator, LocatedState
    from tinker_core.spec import spec_from_space
    from tinker_deploy.export import export_bundle

    locator, task = load_locator(args.locator)
    if task not in TASKS:
        raise ConfigError(f"--locator {args.locator}: trained on {task!r} data; a vision bundle is made for one of "
                          f"{sorted(TASKS)}")
    hand_locator = _hand_locator(args.hand_locator, locator, task) if args.hand_locator else None
    if args.checkpoint is None:
        args.checkpoint = f"pretrained/arm_{task}/checkpoint"
    algo = load_algorithm(args.checkpoint, device="cpu")
    parts, meta = algo.deployable_parts(), dict(algo.export_metadata())
    c = locator.config
    env_id = str(meta.get("env_id") or "")
    if env_id != TASKS[task]:
        raise ConfigError(f"--locator {args.locator} finds {c.targets} thing(s) of {TASKS[task]} and "
                          f"{args.checkpoint} is a state policy of {env_id or 'an unrecorded env'}: give a checkpoint "
                          f"of {TASKS[task]}, or train the locator on that policy's task ('tinker vision data --task ...')")
    sort = task == "sort"
    env = make_env(env_id, camera=True, image_size=c.image_size, camera_views=c.views, safety=False,
                   action_chain=meta.get("action_chain_config"))
    u = env.unwrapped
    if sort:
        from tinker_core.nn.located_objects import LocatedObjects
        from tinker_sim.tasks.sort import BIN_CENTERS, BIN_INNER_HALF, REST_Z, RIM_Z

        perception = LocatedObjects(locator, u.obs_terms, BIN_CENTERS.tolist(), rest_z=REST_Z,
                                    bin_inner_half=BIN_INNER_HALF, rim_z=RIM_Z)
        if c.projections is not None:  # what a measured camera offset corrects through (RestingGeometry)
            meta["located_geometry"] = {"projections": c.projections, "rest_z": REST_Z,
                                        "bin_inner_half": BIN_INNER_HALF}
        image_terms = [t["name"] for t in u.obs_terms if t["name"].startswith("obj")]
        actor = nn.Sequential(parts["perception"], parts["actor"])  # the state's normalization, then the actor
    else:
        start = {n: s.start for n, s in ObservationAssembly(u.obs_terms).slots.items()}
        term = {t["name"]: t for t in u.obs_terms}
        perception = LocatedState(locator, start["target_pos"], start["target_minus_ee"], start["ee_pos"],
                                  term["target_pos"]["offset"], term["target_pos"]["scale"],
                                  term["target_minus_ee"]["scale"])
        image_terms = ["target_pos", "target_minus_ee"]
        if type(parts["perception"]).__name__ != "Flatten":
            raise ConfigError(f"{args.checkpoint}: expected a state policy with a Flatten perception (it feeds the "
                              f"actor the observation as is), got {type(parts['perception']).__name__}")
        actor = parts["actor"]
    recorded = {"image": [], "state": []}
    obs, _ = env.reset(seed=0)
    for k in range(32):
        if k % 8 == 0:
            obs, _ = env.reset(seed=k)
        recorded["image"].append(obs["image"])
        recorded["state"].append(obs["state"])
        obs, *_ = env.step(env.action_space.sample())
    recorded = {k: np.stack(v) for k, v in recorded.items()}
    meta.update(obs_spec=spec_from_space(env.observation_space), image_terms=image_terms,
                image_terms_static=not sort,
                env={"id": env_id, "kwargs": {"camera": True, "image_size": c.image_size, "camera_views": c.views},
                     "env_import": [], "wrappers": []})
    if sort:
        meta["feature_spec"] = spec_from_space(env.observation_space["state"]).to_dict()
    env.close()
    models = {"perception": perception, "actor": actor}
    if c.hand or hand_locator is not None:
        models["hand"] = HandLocator(hand_locator or locator)
    out = export_bundle(models, meta, args.out, recorded_obs=recorded,
                        tolerance=args.tolerance, policy_version=int(meta.get("training_step", 0)))
    print(f"vision bundle -> {out}")
    return 0


def _hand_locator(path: str, locator: Any, task: str) -> Any:
    """The locator at ``path``, checked to find the hand through the same camera as ``locator`` (of ``task``)."""
    from tinker_core.errors import ConfigError

    hand, hand_task = load_locator(path)
    h, c = hand.config, locator.config
    if c.hand:
        raise ConfigError(f"--hand-locator {path}: --locator finds the hand itself; give one or the other")
    if task == "sort" and c.projections is None:
        raise ConfigError(f"--hand-locator {path}: the sorter's hold corrects a moved camera through the camera's "
                          f"model, and --locator has a learned map (--head mlp); train it with --head triangulate")
    if not h.hand:
        raise ConfigError(f"--hand-locator {path}: it does not find the hand (trained with --no-hand); train one "
                          f"with 'tinker vision train --hand-only'")
    if hand_task != task or (h.image_size, h.views, h.projections) != (c.image_size, c.views, c.projections):
        raise ConfigError(f"--hand-locator {path}: trained on {hand_task} images of {h.views} view(s) of "
                          f"{h.image_size} px; the locator on {task} images of {c.views} of {c.image_size} px"
                          + ("" if h.projections == c.projections else ", through another camera model"))
    return hand


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
