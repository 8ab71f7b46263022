"""``tinker prior``: an RL starting point (SAC + demonstrations) from an imitation (BC) checkpoint."""

from __future__ import annotations

import argparse
from typing import Any

ORDER = 22

EPILOG = """\
what it writes (in --out):
  checkpoint/        SAC whose actor is the BC policy (the same actions, deterministic), its critics fitted to the
                     demonstrations with the actor held still; td3bc_alpha keeps the actor near the demonstrations
                     while it fine-tunes, and prior_anchor near its own starting actions on the live data
                     (tinker_core/algos/rl_prior.py, SACConfig)
  demonstrations/    the scripted expert's episodes on the randomized training robot, with the env's rewards (a
                     replay the learner loads as its simulation data: LearnerConfig.demonstrations)
  summary.json       what was done, the expert's success, and the check that the SAC acts as the BC policy

examples:
  tinker prior pretrained/arm_sort/checkpoint --out pretrained/arm_sort/rl_prior
  tinker demo --env tinker/ArmSort-v0              (fine-tunes the sorter from that prior through ROS 2)
"""


def register(sub: Any) -> None:
    p = sub.add_parser("prior", help="RL starting point from an imitation policy: SAC + expert demonstrations",
                       description="Build a SAC checkpoint whose actor is a BC policy, record the scripted expert's "
                                   "demonstrations, and fit the critics to them: what RLPD-style online fine-tuning "
                                   "(demonstrations and live data sampled together) starts from.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", help="a BC checkpoint (tinker train --config configs/bc_*.yaml)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--demo-episodes", type=int, default=100, help="expert episodes to record (default 100)")
    p.add_argument("--critic-steps", type=int, default=2000,
                   help="critic updates on the demonstrations, actor held still (default 2000)")
    p.add_argument("--td3bc-alpha", type=float, default=0.005,
                   help="weight of the RL term against imitation while fine-tuning (default 0.005: "
                        "docs/sim2real/sort_finetune.md)")
    p.add_argument("--action-std", type=float, default=0.05, help="initial exploration noise, [-1, 1] units")
    p.add_argument("--ent-coef", default="0.0005", help="SAC's entropy coefficient (default 0.0005, fixed)")
    p.add_argument("--expert", default=None, help="module:Class (default: the env's scripted expert)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json
    import time
    from pathlib import Path

    import numpy as np
    from tqdm import tqdm

    import tinker_sim  # noqa: F401  registers tinker/ ids
    from tinker_cli._compose import expert_factory, make_env
    from tinker_core.algos import BC, SAC, SACConfig, load_algorithm
    from tinker_core.algos.rl_prior import collect_demonstrations, sac_from_imitation, warm_critic
    from tinker_core.errors import ConfigError

    for name, least in (("demo_episodes", 1), ("critic_steps", 0)):
        if getattr(args, name) < least:
            raise ConfigError(f"--{name.replace('_', '-')}: expected >= {least}, got {getattr(args, name)}")
    t0 = time.monotonic()
    bc = load_algorithm(args.checkpoint, device="cpu")
    if not isinstance(bc, BC):
        raise ConfigError(f"{args.checkpoint}: a {type(bc).__name__} checkpoint; tinker prior starts from a BC one")
    c = bc.config
    sac = SAC(bc.env_id, SACConfig(net_arch=list(c.net_arch), activation=c.activation, perception=c.perception,
                                   normalize_obs=c.normalize_obs, ent_coef=args.ent_coef, td3bc_alpha=args.td3bc_alpha,
                                   buffer_size=1, learning_starts=0, seed=args.seed, device="cpu"),
              env_kwargs=bc.env_kwargs)
    sac_from_imitation(bc, sac, args.action_std)
    env = make_env(bc.env_id, **(bc.env_kwargs or {}))
    expert = expert_factory(args.expert, bc.env_id)(env.unwrapped)
    bar = tqdm(total=args.demo_episodes, desc="demonstrations", unit="ep")
    wins: list[bool] = []

    def on_episode(ep: int, row: dict) -> None:
        wins.append(row["success"])
        bar.update(1)
        bar.set_postfix(success=f"{np.mean(wins):.2f}", transitions=row["transitions"])

    try:
        demos = collect_demonstrations(env, expert, args.demo_episodes, seed=args.seed + 50_000, progress=on_episode)
    finally:
        bar.close()
        env.close()
    print(f"fitting the critics to {len(demos)} demonstration transitions ({args.critic_steps} updates) ...")
    last = warm_critic(sac, demos, args.critic_steps)
    probe = demos.sample(512, with_info=False).obs
    same = float(np.abs(sac.predict(probe) - bc.predict(probe)).max())
    if same > 1e-4:
        raise ConfigError(f"the SAC does not act as the BC policy (max difference {same:.2g}); nothing written")
    out = Path(args.out)
    sac.save(out / "checkpoint", include_replay=False)  # each written whole or not at all (checkpoint, replay index)
    demos.save(out / "demonstrations")
    summary = {"from": str(args.checkpoint), "env": bc.env_id, "env_kwargs": bc.env_kwargs,
               "demo_episodes": args.demo_episodes, "demo_transitions": len(demos),
               "expert_success_rate": float(np.mean(wins)), "critic_steps": args.critic_steps,
               "critic_loss": last.get("critic_loss"), "q_mean": last.get("q_mean"),
               "td3bc_alpha": args.td3bc_alpha, "action_std": args.action_std, "ent_coef": args.ent_coef,
               "max_action_difference_vs_bc": same, "seed": args.seed, "wall_s": round(time.monotonic() - t0, 1)}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"wrote {out / 'checkpoint'}, {out / 'demonstrations'} ({len(demos)} transitions, expert success "
          f"{np.mean(wins):.0%}), {out / 'summary.json'}")
    return 0
