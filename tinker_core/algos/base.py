"""`Algorithm`: the base every learner shares: env handling, acting, the learn loop, logging,
diagnostics, hot intervention, checkpoints and the deployable parts.

Layers (as in Stable-Baselines3): `Algorithm` here; `OffPolicyAlgorithm` / `OnPolicyAlgorithm` add
collection (replay buffer, rollouts); `SAC`, `DQN`, `PPO` add only their networks and update.

An algorithm is itself the pipeline's learner module (``forward(transition)`` consumes one
transition and trains when due) and ``algo.policy`` is the matching actor module, so
``Pipeline().connect(env, None, algo.policy, algo)`` trains it, and swapping DQN for PPO changes the
line that builds ``algo``.
"""

from __future__ import annotations

import dataclasses
import logging
import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping

import numpy as np
import torch
from torch import nn

from tinker_core.algos.normalize import DictObsNormalizer, ObsNormalizer, obs_normalizer
from tinker_core.algos.sb3_compat import hybridmethod
from tinker_core.algos.vec_env import EpisodeInfo, VecEnv
from tinker_core.diagnostics import Diagnostics, DivergenceError
from tinker_core.envs import EnvConfig
from tinker_core.errors import CheckpointError, ConfigError, SpecError
from tinker_core.module import config_to_dict
from tinker_core.spec import AnySpec, DictSpec, Spec, spec_from_dict
from tinker_core.torch_module import TorchModule
from tinker_core.training.checkpoint import (
    env_snapshot, load_optimizer_state, optimizer_state, read_checkpoint, restore_env, write_checkpoint,
)
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
    """Perception module from tinker_core.nn ('auto' picks by obs spec: flatten, nature_cnn, dict; SAC and DQN
    flatten a dict of vectors, which keeps their fast paths)."""
    normalize_obs: bool = False
    """Normalize observations with running mean/std (per float field of a dict; folded into the exported perception)."""
    log_interval: int = 2000
    """Env steps between two log points (TensorBoard, diagnostics, progress bar)."""
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


