"""Simulation benchmark: env steps/s with and without camera, 1 vs 2 subprocess workers, and the raw
``stepSimulation`` rate of the same world in the same run (goal: env overhead <= 2x the physics cost,
without camera).

    python benchmarks/sim.py [--quick]

Repetitions alternate raw physics and env stepping so both see the same machine load; figures are
medians with min/max. Writes benchmarks/results/sim.json (``--quick``: sim.quick.json).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

# benchmarks/ is sys.path[0] when run as `python benchmarks/NAME.py`
from _common import ROOT, arg_parser, header, machine, write_result

sys.path.insert(0, str(ROOT))

import pybullet as p  # noqa: E402

import tinker_sim as sim  # noqa: E402
from tinker_sim.vector import make_vec  # noqa: E402


def env_steps_per_s(env, steps: int, seed: int = 0) -> tuple[float, float]:
    """(env steps/s, share of that time spent inside stepSimulation) with random actions, resets included."""
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (steps,) + env.action_space.shape).astype(np.float32)
    world = env.unwrapped.world
    c, substeps = world.client, world.substeps
    in_physics = [0.0]

    def timed_step() -> None:  # the same loop as PyBulletWorld.step, timed
        t0 = time.perf_counter()
        for _ in range(substeps):
            p.stepSimulation(physicsClientId=c)
        in_physics[0] += time.perf_counter() - t0

    world.step = timed_step
    try:
        env.reset(seed=seed)
        t = time.perf_counter()
        for k in range(steps):
            _, _, term, trunc, _ = env.step(actions[k])
            if term or trunc:
                env.reset()
        total = time.perf_counter() - t
    finally:
        del world.step
    return steps / total, in_physics[0] / total


def physics_control_periods_per_s(env, periods: int) -> float:
    """Raw ``stepSimulation`` in the env's own world (arm under motor control), per control period."""
    u = env.unwrapped
    u.reset(seed=1)
    u.step(np.full(u.action_space.shape, 0.5, dtype=np.float32))  # motors hold a target, as during stepping
    c, n = u.world.client, periods * u.world.substeps
    t = time.perf_counter()
    for _ in range(n):
        p.stepSimulation(physicsClientId=c)
    return periods / (time.perf_counter() - t)


def vec_steps_per_s(num_envs: int, steps: int) -> float:
    vec = make_vec("tinker/ArmReach-v0", num_envs, asynchronous=True)
    try:
        vec.reset(seed=0)
        actions = np.random.default_rng(0).uniform(-1, 1, (steps, num_envs, 7)).astype(np.float32)
        for k in range(min(20, steps)):  # warm up the workers
            vec.step(actions[k])
        t = time.perf_counter()
        for k in range(steps):
            vec.step(actions[k])
        return steps * num_envs / (time.perf_counter() - t)
    finally:
        vec.close()


