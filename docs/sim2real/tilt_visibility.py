"""How often a turned camera can see the reach target at all: per episode, whether the target projects inside each
of the two views (|x|, |y| < 0.95 in the image) through the episode's true camera. A target outside a view cannot
be triangulated from it, whatever the calibration.

    python docs/sim2real/tilt_visibility.py [--dynamics sim/config/dynamics/far_tilted_camera.yaml] [--seed 1000]
        [--episodes 100]

Only resets the env (no policy runs): the camera's tilt and the target are drawn at reset.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np

import tinker_sim  # noqa: F401  (registers the tinker/ ids)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dynamics", default="sim/config/dynamics/far_tilted_camera.yaml")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--episodes", type=int, default=100)
    args = ap.parse_args()
    env = gym.make("tinker/ArmReach-v0", camera=True, image_size=64, camera_views=2, dynamics=args.dynamics)
    u = env.unwrapped
    both = either = 0
    for seed in range(args.seed, args.seed + args.episodes):
        env.reset(seed=seed)
        proj = np.asarray(u.camera.projection).reshape(4, 4).T
        to_base = np.eye(4)
        to_base[:3, 3] = u.robot.base_position
        inside = []
        for view in u.camera.views_mats:
            x = (proj @ np.asarray(view).reshape(4, 4).T @ to_base)[[0, 1, 3]] @ np.append(u.task.target, 1.0)
            inside.append(bool(x[2] > 0 and np.all(np.abs(x[:2] / x[2]) < 0.95)))
        both += all(inside)
        either += any(inside)
    env.close()
    print(f"{args.dynamics}, seeds {args.seed}-{args.seed + args.episodes - 1}: the target inside both views in "
          f"{both}/{args.episodes} episodes, inside at least one in {either}/{args.episodes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