def make_adam(params: Any, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """Adam with the fused kernel where the build has it (one kernel for all parameters)."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, eps=eps, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.Adam(params, lr=lr, eps=eps, foreach=True)


def fused_adam_args(opt: torch.optim.Optimizer) -> tuple[list, list, list, list, list, dict] | None:
    """(params, grads, exp_avgs, exp_avg_sqs, steps, hyperparameters) of a single-group fused Adam
    whose parameters all have gradients and state, or None for any other optimizer or state."""
    group = opt.param_groups[0]
    params = group["params"]
    if (type(opt) is not torch.optim.Adam or len(opt.param_groups) != 1 or not group.get("fused")
            or group["amsgrad"] or group["maximize"] or group.get("decoupled_weight_decay")
            or isinstance(group["lr"], torch.Tensor) or len({(p.device, p.dtype) for p in params}) != 1
            or any(p.grad is None or p not in opt.state for p in params)):
        return None
    states = [opt.state[p] for p in params]
    beta1, beta2 = group["betas"]
    return (params, [p.grad for p in params], [st["exp_avg"] for st in states], [st["exp_avg_sq"] for st in states],
            [st["step"] for st in states],
            dict(lr=group["lr"], beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"]))


def adam_step(opt: torch.optim.Optimizer) -> None:
    """``opt.step()`` for a single-group fused Adam whose parameters all have gradients and state,
    calling the fused kernel directly (what ``Adam.step`` calls, with the same state), without its
    per-call bookkeeping, which costs as much as the kernel for networks this small. Any other
    optimizer or state (the first step creates the state) goes through ``opt.step()``."""
    args = fused_adam_args(opt)
    if args is None:
        opt.step()
        return
    params, grads, exp_avgs, exp_avg_sqs, steps, h = args
    torch._foreach_add_(steps, 1)
    torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, maximize=False, **h)


def backward_in_caller_thread() -> Any:
    """Context in which autograd runs backward on the calling thread instead of handing it to its
    device worker thread: with networks this small the hand-off costs more than the backward (about
    half of it on a busy 2-core machine). Gradients are the same."""
    return torch.autograd.set_multithreading_enabled(False)


def _versions() -> dict[str, str]:
    import gymnasium

    from tinker_core import __version__ as tinker_version

    return {"tinker": str(tinker_version), "torch": torch.__version__, "numpy": np.__version__,
            "gymnasium": gymnasium.__version__, "python": platform.python_version()}


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
        self.episode_history: list[tuple[int, float]] = []
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
        import gymnasium as gym

        n = self.config.n_envs
        if isinstance(src, TransitionSpec):
            return None, None, src.obs, src.action  # type: ignore[return-value]
        if isinstance(src, tuple) and len(src) == 2 and all(isinstance(s, (Spec, DictSpec)) for s in src):
            return None, None, src[0], src[1]
        if isinstance(src, VecEnv):
            return src, src.env_id, src.obs_spec, src.action_spec  # type: ignore[return-value]
        if isinstance(src, (str, EnvConfig)):
            cfg = EnvConfig(src, self.env_kwargs) if isinstance(src, str) else src
            if isinstance(src, EnvConfig) and self.env_kwargs:
                cfg = EnvConfig(src.id, {**src.kwargs, **self.env_kwargs}, src.env_import, src.wrappers)
            self.env_config, self.env_kwargs = cfg, dict(cfg.kwargs)
            vec = VecEnv.make(cfg.make, n)
            return vec, cfg.id, vec.obs_spec, vec.action_spec  # type: ignore[return-value]
        if isinstance(src, gym.Env):
            self.env_config = EnvConfig.from_env(src)
            envs = [src]
            if n > 1:
                if self.env_config is None:
                    raise ConfigError(f"n_envs={n} needs an env id to make copies (this env has no gymnasium spec, "
                                      "or a wrapper that does not record its arguments); pass an EnvConfig instead")
                envs += [self.env_config.make() for _ in range(n - 1)]
            vec = VecEnv(envs)
            return vec, vec.env_id, vec.obs_spec, vec.action_spec  # type: ignore[return-value]
        if callable(src):
            vec = VecEnv.make(src, n)
            return vec, vec.env_id, vec.obs_spec, vec.action_spec  # type: ignore[return-value]
        raise ConfigError("env_or_specs: expected an env id, a gymnasium.Env, an env factory, a VecEnv, a "
                          f"TransitionSpec or (obs_spec, action_spec), got {type(src).__name__}")

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

    def _unscale_action(self, a: torch.Tensor) -> torch.Tensor:
        """env units -> [-1, 1]."""
        return 2.0 * (a - self.act_low) / (self.act_high - self.act_low) - 1.0

    def _env_action(self, a: torch.Tensor) -> np.ndarray:
        if self.discrete:
            return (a + self.action_offset).cpu().numpy().astype(self.action_spec.dtype)
        return a.cpu().numpy().astype(self.action_spec.dtype)

    # -- settings -----------------------------------------------------------------------------------
    def set_learning_rate(self, lr: float) -> None:
        self.config.learning_rate = float(lr)
        for opt in self._optimizers().values():
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
        """Write a checkpoint directory (see `tinker_core.training.checkpoint`)."""
        model = {f"model.{k}": v.detach().cpu().contiguous().numpy().copy() for k, v in self.state_dict().items()}
        optim_meta = {}
        for name, opt in self._optimizers().items():
            if opt is None:
                continue
            t, om = optimizer_state(name, opt)
            model.update(t)
            optim_meta[name] = om
        model["rng.torch"] = self.gen.get_state().numpy().copy()
        envs = None
        if self.vec_env is not None and self._last_obs is not None:
            envs = {"snapshots": [env_snapshot(e) for e in self.vec_env.envs],
                    "ep_returns": self.vec_env.ep_returns.tolist(), "ep_lengths": self.vec_env.ep_lengths.tolist()}
            if isinstance(self._last_obs, Mapping):
                model.update({f"env.last_obs.{k}": np.asarray(v) for k, v in self._last_obs.items()})
            else:
                model["env.last_obs"] = np.asarray(self._last_obs)
        extra_meta, extra_t = self._extra_state()
        model.update({f"extra.{k}": v for k, v in extra_t.items()})
        files = {"model": model}
        if include_replay:
            replay = self._replay_tensors()
            if replay:
                files["replay"] = replay
        meta = {
            "algo": self.algo_name,
            "class": f"{type(self).__module__}.{type(self).__qualname__}",
            "config": config_to_dict(self.config),
            "obs_spec": self.obs_spec.to_dict(),
            "action_spec": self.action_spec.to_dict(),
            "feature_spec": self._feature_spec().to_dict(),
            "env_id": self.env_id,
            "env_kwargs": self.env_kwargs,
            "env": None if self.env_config is None else self.env_config.to_dict(),
            "counters": {"num_timesteps": self.num_timesteps, "num_updates": self.num_updates,
                         "num_episodes": self.num_episodes, "learn_start": self._learn_start,
                         "learn_target": self._learn_target},
            "normalization": self._normalization(),
            "rng": {"numpy": self.np_rng.bit_generator.state},
            "optimizers": optim_meta,
            "envs": envs,
            "episode_history": self.episode_history[-2000:],
            "success_history": self.success_history[-2000:],
            "extra": extra_meta,
            "versions": _versions(),
        }
        return write_checkpoint(path, meta, files)

    def _replay_tensors(self) -> dict[str, np.ndarray]:
        return {}

    def _load_replay(self, tensors: Mapping[str, np.ndarray]) -> None:
        pass

    def _restore(self, meta: dict, files: dict[str, dict[str, np.ndarray]], path: Path) -> None:
        t = files["model"]
        sd = self.state_dict()
        state = {k[len("model."):]: v for k, v in t.items() if k.startswith("model.")}
        missing, extra = sorted(set(sd) - set(state)), sorted(set(state) - set(sd))
        if missing or extra:
            raise CheckpointError(f"{path}: weights do not fit {type(self).__name__} (missing {missing}, unexpected {extra})")
        for k, v in list(state.items()):
            if v.size == sd[k].numel() and v.ndim != sd[k].dim():  # 0-d tensors come back as [1]
                state[k] = v = np.array(v).reshape(tuple(sd[k].shape))
            if tuple(sd[k].shape) != tuple(v.shape):
                raise CheckpointError(f"{path}: {k} has shape {tuple(v.shape)}, this network needs {tuple(sd[k].shape)}")
        self.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})
        for name, opt in self._optimizers().items():
            if opt is not None and name in meta["optimizers"]:
                load_optimizer_state(name, opt, t, meta["optimizers"][name])
        self.gen.set_state(torch.from_numpy(np.array(t["rng.torch"])))
        self.np_rng.bit_generator.state = meta["rng"]["numpy"]
        cnt = meta["counters"]
        self.num_timesteps, self.num_updates = int(cnt["num_timesteps"]), int(cnt["num_updates"])
        self.num_episodes = int(cnt["num_episodes"])
        self._learn_start, self._learn_target = int(cnt["learn_start"]), int(cnt["learn_target"])
        self.episode_history = [tuple(x) for x in meta.get("episode_history", [])]  # type: ignore[misc]
        self.success_history = [bool(x) for x in meta.get("success_history", [])]
        envs = meta.get("envs")
        if self.vec_env is not None and envs is not None and len(envs["snapshots"]) == self.vec_env.n:
            if all(s is not None for s in envs["snapshots"]):
                for e, s in zip(self.vec_env.envs, envs["snapshots"]):
                    restore_env(e, s)
                if "env.last_obs" in t:
                    self._last_obs = np.array(t["env.last_obs"])
                else:
                    self._last_obs = {k[len("env.last_obs."):]: np.array(v) for k, v in t.items()
                                      if k.startswith("env.last_obs.")}
                self.vec_env.obs = self._last_obs
                self.vec_env.ep_returns[:] = envs["ep_returns"]
                self.vec_env.ep_lengths[:] = envs["ep_lengths"]
            else:
                log.info("%s: the env state could not be captured; the run resumes with fresh episodes", path)
        self._load_extra_state(meta.get("extra", {}), {k[len("extra."):]: v for k, v in t.items()
                                                       if k.startswith("extra.")})
        if "replay" in files:
            self._load_replay(files["replay"])

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
        import copy

        perception, actor = self._deploy_modules()
        perception = copy.deepcopy(perception).cpu().eval()
        actor = copy.deepcopy(actor).cpu().eval()
        if self.obs_norm is not None:
            perception = nn.Sequential(self.obs_norm.folded(), perception)
        for p in list(perception.parameters()) + list(actor.parameters()):
            p.requires_grad_(False)
        return {"perception": perception, "actor": actor}

    def export_metadata(self) -> dict:
        """What a deployed bundle needs besides the graphs: specs, normalization, provenance, and what
        the env exposes about its observation/action layout (read from ``env.unwrapped``)."""
        meta = {
            "algo": self.algo_name,
            "obs_spec": self.obs_spec.to_dict(),
            "action_spec": self.action_spec.to_dict(),
            "feature_spec": self._feature_spec().to_dict(),
            "normalization": self._normalization(),
            "training_step": self.num_timesteps,
            "env_id": self.env_id,
            "env": None if self.env_config is None else self.env_config.to_dict(),
            "config": config_to_dict(self.config),
            "versions": _versions(),
        }
        if self.vec_env is not None:
            u = self.vec_env.unwrapped
            for key in ("obs_terms", "action_terms", "joint_names", "action_chain_config", "control_period"):
                v = getattr(u, key, None)
                if v is None:
                    continue
                if dataclasses.is_dataclass(v) and not isinstance(v, type):
                    v = dataclasses.asdict(v)
                elif hasattr(v, "to_dict"):
                    v = v.to_dict()
                meta[key] = v
        return meta

    # -- misc ---------------------------------------------------------------------------------------
    def close(self) -> None:
        if self.vec_env is not None:
            self.vec_env.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self.env_id!r}, obs={self.obs_spec!r}, action={self.action_spec!r})"


def algorithm_from_meta(meta: dict, env: Any = None, device: str | None = None,
                        registry: Mapping[str, type[Algorithm]] | None = None) -> Algorithm:
    from tinker_core.module import config_from_dict

    if registry is None:
        from tinker_core.algos import ALGOS as registry
    name = meta.get("algo")
    if name not in registry:
        raise CheckpointError(f"checkpoint algo {name!r} is unknown; known: {sorted(registry)}")
    cls = registry[name]
    config = config_from_dict(cls.config_class, meta["config"], f"checkpoint config ({name})")
    if device is not None:
        config.device = device
    obs_spec, action_spec = spec_from_dict(meta["obs_spec"]), spec_from_dict(meta["action_spec"])
    env_kwargs = meta.get("env_kwargs") or {}
    if env is None:
        if meta.get("env"):
            env, env_kwargs = EnvConfig.from_dict(meta["env"], "checkpoint env"), {}
        else:
            env = meta["env_id"] if meta.get("env_id") else (obs_spec, action_spec)
    algo = cls(env, config, env_kwargs=env_kwargs)
    if algo.obs_spec != obs_spec or algo.action_spec != action_spec:
        raise CheckpointError(f"checkpoint was saved for obs {obs_spec!r} / action {action_spec!r}, the env gives "
                              f"obs {algo.obs_spec!r} / action {algo.action_spec!r}")
    return algo


def load_checkpoint_into(algo: Algorithm, path: str | Path) -> Algorithm:
    meta, files = read_checkpoint(path)
    algo._restore(meta, files, Path(path))
    return algo


__all__ = ["AlgoConfig", "Algorithm", "EnvConfig", "PolicyModule", "DivergenceError", "backward_in_caller_thread", "make_adam",
           "resolve_device",
           "read_checkpoint", "algorithm_from_meta"]
