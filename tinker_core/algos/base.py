"""`Algorithm`: the base every learner shares: acting, the learn loop, logging, diagnostics and hot
intervention. What it learns from is resolved in `env_source`, its checkpoints are written by `checkpointing`,
its deployable parts and bundle metadata come from `export_meta`, Adam helpers live in `optim`.

Layers (as in Stable-Baselines3): `Algorithm` here; `OffPolicyAlgorithm` / `OnPolicyAlgorithm` add
collection (replay buffer, rollouts); `SAC`, `DQN`, `PPO` add only their networks and update.

An algorithm is itself the pipeline's learner module (``forward(transition)`` consumes one
transition and trains when due) and ``algo.policy`` is the matching actor module, so
``Pipeline().connect(env, None, algo.policy, algo)`` trains it, and swapping DQN for PPO changes the
line that builds ``algo``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

import numpy as np
import torch
from torch import nn

from tinker_core.algos.normalize import DictObsNormalizer, ObsNormalizer, obs_normalizer
from tinker_core.algos.sb3_compat import hybridmethod
from tinker_core.algos.vec_env import EpisodeInfo, VecEnv
from tinker_core.diagnostics import Diagnostics
from tinker_core.envs import EnvConfig
from tinker_core.errors import CheckpointError, ConfigError, SpecError
from tinker_core.spec import AnySpec, Spec
from tinker_core.torch_module import TorchModule
from tinker_core.algos.checkpointing import read_checkpoint, restore_algorithm, save_algorithm
from tinker_core.algos.env_source import resolve_env
from tinker_core.algos.export_meta import deployable_parts, export_metadata
from tinker_core.training.control import Control
from tinker_core.training.logger import TrainingLogger
from tinker_core.transition import TransitionSpec

log = logging.getLogger("tinker.train")

Callback = Callable[["Algorithm", dict], Any]


@dataclass
class AlgoConfig:
    """Settings every algorithm shares."""

    seed: int = 0
    """Seeds network init, exploration noise, minibatch sampling and env resets."""
    device: str = "auto"
    """'auto' (CUDA when available, else CPU), 'cpu' or 'cuda[:N]'."""
    n_envs: int = 1
    """Environment copies stepped in lockstep."""
    gamma: float = 0.99
    """Discount factor."""
    learning_rate: float = 3e-4
    """Adam learning rate (changeable while running: control.set(lr=...))."""
    net_arch: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the actor and critic MLPs (after the perception module)."""
    activation: str = "relu"
    """Nonlinearity of the MLPs: relu, tanh, elu or silu."""
    perception: str = "auto"
    """Perception module from tinker_core.nn ('auto' picks by obs spec: flatten, nature_cnn, multiscale for float
    maps, dict; SAC and DQN flatten a dict of vectors, which keeps their fast paths)."""
    normalize_obs: bool = False
    """Normalize observations with running mean/std (per float field of a dict; folded into the exported perception)."""
    log_interval: int = 2000
    """Env steps between two log points (TensorBoard, diagnostics, progress bar)."""
    watch_edges: bool = True
    """Check and measure the training loop's two edges in ``learn`` (`tinker_core.training.flow`: every batch of
    observations and actions, a NaN stops training at its step; ``algo.flow``, TensorBoard ``time/*_p50_us``).
    False: the vector env as it is (benchmarks/bus.py measures the difference)."""
    torch_threads: int = 1
    """torch.set_num_threads at construction (0: leave torch's default). 1 by default: with networks
    this small, a second thread waits at every barrier, and on a busy machine that costs 10x."""
    schedules: dict[str, str] = field(default_factory=dict)
    """Field -> schedule, e.g. {learning_rate: lin_7.3e-4}: linear from the start value to 0 over the
    run (RL Zoo's ``lin_``). Writing ``learning_rate: lin_7.3e-4`` directly fills this in."""

    def __post_init__(self) -> None:
        from tinker_core.algos.schedules import split_schedules

        split_schedules(self)
        if self.n_envs < 1:
            raise ConfigError(f"n_envs: expected >= 1, got {self.n_envs}")
        if not 0.0 <= self.gamma <= 1.0:
            raise ConfigError(f"gamma: expected 0 <= gamma <= 1, got {self.gamma}")
        if self.learning_rate <= 0:
            raise ConfigError(f"learning_rate: expected > 0, got {self.learning_rate}")
        if self.log_interval < 1:
            raise ConfigError(f"log_interval: expected >= 1, got {self.log_interval}")
        self.net_arch = [int(h) for h in self.net_arch]


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(name)
    except RuntimeError as e:
        raise ConfigError(f"device: expected 'auto', 'cpu' or 'cuda[:N]', got {name!r}") from e