def summary(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def main() -> int:
    parser = arg_parser(__doc__.splitlines()[0])
    args = parser.parse_args()
    reps = 3 if args.quick else 7
    steps = 600 if args.quick else 2000
    cam_steps = 150 if args.quick else 500
    vec_steps = 300 if args.quick else 1500

    reach = sim.make("tinker/ArmReach-v0")
    reach_cam = sim.make("tinker/ArmReach-v0", camera=True, image_size=64)
    reach_cam84 = sim.make("tinker/ArmReach-v0", camera=True, image_size=84)
    sort = sim.make("tinker/ArmSort-v0")
    raw, env_rate, env_phys, cam_rate, cam84_rate, sort_rate, sort_phys = [], [], [], [], [], [], []
    for r in range(reps):  # alternate baseline and env so both see the same load
        raw.append(physics_control_periods_per_s(reach, steps))
        rate, share = env_steps_per_s(reach, steps, seed=r)
        env_rate.append(rate)
        env_phys.append(share)
        cam_rate.append(env_steps_per_s(reach_cam, cam_steps, seed=r)[0])
        cam84_rate.append(env_steps_per_s(reach_cam84, cam_steps, seed=r)[0])
        rate, share = env_steps_per_s(sort, steps // 2, seed=r)
        sort_rate.append(rate)
        sort_phys.append(share)
    for e in (reach, reach_cam, reach_cam84, sort):
        e.close()

    vec1, vec2 = [], []
    for _ in range(max(2, reps // 2)):
        vec1.append(vec_steps_per_s(1, vec_steps))
        vec2.append(vec_steps_per_s(2, vec_steps))

    raw_m, raw_lo, raw_hi = summary(raw)
    env_m, env_lo, env_hi = summary(env_rate)
    env_us = 1e6 / env_m
    # overhead / physics inside the same steps: (1 - share) / share, per repetition, then the median
    overhead_ratios = [(1 - s) / s for s in env_phys]
    sort_overhead = [(1 - s) / s for s in sort_phys]
    physics_us = env_us * statistics.median(env_phys)
    overhead_us = env_us - physics_us
    v1, v2 = statistics.median(vec1), statistics.median(vec2)
    figures = {
        "physics_control_periods_per_s": round(raw_m, 1),
        "physics_control_periods_per_s_min": round(raw_lo, 1),
        "physics_control_periods_per_s_max": round(raw_hi, 1),
        "stepsimulation_per_s": round(raw_m * reach.unwrapped.world.substeps, 1),
        "reach_physics_us_per_step": round(physics_us, 1),
        "reach_env_steps_per_s": round(env_m, 1),
        "reach_env_steps_per_s_min": round(env_lo, 1),
        "reach_env_steps_per_s_max": round(env_hi, 1),
        "reach_env_us_per_step": round(env_us, 1),
        "reach_env_overhead_us_per_step": round(overhead_us, 1),
        "reach_env_overhead_vs_physics_ratio": round(statistics.median(overhead_ratios), 3),
        "reach_env_overhead_vs_physics_ratio_min": round(min(overhead_ratios), 3),
        "reach_env_overhead_vs_physics_ratio_max": round(max(overhead_ratios), 3),
        "reach_camera64_steps_per_s": round(statistics.median(cam_rate), 1),
        "reach_camera84_steps_per_s": round(statistics.median(cam84_rate), 1),
        "camera64_slowdown_ratio": round(env_m / statistics.median(cam_rate), 2),
        "sort_env_steps_per_s": round(statistics.median(sort_rate), 1),
        "sort_env_overhead_vs_physics_ratio": round(statistics.median(sort_overhead), 3),
        "vec_1_worker_steps_per_s": round(v1, 1),
        "vec_2_workers_steps_per_s": round(v2, 1),
        "vec_scaling_2_vs_1_ratio": round(v2 / v1, 3),
        "control_period_s": reach.unwrapped.control_period,
        "physics_substeps_per_control_period": reach.unwrapped.world.substeps,
    }
    goals = {"reach_env_overhead_vs_physics_ratio": "<= 2.0", "vec_scaling_2_vs_1_ratio": ">= 1.5"}
    met = {
        "reach_env_overhead_vs_physics_ratio": figures["reach_env_overhead_vs_physics_ratio"] <= 2.0,
        "vec_scaling_2_vs_1_ratio": figures["vec_scaling_2_vs_1_ratio"] >= 1.5,
    }
    result = {
        **header("sim", args.quick, machine(load_key="load_avg_1min_at_start")),
        "figures": figures,
        "goals": goals,
        "goals_met": met,
        "notes": "physics_control_periods_per_s: raw stepSimulation x substeps in the env's own world, arm holding a "
                 "target (alternated with the env runs). Overhead ratio: time of env.step (gymnasium.make wrappers, "
                 "random actions, resets included) outside stepSimulation divided by the time inside it, in the same "
                 "steps (a moving arm costs more physics than a still one). The machine is shared (2 cores, other "
                 "jobs running), which caps the 2-worker scaling.",
    }
    write_result("sim", args.quick, result)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
