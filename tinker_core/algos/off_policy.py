"""`OffPolicyAlgorithm`: replay-buffer collection shared by SAC and DQN; subclasses add ``_train_step``.

Three ways in, one update: ``learn`` (own env), ``forward(transition)`` (pipeline learner) and
``train_on_batch(batch)`` (the separate learner process with its own replay).

Dict observations of vectors (a goal-conditioned env's) go through `Flatten` perception by default
(``perception: auto``): the replay stores them flattened and the networks see one vector, so SAC's
compiled step and numpy acting apply as for a vector env. ``her`` turns on goal relabelling
(`tinker_core.algos.her`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import torch

from tinker_core.algos.base import AlgoConfig, Algorithm
from tinker_core.algos.optim import update_scope
from tinker_core.algos.buffers import ReplayBuffer, ReplaySamples
from tinker_core.algos.her import HerConfig, HerReplayBuffer, check_goal_spec
from tinker_core.algos.train_freq import TrainTrigger
from tinker_core.errors import ConfigError
from tinker_core.module import config_from_dict
from tinker_core.nn import flat_keys, flatten_np
from tinker_core.spec import DictSpec, Spec
from tinker_core.transition import Transition, TransitionBatch


@dataclass
class OffPolicyConfig(AlgoConfig):
    buffer_size: int = 1_000_000
    """Replay capacity in transitions."""
    learning_starts: int = 100
    """Env steps of uniformly random actions before the first update."""
    batch_size: int = 256
    """Minibatch size of each gradient step."""
    tau: float = 0.005
    """Polyak coefficient of the target-network update (1.0 = hard copy)."""
    train_freq: int = 1
    """Train every this many env steps (per env), or episodes with train_freq_unit episode; RL Zoo's
    [N, step] / [N, episode] is read too."""
    gradient_steps: int = 1
    """Gradient steps each time training is due (-1: as many as env steps collected since the last)."""
    train_freq_unit: str = "step"
    """What train_freq counts: step or episode."""
    her: HerConfig | None = None
    """Hindsight goal relabelling for goal-conditioned envs (a mapping such as ``{n_sampled_goal: 4,
    goal_selection_strategy: future}``, see `tinker_core.algos.her`); None: the plain replay."""

    def __post_init__(self) -> None:
        from tinker_core.algos.train_freq import parse_train_freq

        super().__post_init__()
        self.train_freq, self.train_freq_unit = parse_train_freq(self.train_freq, self.train_freq_unit)
        if self.gradient_steps != -1 and self.gradient_steps < 1:
            raise ConfigError(f"gradient_steps: expected >= 1 or -1 (as many as env steps collected), "
                              f"got {self.gradient_steps}")
        if isinstance(self.her, Mapping):
            self.her = config_from_dict(HerConfig, self.her, "her")
        elif self.her is not None and not isinstance(self.her, HerConfig):
            raise ConfigError(f"her: expected a mapping of HER settings or null, got {type(self.her).__name__}")
        for name in ("buffer_size", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: expected >= 1, got {getattr(self, name)}")
        if not 0.0 < self.tau <= 1.0:
            raise ConfigError(f"tau: expected 0 < tau <= 1, got {self.tau}")
        if self.learning_starts < 0:
            raise ConfigError(f"learning_starts: expected >= 0, got {self.learning_starts}")


class OffPolicyAlgorithm(Algorithm):
    config: OffPolicyConfig

    def __init__(self, env_or_specs: Any, config: OffPolicyConfig | None = None, **kw: Any):
        super().__init__(env_or_specs, config, **kw)
        c = self.config
        act_shape = () if self.discrete else self.action_spec.shape
        # dict observations through Flatten are stored flat: [(key, size)] in the dict's order, else None
        self._flat = flat_keys(self.obs_spec) if self._perception_kind() == "flatten" else None
        self.replay: ReplayBuffer | HerReplayBuffer
        if c.her is not None:
            check_goal_spec(self.obs_spec)
            if self.vec_env is None:
                raise ConfigError(f"{type(self).__name__}: her needs the env (its compute_reward); built from specs only")
            self.replay = HerReplayBuffer(c.buffer_size, c.n_envs, self.obs_spec, act_shape,  # type: ignore[arg-type]
                                          self.discrete, self.device, c.her, _compute_reward(self.vec_env.envs[0]),
                                          self._prepare_obs)
        else:
            stored = self.obs_spec if self._flat is None else Spec((sum(d for _, d in self._flat),), "float32")
            self.replay = ReplayBuffer(c.buffer_size, stored, act_shape, self.discrete, self.device)
        self._trigger = TrainTrigger(c.train_freq, c.train_freq_unit, c.gradient_steps, c.n_envs, c.learning_starts)

    def _perception_kind(self) -> str:
        """``config.perception``, with 'auto' or 'dict' on a dict of vectors resolved to 'flatten' (the fast
        path): 'dict' (SB3's MultiInputPolicy, which RL Zoo's goal-env entries name) concatenates the
        flattened fields in the spec's order, which is what 'flatten' computes, and neither has parameters."""
        kind = self.config.perception
        if kind in ("auto", "dict") and isinstance(self.obs_spec, DictSpec) and all(
                isinstance(s, Spec) and len(s.shape) < 3 for s in self.obs_spec.fields.values()):
            return "flatten"
        return kind

    def _prepare_obs(self, obs: Any) -> Any:
        """Raw env observations (batch) -> what the replay stores / the networks take: normalized
        (when configured), dicts flattened when the perception flattens them."""
        if self.obs_norm is not None:
            obs = self.obs_norm.normalize_np(obs)
        if self._flat is not None:
            return flatten_np(obs, self._flat)
        return obs

    # -- subclass -----------------------------------------------------------------------------------
    def _train_step(self, s: ReplaySamples, weights: torch.Tensor | None = None) -> torch.Tensor:
        """One gradient step; returns |TD error| per sample (for priorities)."""
        raise NotImplementedError

    def _sample(self) -> tuple[ReplaySamples, torch.Tensor | None, Any]:
        if isinstance(self.replay, HerReplayBuffer):
            return self.replay.sample(self.config.batch_size, self.np_rng), None, None
        return self.replay.sample(self.config.batch_size, self.gen), None, None

    def _after_train(self, idx: Any, td: torch.Tensor) -> None:
        pass

    def _explore_at_warmup(self) -> bool:
        """Act with the policy instead of uniform random actions before ``learning_starts``."""
        return False

    def _on_added(self, start: int, n: int) -> None:
        pass

    # -- shared -------------------------------------------------------------------------------------
    def _buffer_action(self, env_action: np.ndarray) -> np.ndarray:
        if self.discrete:
            return np.asarray(env_action, dtype=np.int64) - self.action_offset
        low, high = self.action_spec.low, self.action_spec.high
        return (2.0 * (np.asarray(env_action, dtype=np.float64) - low) / (high - low) - 1.0).astype(np.float32)

    def _random_actions(self, n: int) -> np.ndarray:
        if self.discrete:
            return (self.np_rng.integers(0, self.n_actions, size=n) + self.action_offset).astype(self.action_spec.dtype)
        low, high = self.action_spec.low, self.action_spec.high
        return self.np_rng.uniform(low, high, size=(n, *self.action_spec.shape)).astype(self.action_spec.dtype)

    def _train(self, gradient_steps: int) -> None:
        if isinstance(self.replay, HerReplayBuffer) and not self.replay.ready():
            return  # HER samples finished episodes only: training starts once the first one ends
        with update_scope():
            for _ in range(gradient_steps):
                s, w, idx = self._sample()
                self._last_batch_rewards = s.rewards
                td = self._train_step(s, w)
                self._after_train(idx, td)

    def _add(self, obs: Any, env_actions: np.ndarray, rewards: np.ndarray, next_obs: Any, terminated: np.ndarray,
             done: np.ndarray) -> None:
        """Store one step of every env; ``done`` (terminated or truncated) ends episodes (for HER)."""
        if isinstance(self.replay, HerReplayBuffer):  # raw: relabelled rewards need the env's values
            self.replay.add(obs, self._buffer_action(env_actions), rewards, next_obs, terminated, done)
            return
        obs, next_obs = self._prepare_obs(obs), self._prepare_obs(next_obs)
        start = self.replay.pos
        self.replay.add(obs, self._buffer_action(env_actions), rewards, next_obs, terminated)
        self._on_added(start, len(rewards))

    def _iteration(self) -> None:
        c, vec = self.config, self.vec_env
        obs = self._last_obs
        if self.num_timesteps < c.learning_starts and not self._explore_at_warmup():
            actions = self._random_actions(vec.n)  # type: ignore[union-attr]
        else:
            actions = self._act_raw(obs, deterministic=False)
        if self.obs_norm is not None:
            self.obs_norm.update(obs)
        next_obs, rew, term, trunc, final = vec.step(actions)  # type: ignore[union-attr]
        real_next = next_obs
        if any(f is not None for f in final):
            real_next = {k: v.copy() for k, v in next_obs.items()} if isinstance(next_obs, dict) else next_obs.copy()
            for i, f in enumerate(final):
                if f is not None:
                    if isinstance(real_next, dict):
                        for k in real_next:
                            real_next[k][i] = f[k]
                    else:
                        real_next[i] = f
        self._add(obs, actions, rew, real_next, term, term | trunc)
        self._last_obs = next_obs
        self.num_timesteps += vec.n  # type: ignore[union-attr]
        n_grad = self._trigger.due(self.num_timesteps, vec.n, term | trunc)  # type: ignore[union-attr]
        if n_grad:
            self._train(n_grad)

    # -- the pipeline learner -----------------------------------------------------------------------
    def forward(self, t: Transition) -> dict | None:
        """Store one transition; train when due. Returns metrics after an update, else None."""
        if t.next_obs is None:
            raise ConfigError(f"{type(self).__name__}.forward: the transition needs next_obs for bootstrapping")
        batch = lambda x: ({k: np.asarray(v)[None] for k, v in x.items()} if isinstance(x, Mapping)
                           else np.asarray(x)[None])
        if self.obs_norm is not None:
            self.obs_norm.update(batch(t.obs))
        self._add(batch(t.obs), np.asarray(t.action)[None], np.array([t.reward], dtype=np.float32),
                  batch(t.next_obs), np.array([t.terminated]), np.array([t.done]))
        self.num_timesteps += 1
        n_grad = self._trigger.due(self.num_timesteps, 1, [t.terminated or t.truncated])
        if n_grad:
            self._train(n_grad)
            return {k: float(v) for k, v in self._metrics.items() if isinstance(v, torch.Tensor) and v.numel() == 1}
        return None

    # -- the external learner -----------------------------------------------------------------------
    def train_on_batch(self, batch: TransitionBatch, weights: np.ndarray | None = None,
                       demo_mask: np.ndarray | None = None) -> dict:
        """One gradient step on a batch from an external replay (env-unit actions, raw obs); ``demo_mask`` marks
        the rows that are demonstrations (an algorithm that imitates them reads it, e.g. SAC's ``td3bc_alpha``).
        Returns float metrics plus ``"td_errors"`` (np.ndarray, |TD| per sample) for priority updates."""
        if batch.next_obs is None:
            raise ConfigError("train_on_batch: batch.next_obs is required")
        self.input_spec.check(batch, "train_on_batch.batch")  # type: ignore[union-attr]
        obs, nxt = self._prepare_obs(batch.obs), self._prepare_obs(batch.next_obs)

        def tens(x: Any) -> Any:
            if isinstance(x, Mapping):
                return {k: torch.as_tensor(np.asarray(v), device=self.device) for k, v in x.items()}
            t = torch.as_tensor(np.asarray(x), device=self.device)
            return t.float() if t.dtype == torch.float64 else t

        act = torch.as_tensor(self._buffer_action(batch.action), device=self.device)
        demo = None if demo_mask is None else torch.as_tensor(np.asarray(demo_mask, dtype=bool), device=self.device)
        s = ReplaySamples(tens(obs), act, tens(nxt),
                          torch.as_tensor(np.asarray(batch.reward, dtype=np.float32), device=self.device),
                          torch.as_tensor(np.asarray(batch.terminated, dtype=np.float32), device=self.device), demo)
        w = None if weights is None else torch.as_tensor(np.asarray(weights, dtype=np.float32), device=self.device)
        with update_scope():
            td = self._train_step(s, w)
        self._last_batch_rewards = np.asarray(batch.reward)
        out: dict[str, Any] = {k: float(v) for k, v in self._metrics.items()
                               if isinstance(v, torch.Tensor) and v.numel() == 1}
        out["td_errors"] = td.detach().cpu().numpy()
        out["num_updates"] = self.num_updates
        return out

    # -- checkpoint ---------------------------------------------------------------------------------
    def _replay_tensors(self) -> dict[str, np.ndarray]:
        return self.replay.tensors() if len(self.replay) else {}

    def _load_replay(self, tensors: Mapping[str, np.ndarray]) -> None:
        self.replay.load(tensors)

    def _diagnose(self, m: dict[str, float]) -> None:
        r = getattr(self, "_last_batch_rewards", None)
        if r is not None:
            self.diagnostics.rewards(r.detach().cpu().numpy() if isinstance(r, torch.Tensor) else r)
        g = {k[len("grad_norm/"):]: v for k, v in m.items() if k.startswith("grad_norm/")}
        if g:
            self.diagnostics.grad_norms(g)


def _compute_reward(env: Any) -> Any:
    """The env's vectorized ``compute_reward(achieved_goal, desired_goal, info)`` (through its wrappers)."""
    fn = None
    try:
        fn = env.get_wrapper_attr("compute_reward")
    except AttributeError:
        fn = getattr(getattr(env, "unwrapped", env), "compute_reward", None)
    if not callable(fn):
        raise ConfigError(f"her: the env {getattr(env.spec, 'id', type(env).__name__)!r} has no "
                          "compute_reward(achieved_goal, desired_goal, info) to relabel rewards with")
    return fn