def _is_discrete(spec: Spec) -> bool:
    return spec.shape == () and np.dtype(spec.dtype).kind in "iu"


class PolicyModule(TorchModule):
    """The actor as a pipeline module: observation (unbatched numpy) -> env action.

    Explores (samples) unless ``deterministic`` is set; holds the same networks the learner trains.
    """

    input_name = "obs"
    output_name = "action"

    def __init__(self, algo: "Algorithm", deterministic: bool = False):
        super().__init__()
        object.__setattr__(self, "_algo", algo)  # not a submodule: the learner owns the networks
        self.net = algo._actor_net()
        self.deterministic = deterministic
        self.input_spec = algo.obs_spec
        self.output_spec = algo.action_spec

    def forward(self, obs: Any) -> np.ndarray:
        return self._algo.predict(obs, deterministic=self.deterministic)


class Algorithm(TorchModule):
    """Base of every learner. Subclasses implement the hooks marked 'subclass'."""

    algo_name: ClassVar[str] = ""
    config_class: ClassVar[type] = AlgoConfig
    supports_discrete: ClassVar[bool] = True
    supports_continuous: ClassVar[bool] = True
    input_name = "transition"
    output_name = "metrics"

    def __init__(self, env_or_specs: Any, config: AlgoConfig | None = None, *, env_kwargs: Mapping | None = None,
                 tensorboard_log: str | Path | None = None, verbose: int | None = None,
                 policy_kwargs: Mapping | str | None = None, **hyperparameters: Any):
        """``env_or_specs``: an env id, an `EnvConfig` (id, kwargs, imports, wrappers), a gymnasium env,
        an env factory, a VecEnv or specs. Hyperparameters go in ``config`` or, as in SB3, as keywords
        (``SAC(env, learning_rate=1e-3)``; ``policy_kwargs`` as in SB3 or RL Zoo). ``tensorboard_log``
        is the default ``out_dir`` of ``learn``; ``verbose=0`` turns the progress bar off by default."""
        from tinker_core.algos.sb3_compat import merge_sb3_arguments

        config = merge_sb3_arguments(type(self), env_or_specs, config, hyperparameters, policy_kwargs)
        TorchModule.__init__(self, config)
        self.name = self.algo_name
        c = config
        if c.torch_threads:
            torch.set_num_threads(c.torch_threads)
        self.device = resolve_device(c.device)
        self.env_kwargs = dict(env_kwargs or {})
        self.env_config: EnvConfig | None = None
        """how to make this algorithm's env again (recorded in checkpoints and bundles); None when unknown"""
        self.tensorboard_log = None if tensorboard_log is None else Path(tensorboard_log)
        self.verbose = verbose
        self.vec_env, self.env_id, obs_spec, action_spec = self._resolve_env(env_or_specs)
        self.discrete = _is_discrete(action_spec)
        if self.discrete and not self.supports_discrete:
            raise SpecError(f"{type(self).__name__}: needs a continuous (Box) action space, got {action_spec!r}")
        if not self.discrete and not self.supports_continuous:
            raise SpecError(f"{type(self).__name__}: needs a discrete action space, got {action_spec!r}")
        if not self.discrete and (action_spec.low is None or action_spec.high is None
                                  or not np.isfinite(action_spec.low).all() or not np.isfinite(action_spec.high).all()):
            raise SpecError(f"{type(self).__name__}: continuous actions need finite bounds, got {action_spec!r}")
        self.obs_spec: AnySpec = obs_spec
        self.action_spec: Spec = action_spec
        self.input_spec = TransitionSpec(obs_spec, action_spec)  # type: ignore[assignment]
        self.output_spec = None
        self.num_timesteps = 0
        self.num_updates = 0
        self.num_episodes = 0
        self.np_rng = np.random.default_rng(c.seed)
        self.gen = torch.Generator().manual_seed(c.seed)
        self.diagnostics = Diagnostics()
        self.control = Control()
        self.episode_history: list[tuple[int, float]] = []  # (env step, return) of the last 5000 episodes
        self.success_history: list[bool] = []
        self.last_good_checkpoint: Path | None = None
        self._last_obs: Any = None
        self._learn_start = 0
        self._learn_target = 0
        self._metrics: dict[str, Any] = {}
        self._logger: TrainingLogger | None = None
        if c.normalize_obs:
            self.obs_norm: ObsNormalizer | DictObsNormalizer | None = obs_normalizer(obs_spec)
        else:
            self.obs_norm = None
        if self.discrete:
            self.n_actions = int(action_spec.high - action_spec.low + 1)  # type: ignore[operator]
            self.action_offset = int(action_spec.low)  # type: ignore[arg-type]
        else:
            self.act_low = torch.as_tensor(action_spec.low, dtype=torch.float32)
            self.act_high = torch.as_tensor(action_spec.high, dtype=torch.float32)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(c.seed)
            self._build_networks()
        self.to(self.device)
        if not self.discrete:
            self.act_low, self.act_high = self.act_low.to(self.device), self.act_high.to(self.device)
        self._build_optimizers()
        self.control.bind(self._settable())
        object.__setattr__(self, "policy", PolicyModule(self))

    # -- subclass hooks -----------------------------------------------------------------------------
    def _build_networks(self) -> None:
        raise NotImplementedError

    def _build_optimizers(self) -> None:
        raise NotImplementedError

    def _optimizers(self) -> dict[str, torch.optim.Optimizer]:
        raise NotImplementedError

    def _lr_optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The optimizers ``learning_rate`` (and its schedule) sets: all of them unless an algorithm keeps some
        at their own rate."""
        return self._optimizers()

    def _act(self, obs: Any, deterministic: bool) -> np.ndarray:
        """Batched normalized obs tensor(s) -> batch of env actions (numpy)."""
        raise NotImplementedError

    def _iteration(self) -> None:
        """Collect some experience from ``self.vec_env`` and train when due."""
        raise NotImplementedError

    def _actor_net(self) -> nn.Module:
        """The modules the deterministic actor uses (registered in ``policy`` for save/load)."""
        raise NotImplementedError

    def _deploy_modules(self) -> tuple[nn.Module, nn.Module]:
        """(perception without normalization, actor head features -> env action)."""
        raise NotImplementedError

    def _diagnose(self, m: dict[str, float]) -> None:
        """Algorithm-specific diagnostics at a log point."""

    def _extra_state(self) -> tuple[dict, dict[str, np.ndarray]]:
        return {}, {}

    def _load_extra_state(self, meta: dict, tensors: Mapping[str, np.ndarray]) -> None:
        pass

    def _settable(self) -> dict[str, Callable[[float], None]]:
        return {"lr": self.set_learning_rate}

    # -- envs ---------------------------------------------------------------------------------------
    def _resolve_env(self, src: Any) -> tuple[VecEnv | None, str | None, AnySpec, Spec]:
        r = resolve_env(src, self.config.n_envs, self.env_kwargs)
        self.env_config = r.env_config
        if r.env_kwargs is not None:
            self.env_kwargs = r.env_kwargs
        return r.vec_env, r.env_id, r.obs_spec, r.action_spec

    # -- acting -------------------------------------------------------------------------------------
    def _obs_to_tensor(self, obs: Any, update_norm: bool = False) -> Any:
        if isinstance(obs, Mapping):
            if self.obs_norm is not None:
                if update_norm:
                    self.obs_norm.update(obs)
                obs = self.obs_norm.normalize_np(obs)
            return {k: torch.as_tensor(np.asarray(v)).to(self.device) for k, v in obs.items()}
        obs = np.asarray(obs)
        if self.obs_norm is not None:
            if update_norm:
                self.obs_norm.rms.update(obs)
            obs = self.obs_norm.normalize_np(obs)
        t = torch.as_tensor(obs)
        if t.dtype == torch.float64:
            t = t.float()
        return t.to(self.device)

    def _is_batched(self, obs: Any) -> bool:
        if isinstance(obs, Mapping):
            k = next(iter(obs))
            return np.asarray(obs[k]).ndim == len(self.obs_spec[k].shape) + 1  # type: ignore[index]
        return np.asarray(obs).ndim == len(self.obs_spec.shape) + 1  # type: ignore[union-attr]

    def predict(self, obs: Any, deterministic: bool = True) -> np.ndarray:
        """Env action for one observation (or a batch): the deterministic policy unless told otherwise."""
        batched = self._is_batched(obs)
        if not batched:
            obs = {k: np.asarray(v)[None] for k, v in obs.items()} if isinstance(obs, Mapping) else np.asarray(obs)[None]
        a = self._act_raw(obs, deterministic)
        return a if batched else a[0, ...]

    def _act_raw(self, obs: Any, deterministic: bool) -> np.ndarray:
        """Env actions for a batch of raw env observations (normalized here when configured)."""
        with torch.no_grad():
            return self._act(self._obs_to_tensor(obs), deterministic)

    def _scale_action(self, a: torch.Tensor) -> torch.Tensor:
        """[-1, 1] -> env units."""
        return self.act_low + (a + 1.0) * 0.5 * (self.act_high - self.act_low)

    def _env_action(self, a: torch.Tensor) -> np.ndarray:
        if self.discrete:
            return (a + self.action_offset).cpu().numpy().astype(self.action_spec.dtype)
        return a.cpu().numpy().astype(self.action_spec.dtype)

    # -- settings -----------------------------------------------------------------------------------
    def set_learning_rate(self, lr: float) -> None:
        self.config.learning_rate = float(lr)
        for opt in self._lr_optimizers().values():
            if opt is not None:
                for g in opt.param_groups:
                    g["lr"] = float(lr) if not isinstance(g["lr"], torch.Tensor) else g["lr"].fill_(lr)

    # -- the learn loop -----------------------------------------------------------------------------
    def learn(self, total_timesteps: int, callback: Callback | list[Callback] | None = None,
              progress: bool | None = None, *, out_dir: str | Path | None = None, checkpoint_every: int = 0,
              resume: bool = False, tensorboard: bool = True, progress_bar: bool | None = None,
              **sb3_kwargs: Any) -> "Algorithm":
        """Train for ``total_timesteps`` env steps (with ``resume=True``: up to that many in total,
        continuing a loaded checkpoint's schedule). ``callback(algo, info)`` runs after each iteration
        with ``info = {"episodes": [EpisodeInfo], "metrics": dict}``; returning False stops.
        ``out_dir`` (default: the ``tensorboard_log`` given at construction) gets TensorBoard logs,
        metrics.jsonl, checkpoints and learning_curve.png. A list of callbacks runs in order (see
        `tinker_core.training.callbacks` for evaluation and checkpoint callbacks). ``progress_bar`` is
        SB3's name for ``progress`` (default: on, unless built with ``verbose=0``)."""
        from tinker_core.algos.schedules import apply_schedules
        from tinker_core.algos.sb3_compat import learn_arguments

        learn_arguments(self, sb3_kwargs)
        if progress is None:
            progress = progress_bar if progress_bar is not None else self.verbose != 0
        if out_dir is None:
            out_dir = self.tensorboard_log
        if isinstance(callback, (list, tuple)):
            from tinker_core.training.callbacks import CallbackList

            callback = CallbackList(list(callback))
        if self.vec_env is None:
            raise ConfigError(f"{type(self).__name__}.learn: built from specs only; give it an env to learn from "
                              "(or feed transitions through forward / train_on_batch)")
        if total_timesteps < 1:
            raise ConfigError(f"total_timesteps: expected >= 1, got {total_timesteps}")
        if resume:
            if total_timesteps <= self.num_timesteps:
                raise ConfigError(f"resume: total_timesteps={total_timesteps} is not beyond the checkpoint's "
                                  f"{self.num_timesteps} steps")
            self._learn_target = int(total_timesteps)
        else:
            self._learn_start, self._learn_target = self.num_timesteps, self.num_timesteps + int(total_timesteps)
        if self._learn_target <= self.num_timesteps:
            raise ConfigError(f"total_timesteps: expected >= 1 env step, got {total_timesteps!r}")
        self._watch_env()
        if self._last_obs is None:
            self._last_obs = self.vec_env.reset(seed=self.config.seed)
        out = None if out_dir is None else Path(out_dir)
        logger = TrainingLogger(out, self._learn_target, start=self.num_timesteps, progress=progress,
                                tensorboard=tensorboard, title=f"{self.algo_name} {self.env_id or ''}".strip())
        logger.curve = list(self.episode_history)
        self._logger = logger
        if callback is not None and hasattr(callback, "on_training_start"):
            callback.on_training_start(self)
        interval = self.config.log_interval
        next_log = (self.num_timesteps // interval + 1) * interval
        next_ckpt = (self.num_timesteps // checkpoint_every + 1) * checkpoint_every if checkpoint_every else None
        try:
            while self.num_timesteps < self._learn_target:
                self.control.apply_pending(save=self.save_checked)
                apply_schedules(self)
                self._iteration()
                eps = self.vec_env.pop_finished()
                if eps:
                    self._record_episodes(eps)
                if self.num_timesteps >= next_log:
                    next_log += interval * max(1, (self.num_timesteps - next_log) // interval + 1)
                    self._log_point()
                if next_ckpt is not None and self.num_timesteps >= next_ckpt and out is not None:
                    next_ckpt += checkpoint_every
                    self.save_checked(out / "checkpoints" / f"step_{self.num_timesteps}")
                if callback is not None and callback(self, {"episodes": eps, "metrics": self._metrics}) is False:
                    break
            self._log_point()
            if out is not None:
                self.save_checked(out / "final")
        finally:
            logger.close(self.num_timesteps)
            self._logger = None
        return self

    def _watch_env(self) -> None:
        """Put the training loop's edges (`tinker_core.training.flow.TRAINING`) under check and measure, once."""
        from tinker_core.training.flow import WatchedVecEnv

        if self.config.watch_edges and not isinstance(self.vec_env, WatchedVecEnv):
            self.vec_env = WatchedVecEnv(self.vec_env, self.obs_spec, self.action_spec)

    @property
    def flow(self) -> dict[str, dict[str, float]]:
        """The training loop's edges as measured so far (`FlowMonitor.snapshot`; empty before ``learn``)."""
        monitor = getattr(self.vec_env, "monitor", None)
        return monitor.snapshot() if monitor is not None else {}

    def _record_episodes(self, eps: list[EpisodeInfo]) -> None:
        self.num_episodes += len(eps)
        rets = [e.ret for e in eps]
        self.episode_history += [(self.num_timesteps, r) for r in rets]
        del self.episode_history[:-5000]
        self.success_history += [bool(e.success) for e in eps if e.success is not None]
        del self.success_history[:-5000]
        if self._logger is not None:
            self._logger.episodes(self.num_timesteps, rets, [e.success for e in eps])

    def _log_point(self) -> None:
        m = {k: float(v) for k, v in self._metrics.items() if isinstance(v, (torch.Tensor, float, int))
             and (not isinstance(v, torch.Tensor) or v.numel() == 1)}
        self.diagnostics.metrics(m)
        if m:
            self._diagnose(m)
        if self._logger is not None:
            lg = self._logger
            extra = {"time/fps": lg.fps(self.num_timesteps), "time/updates": self.num_updates}
            ret = lg.mean_return()
            if ret is not None:
                extra["rollout/ep_return_mean"] = ret
            sr = lg.success_rate()
            if sr is not None:
                extra["rollout/success_rate"] = sr
            flow = self.flow
            for edge, name in (("algorithm->env", "env_step"), ("env->algorithm", "algorithm")):
                f = flow.get(edge)
                if f and f["latency_samples"]:
                    extra[f"time/{name}_p50_us"] = f["latency_p50_us"]
            lg.scalars(self.num_timesteps, {**{f"train/{k}": v for k, v in m.items()}, **extra})
            lg.progress(self.num_timesteps)

    # -- checkpoints --------------------------------------------------------------------------------
    def _weights_finite(self) -> bool:
        return all(bool(torch.isfinite(p).all()) for p in self.parameters())

    def save_checked(self, path: str | Path) -> Path:
        """``save`` after checking every weight is finite; diverged weights never overwrite a checkpoint."""
        if not self._weights_finite():
            self.diagnostics.finite("network weights", float("nan"))
        p = self.save(path)
        self.last_good_checkpoint = p
        return p

    @staticmethod
    def _load_into(self: "Algorithm", path: str | Path) -> "Algorithm":
        """``algo.load(path)``: restore a checkpoint of the same algorithm and env into this one."""
        meta, files = read_checkpoint(path)
        if meta.get("algo") != self.algo_name:
            raise CheckpointError(f"{path}: a {meta.get('algo')!r} checkpoint cannot be loaded into "
                                  f"{type(self).__name__}; use tinker_core.algos.load_algorithm(path)")
        self._restore(meta, files, Path(path))
        return self

    @staticmethod
    def _load_new(cls: type, path: str | Path, env: Any = None, device: str | None = None,
                  **sb3_kwargs: Any) -> "Algorithm":
        """``SAC.load(path)``: the checkpoint rebuilt (with its recorded env, wrappers included)."""
        from tinker_core.algos import load_algorithm
        from tinker_core.algos.sb3_compat import load_arguments

        load_arguments(cls, sb3_kwargs)
        algo = load_algorithm(path, env=env, device=device)
        if not isinstance(algo, cls):
            raise CheckpointError(f"{path}: holds a {type(algo).__name__} checkpoint, not {cls.__name__}; "
                                  f"load it with {type(algo).__name__}.load(path) or load_algorithm(path)")
        return algo

    load = hybridmethod(_load_new, _load_into)  # type: ignore[assignment]
    """``SAC.load(path, env=None, device=None)`` builds the saved algorithm (as SB3's); ``algo.load(path)``
    restores a checkpoint into an existing one."""

    def save(self, path: str | Path, include_replay: bool = True) -> Path:  # type: ignore[override]
        """Write a checkpoint directory (see `tinker_core.training.checkpoint` and `algos.checkpointing`)."""
        return save_algorithm(self, path, include_replay)

    def _replay_tensors(self) -> dict[str, np.ndarray]:
        return {}

    def _load_replay(self, tensors: Mapping[str, np.ndarray]) -> None:
        pass

    def _restore(self, meta: dict, files: dict[str, dict[str, np.ndarray]], path: Path) -> None:
        restore_algorithm(self, meta, files, path)

    # -- deployment ---------------------------------------------------------------------------------
    def _feature_spec(self) -> Spec:
        perception, _ = self._deploy_modules()
        return Spec((int(getattr(perception, "features_dim")),), "float32")

    def _normalization(self) -> dict | None:
        if self.obs_norm is None:
            return None
        return self.obs_norm.stats()

    def deployable_parts(self) -> dict[str, nn.Module]:
        """``perception``: obs -> features with the observation normalization folded in as constants;
        ``actor``: features -> deterministic action in the env's range. CPU copies in eval mode,
        without data-dependent control flow (ONNX-exportable)."""
        return deployable_parts(self)

    def export_metadata(self) -> dict:
        """What a deployed bundle needs besides the graphs: specs, normalization, provenance, and what
        the env exposes about its observation/action layout (read from ``env.unwrapped``)."""
        return export_metadata(self)

    # -- misc ---------------------------------------------------------------------------------------
    def close(self) -> None:
        if self.vec_env is not None:
            self.vec_env.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self.env_id!r}, obs={self.obs_spec!r}, action={self.action_spec!r})"


__all__ = ["AlgoConfig", "Algorithm", "PolicyModule", "resolve_device"]
