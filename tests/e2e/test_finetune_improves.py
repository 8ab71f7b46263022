"""Fine-tuning improves success, at a CI-sized budget (issue #21).

The shipped state policy (``pretrained/arm_reach/checkpoint``, SAC) on ArmReach with the demo's robot
(``sim/config/dynamics/shifted_miscalibrated.yaml``: a heavier, laggier arm and a 7.5 cm hand-eye
calibration error the policy is told through its target term) succeeds rarely. Fine-tuned in process
with the env's own reward (SafetyWrapper as the env's command filter, as ``tinker eval`` runs it) and the
demo's fine-tuning learning rate, its success on fixed evaluation seeds must rise by at least a bound
chosen from the spread measured over training seeds (docs/sim2real/finetune_test.md).

No ROS: the test checks the learning, not the transport (tests/e2e/test_demo.py runs the stages).
``python tests/e2e/test_finetune_improves.py --steps 1000 2000 --seeds 0 1 2 3 4`` re-measures the spread.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT = REPO / "pretrained" / "arm_reach" / "checkpoint"
BUNDLE = REPO / "pretrained" / "arm_reach" / "bundle"
DYNAMICS = REPO / "sim" / "config" / "dynamics" / "shifted_miscalibrated.yaml"
ENV_ID = "tinker/ArmReach-v0"
EVAL_SEED = 1000
"""first evaluation episode seed (as ``tinker eval``); training episodes are seeded from the training seed"""


@dataclass
class FineTune:
    """One fine-tuning run's settings (the demo's learner: lr 3e-4, replay ratio 4, warmup 256)."""

    steps: int = 2000
    """env steps of fine-tuning on the shifted robot"""
    seed: int = 0
    """training seed (replay sampling, exploration noise, training episodes)"""
    learning_rate: float = 3e-4
    """the demo's ``finetune_lr``"""
    gradient_steps: int = 4
    """updates per env step (the demo's ``updates_per_interval``)"""
    warmup: int = 256
    """new transitions before the first update (the demo's learner ``warmup``)"""
    keep_pretrain: int = 0
    """transitions of the checkpoint's own (simulation) replay kept beside the new ones (0: only new data)"""
    eval_episodes: int = 30
    """deterministic evaluation episodes before and after"""
    eval_seed: int = EVAL_SEED
    """first evaluation episode seed"""


def make_env():
    """The shifted robot as ``tinker eval`` composes it: the bundle's action chain, the SafetyWrapper last."""
    from tinker_cli._compose import make_env as compose_env

    manifest = json.loads((BUNDLE / "manifest.json").read_text())
    return compose_env(ENV_ID, dynamics=str(DYNAMICS), action_chain=manifest["action_chain"], safety=True)


def evaluate_on_shifted(algo, episodes: int, seed: int = EVAL_SEED):
    """The deterministic policy on seeds ``seed``.. (`tinker_core.evaluate.evaluate`, as ``tinker eval``)."""
    from tinker_core.evaluate import evaluate

    env = make_env()
    try:
        return evaluate(env, lambda o: algo.predict(o, deterministic=True), episodes, seed=seed)
    finally:
        env.close()


def load(cfg: FineTune):
    """The pretrained SAC on the shifted robot, ready to fine-tune with ``cfg``."""
    import torch

    from tinker_core.algos import SAC
    from tinker_core.algos.buffers import ReplayBuffer

    algo = SAC.load(CHECKPOINT, env=make_env(), device="cpu")
    algo.set_learning_rate(cfg.learning_rate)
    algo.config.seed = cfg.seed  # learn() resets its env with it
    algo.gen.manual_seed(cfg.seed)
    algo.np_rng = np.random.default_rng(cfg.seed)
    old = algo.replay
    n = len(old)
    keep = min(cfg.keep_pretrain, n)
    algo.replay = ReplayBuffer(old.capacity, algo.obs_spec, tuple(algo.action_spec.shape), False, algo.device)
    if keep:
        s = old.get(torch.arange(n - keep, n))
        algo.replay.add(*(np.asarray(x) for x in (s.obs, s.actions, s.rewards, s.next_obs, s.dones)))
    trig = algo._trigger
    trig.gradient_steps = cfg.gradient_steps
    trig.learning_starts = algo.num_timesteps + cfg.warmup  # the policy acts from the first step; updates wait
    return algo


def run(cfg: FineTune, before: float | None = None) -> dict:
    """Success before (unless given: it does not depend on the training seed) and after fine-tuning with ``cfg``."""
    algo = load(cfg)
    updates0 = algo.num_updates
    if before is None:
        before = evaluate_on_shifted(algo, cfg.eval_episodes, cfg.eval_seed).success_rate
    t0 = time.perf_counter()
    if cfg.steps:
        algo.learn(cfg.steps, progress=False, tensorboard=False)
    t_train = time.perf_counter() - t0
    after = evaluate_on_shifted(algo, cfg.eval_episodes, cfg.eval_seed)
    return {"steps": cfg.steps, "seed": cfg.seed, "lr": cfg.learning_rate, "keep_pretrain": cfg.keep_pretrain,
            "eval_seed": cfg.eval_seed, "eval_episodes": cfg.eval_episodes, "before": before,
            "after": after.success_rate, "gain": after.success_rate - before,
            "after_estops": after.safety_estops, "after_unsafe_states": after.safety_violations,
            "updates": algo.num_updates - updates0, "train_s": round(t_train, 1),
            "total_s": round(time.perf_counter() - t0, 1)}


CI_STEPS = 2000
"""env steps of the test's fine-tuning (about 15 s of training on the 2-core machine; 6,976 updates)"""
MAX_BEFORE = 0.30
"""the shipped policy must start low enough that a gain of MIN_GAIN is possible (measured: 4/30 = 0.133)"""
MIN_GAIN = 0.50
"""least success gain on 30 episodes: the smallest gain measured over 15 training seeds at CI_STEPS (0.80,
docs/sim2real/finetune_test.md) less a margin of 0.30 for other machines' float paths. At half the budget
(1000 steps) 4 of 5 seeds still gained >= 0.53; with learning rate 0 or no steps the gain is 0."""


def check_improved(r: dict) -> None:
    """The test's assertions on one run's result (separate, so a run that must fail can be checked with them)."""
    assert r["before"] <= MAX_BEFORE, f"the shipped policy already succeeds {r['before']:.0%} on the shifted robot: {r}"
    assert r["gain"] >= MIN_GAIN, f"fine-tuning raised success by {r['gain']:+.0%}, expected >= {MIN_GAIN:+.0%}: {r}"


@pytest.mark.timeout(300)
def test_finetuning_raises_success_on_the_miscalibrated_robot():
    r = run(FineTune(steps=CI_STEPS, seed=0))
    print(json.dumps(r))
    check_improved(r)
    assert r["after_estops"] == 0 and r["after_unsafe_states"] == 0, r


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, nargs="+", default=[1000, 2000])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--keep-pretrain", type=int, default=0)
    p.add_argument("--eval-episodes", type=int, default=30)
    p.add_argument("--eval-seed", type=int, default=EVAL_SEED)
    a = p.parse_args(argv)
    before = None
    for steps in a.steps:
        for seed in a.seeds:
            r = run(FineTune(steps=steps, seed=seed, learning_rate=a.lr, keep_pretrain=a.keep_pretrain,
                             eval_episodes=a.eval_episodes, eval_seed=a.eval_seed), before)
            before = r["before"]
            print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
