"""The third-party task suite of benchmarks/algos.py: the task table (RL Zoo entries as written), the
SB3/sbx model builder both runners share, evaluation, steps-to-threshold, and the FLOP counts behind the
achieved-GFLOP/s figures.

Imported by ``benchmarks/algos.py`` (project venv: tinker and SB3) and by ``benchmarks/_sbx_runner.py``
(the separate venv of ``benchmarks/competitors_venv.sh``: sbx on JAX), so it imports neither tinker nor
a learning library at module level.
"""

from __future__ import annotations

import ast
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class Task:
    """One benchmark task: an env, an algorithm and its RL Zoo entry, the threshold and budgets."""

    name: str
    env: str
    algo: str
    """ppo, sac or dqn"""
    entry: Mapping[str, Any]
    """the RL Zoo entry (rl-baselines3-zoo hyperparams/<algo>.yml) as written there; ``n_timesteps`` is the budget"""
    threshold: float
    threshold_source: str
    quick_steps: int
    env_import: str | None = None
    """module to import before gymnasium.make (panda_gym registers the Panda tasks)"""
    source: str = "RL Zoo entry"
    """where ``entry`` comes from: 'RL Zoo entry' when verbatim, else what was changed and why"""
    goal: bool = False
    """Dict observation with (observation, achieved_goal, desired_goal): report the success rate too"""

    @property
    def steps(self) -> int:
        return int(float(self.entry["n_timesteps"]))

    @property
    def gym_id(self) -> str:
        return f"{self.env_import}:{self.env}" if self.env_import else self.env


# RL Zoo entries, rl-baselines3-zoo hyperparams/{ppo,sac,dqn}.yml (checked at commit 22e3ff2 of April 2026).
# Thresholds: gymnasium's registered reward_threshold where the env has one (RL Zoo's "solved" mark),
# else the one named in threshold_source.
TASKS: dict[str, Task] = {t.name: t for t in (
    Task("ppo_pendulum", "Pendulum-v1", "ppo",
         dict(n_envs=4, n_timesteps=1e5, policy="MlpPolicy", n_steps=1024, gae_lambda=0.95, gamma=0.9, n_epochs=10,
              ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, use_sde=True, sde_sample_freq=4),
         -200.0, "RL Zoo's usual mark for Pendulum (gymnasium registers none)", 8192),
    Task("sac_pendulum", "Pendulum-v1", "sac",
         dict(n_timesteps=20000, policy="MlpPolicy", learning_rate=1e-3),
         -200.0, "RL Zoo's usual mark for Pendulum (gymnasium registers none)", 600),
    Task("ppo_mountaincar", "MountainCarContinuous-v0", "ppo",
         dict(normalize=True, n_envs=1, policy="MlpPolicy", n_timesteps=20000, batch_size=256, n_steps=8,
              gamma=0.9999, learning_rate=7.77e-05, ent_coef=0.00429, clip_range=0.1, n_epochs=10, gae_lambda=0.9,
              max_grad_norm=5, vf_coef=0.19, use_sde=True, policy_kwargs="dict(log_std_init=-3.29, ortho_init=False)"),
         90.0, "gymnasium reward_threshold", 800),
    Task("sac_mountaincar", "MountainCarContinuous-v0", "sac",
         dict(n_timesteps=50000, policy="MlpPolicy", learning_rate=3e-4, buffer_size=50000, batch_size=512,
              ent_coef=0.1, train_freq=32, gradient_steps=32, gamma=0.9999, tau=0.01, learning_starts=0,
              use_sde=True, policy_kwargs="dict(log_std_init=-3.67, net_arch=[64, 64])"),
         90.0, "gymnasium reward_threshold", 640),
    Task("dqn_cartpole", "CartPole-v1", "dqn",
         dict(n_timesteps=5e4, policy="MlpPolicy", learning_rate=2.3e-3, batch_size=64, buffer_size=100000,
              learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
              exploration_fraction=0.16, exploration_final_eps=0.04, policy_kwargs="dict(net_arch=[256, 256])"),
         475.0, "gymnasium reward_threshold", 2000),
    Task("dqn_acrobot", "Acrobot-v1", "dqn",
         dict(n_timesteps=1e5, policy="MlpPolicy", learning_rate=6.3e-4, batch_size=128, buffer_size=50000,
              learning_starts=0, gamma=0.99, target_update_interval=250, train_freq=4, gradient_steps=-1,
              exploration_fraction=0.12, exploration_final_eps=0.1, policy_kwargs="dict(net_arch=[256, 256])"),
         -100.0, "gymnasium reward_threshold", 2000),
    Task("sac_her_pandareach", "PandaReach-v3", "sac",
         dict(n_timesteps=20000, policy="MultiInputPolicy", buffer_size=1000000, batch_size=256, gamma=0.95,
              learning_rate=1e-3, tau=0.05, learning_starts=1000, replay_buffer_class="HerReplayBuffer",
              replay_buffer_kwargs="dict(goal_selection_strategy='future', n_sampled_goal=4)",
              policy_kwargs="dict(net_arch=[256, 256])"),
         -10.0, "ours (RL Zoo has no SAC PandaReach entry): mean return -10 of 50 steps, about 90% success", 1200,
         env_import="panda_gym",
         source="RL Zoo's panda-gym HER defaults (tqc.yml: gamma 0.95, lr 1e-3, tau 0.05, HER future k=4) on SAC, "
                "with SB3's default 256x256 networks and batch 256 instead of 512x512x512 and 2048, and a 20k budget, "
                "to fit 2 cores",
         goal=True),
)}

# What each runner cannot apply, and so drops (recorded per task in the result).
NOT_APPLIED: dict[str, dict[str, str]] = {
    "tinker": {},
    "sbx": {"sac:use_sde": "sbx's SAC has no gSDE", "sac:policy_kwargs.log_std_init": "only meaningful with gSDE",
            "ppo:use_sde": "sbx's PPO has no gSDE", "ppo:sde_sample_freq": "sbx's PPO has no gSDE"},
    "sb3": {},
}


def not_applied(task: Task, lib: str) -> dict[str, str]:
    """The entry's settings ``lib`` does not apply on ``task``, with why."""
    out = {}
    for key, why in NOT_APPLIED[lib].items():
        algo, path = key.split(":", 1)
        if algo != task.algo:
            continue
        if "." in path:
            top, sub = path.split(".", 1)
            pk = task.entry.get(top)
            if pk and sub in parse_kwargs(pk):
                out[path] = why
        elif path in task.entry:
            out[path] = why
    return out


def parse_kwargs(text: str | Mapping[str, Any]) -> dict[str, Any]:
    """RL Zoo's ``"dict(a=1, b=[64, 64])"`` strings as a dict (literals only; nothing is evaluated)."""
    if isinstance(text, Mapping):
        return dict(text)
    node = ast.parse(text, mode="eval").body
    if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict" and not node.args):
        raise ValueError(f"expected dict(key=literal, ...), got {text!r}")
    return {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}


def entry_without(task: Task, lib: str) -> dict[str, Any]:
    """``task.entry`` less what ``lib`` does not apply (see :data:`NOT_APPLIED`)."""
    drop = not_applied(task, lib)
    entry = {k: v for k, v in task.entry.items() if k not in drop}
    if "use_sde" in drop:
        entry.pop("sde_sample_freq", None)
    subs = [p.split(".", 1)[1] for p in drop if p.startswith("policy_kwargs.")]
    if subs:
        pk = {k: v for k, v in parse_kwargs(entry["policy_kwargs"]).items() if k not in subs}
        entry["policy_kwargs"] = pk
    return entry


def make_env(task: Task, seed: int | None = None) -> Any:
    import gymnasium as gym

    if task.env_import:
        __import__(task.env_import)
    env = gym.make(task.env)
    return env


# -- SB3 and sbx ----------------------------------------------------------------------------------------
def build_sb3_like(task: Task, lib: str, seed: int) -> tuple[Any, Any]:
    """(model, vec_env) for ``lib`` 'sb3' or 'sbx' from the RL Zoo entry, as rl_zoo3's train.py builds it."""
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    if task.env_import:
        __import__(task.env_import)
    if lib == "sbx":
        import sbx as libmod
    else:
        import stable_baselines3 as libmod
    entry = entry_without(task, lib)
    kw = {k: v for k, v in entry.items() if k not in ("n_timesteps", "policy", "normalize", "n_envs")}
    env = make_vec_env(task.env, n_envs=int(entry.get("n_envs", 1)), seed=seed)
    if entry.get("normalize"):
        env = VecNormalize(env, gamma=float(entry.get("gamma", 0.99)))
    if "policy_kwargs" in kw:
        kw["policy_kwargs"] = parse_kwargs(kw["policy_kwargs"])
    if "replay_buffer_kwargs" in kw:
        kw["replay_buffer_kwargs"] = parse_kwargs(kw["replay_buffer_kwargs"])
    if kw.get("replay_buffer_class") == "HerReplayBuffer":
        from stable_baselines3 import HerReplayBuffer

        kw["replay_buffer_class"] = HerReplayBuffer
    if isinstance(kw.get("train_freq"), list):
        kw["train_freq"] = tuple(kw["train_freq"])
    cls = getattr(libmod, task.algo.upper())
    extra = {"device": "cpu"} if lib == "sb3" else {}
    model = cls(entry["policy"], env, seed=seed, verbose=0, **extra, **kw)
    return model, env


class UpdateClock:
    """Wraps a model's update method: counts calls and the gradient steps asked, and the seconds inside."""

    def __init__(self, obj: Any, method: str, steps_of: Callable[[tuple, dict], int]):
        self.seconds = 0.0
        self.calls = 0
        self.gradient_steps = 0
        inner = getattr(obj, method)

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                self.seconds += time.perf_counter() - t0
                self.calls += 1
                self.gradient_steps += steps_of(a, k)

        setattr(obj, method, timed)


def run_sb3_like(task: Task, lib: str, steps: int, seed: int) -> dict[str, Any]:
    """Train ``lib`` ('sb3' or 'sbx') on ``task`` for ``steps`` env steps; the figures of one seed."""
    from stable_baselines3.common.callbacks import BaseCallback

    model, env = build_sb3_like(task, lib, seed)
    curve: list[tuple[int, float]] = []

    class Curve(BaseCallback):
        def _on_step(self) -> bool:
            for info in self.locals.get("infos", []):
                if "episode" in info:
                    curve.append((self.num_timesteps, float(info["episode"]["r"])))
            return True

    off_policy = task.algo != "ppo"
    clock = UpdateClock(model, "train", (lambda a, k: int(k.get("gradient_steps", a[0] if a else 0))) if off_policy
                        else (lambda a, k: ppo_samples_per_update(task)))
    t0 = time.perf_counter()
    model.learn(steps, callback=Curve())
    wall = time.perf_counter() - t0
    norm = env if task.entry.get("normalize") else None
    if norm is not None:
        norm.training = False

    def predict(o: Any) -> Any:
        if norm is not None:
            o = norm.normalize_obs(o[None])[0]
        return model.predict(o, deterministic=True)[0]

    ev = evaluate(task, predict, 10, seed)
    return {"steps_per_s": model.num_timesteps / wall, "wall_s": wall, **ev, "curve": curve,
            "update_s": clock.seconds, "update_calls": clock.calls, "gradient_steps": clock.gradient_steps,
            "not_applied": not_applied(task, lib)}


# -- evaluation -----------------------------------------------------------------------------------------
def evaluate(task: Task, predict: Callable[[Any], Any], episodes: int, seed: int) -> dict[str, float]:
    """Mean return (and success rate on goal tasks) of ``episodes`` deterministic episodes."""
    env = make_env(task)
    rets, succ = [], []
    for ep in range(episodes):
        o, _ = env.reset(seed=10_000 + seed * 100 + ep)
        done, ret, info = False, 0.0, {}
        while not done:
            o, r, te, tr, info = env.step(predict(o))
            ret += float(r)
            done = te or tr
        rets.append(ret)
        succ.append(float(info.get("is_success", np.nan)))
    out = {"final_return": float(np.mean(rets))}
    if task.goal:
        out["success_rate"] = float(np.nanmean(succ))
    env.close()
    return out


def steps_to(curve: Sequence[tuple[int, float]], threshold: float, window: int = 10) -> int | None:
    """The env step at which the mean of the last ``window`` training episodes first reaches ``threshold``."""
    rets = [r for _, r in curve]
    for i in range(window - 1, len(rets)):
        if np.mean(rets[i - window + 1:i + 1]) >= threshold:
            return int(curve[i][0])
    return None


# -- FLOPs ----------------------------------------------------------------------------------------------
def mlp_flops(sizes: Sequence[int]) -> int:
    """Multiply-add FLOPs (2 per multiply-add, biases counted) of one sample's forward pass through an MLP
    with layer widths ``sizes`` (input, hidden..., output); activations are not counted."""
    return sum(2 * a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


DEFAULT_ARCH = {"ppo": [64, 64], "sac": [256, 256], "dqn": [64, 64]}
"""SB3's default hidden layers (tinker's are the same)"""


def dims(task: Task) -> tuple[int, int]:
    """(observation size, action size or number of discrete actions) of ``task``'s env (Dict obs flattened)."""
    env = make_env(task)
    obs, act = env.observation_space, env.action_space
    o = sum(int(np.prod(s.shape)) for s in obs.spaces.values()) if hasattr(obs, "spaces") else int(np.prod(obs.shape))
    a = int(act.n) if hasattr(act, "n") else int(np.prod(act.shape))
    env.close()
    return o, a


def update_flops(algo: str, obs: int, act: int, net_arch: Sequence[int], batch: int, n_critics: int = 2) -> int:
    """FLOPs of one gradient step on a minibatch of ``batch`` (a backward pass counted as 2 forwards):
    SAC: actor forward on next obs, target critics on it, critics forward+backward, actor forward+backward
    through the critics (forward+backward); PPO: actor and value nets forward+backward; DQN: the Q net
    forward+backward and the target net's forward. The same count for every library (the work the update
    asks for, not what an implementation spends); optimizer and elementwise work not counted."""
    h = list(net_arch)
    if algo == "sac":
        fa = mlp_flops([obs, *h, 2 * act])
        fc = mlp_flops([obs + act, *h, 1])
        per = (fa + n_critics * fc) + 3 * n_critics * fc + 3 * fa + 3 * n_critics * fc
    elif algo == "ppo":
        per = 3 * (mlp_flops([obs, *h, act]) + mlp_flops([obs, *h, 1]))
    elif algo == "dqn":
        per = 3 * mlp_flops([obs, *h, act]) + mlp_flops([obs, *h, act])
    else:
        raise ValueError(f"unknown algorithm {algo!r}")
    return per * batch


def task_update_flops(task: Task, obs: int, act: int) -> int:
    """:func:`update_flops` with ``task``'s networks and batch (SB3's defaults where the entry says nothing)."""
    pk = parse_kwargs(task.entry.get("policy_kwargs", "dict()"))
    arch = pk.get("net_arch", DEFAULT_ARCH[task.algo])
    default_batch = {"ppo": 64, "sac": 256, "dqn": 32}[task.algo]
    batch = int(task.entry.get("batch_size", default_batch))
    if task.algo == "ppo":
        rollout = int(task.entry.get("n_steps", 2048)) * int(task.entry.get("n_envs", 1))
        batch = min(batch, rollout)
    return update_flops(task.algo, obs, act, arch, batch, int(pk.get("n_critics", 2)))


def ppo_samples_per_update(task: Task) -> int:
    """Minibatch gradient steps of one PPO rollout update (n_epochs x rollout / batch)."""
    rollout = int(task.entry.get("n_steps", 2048)) * int(task.entry.get("n_envs", 1))
    batch = min(int(task.entry.get("batch_size", 64)), rollout)
    return int(task.entry.get("n_epochs", 10)) * -(-rollout // batch)


def matmul_peak_gflops(matmul: Callable[[Any, Any], Any], make: Callable[[int, int], Any],
                       sizes: Sequence[int] = (256, 512, 1024), repeats: int = 5,
                       sync: Callable[[Any], Any] = lambda x: x) -> dict[str, float]:
    """Measured float32 square matrix-product GFLOP/s per size (best of ``repeats``), and their max as ``peak``."""
    out: dict[str, float] = {}
    for n in sizes:
        a, b = make(n, n), make(n, n)
        sync(matmul(a, b))
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            sync(matmul(a, b))
            best = min(best, time.perf_counter() - t0)
        out[f"n{n}"] = 2 * n ** 3 / best / 1e9
    out["peak"] = max(out.values())
    return out


__all__ = ["Task", "TASKS", "NOT_APPLIED", "not_applied", "parse_kwargs", "entry_without", "make_env",
           "build_sb3_like", "run_sb3_like", "UpdateClock", "evaluate", "steps_to", "mlp_flops", "update_flops",
           "task_update_flops", "ppo_samples_per_update", "dims", "matmul_peak_gflops", "DEFAULT_ARCH"]
