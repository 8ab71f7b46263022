"""`HPPOConfig`: the settings of hierarchical PPO with options (`tinker_core.algos.hppo`; its own file so the algorithm file holds only the algorithm)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tinker_core.algos.base import AlgoConfig
from tinker_core.errors import ConfigError

TERMINATIONS = ("max_duration", "learned")


@dataclass
class HPPOConfig(AlgoConfig):
    device: str = "cpu"
    """HPPO runs on the CPU (its networks are small; one env step at a time)."""
    num_options: int = 4
    """Learned options K (ignored when ``skills`` is given: then K is the number of skills)."""
    skills: list[str] = field(default_factory=list)
    """Scripted skills by registered name (or a set name, e.g. ``planar_sort``); empty: learned options, one
    low-level network conditioned on a one-hot option embedding, trained with PPO on the env reward."""
    termination: str = "max_duration"
    """When an option ends: ``max_duration`` (after ``max_duration`` steps) or ``learned`` (a termination
    head beta(s, o) trained as in option-critic, and never later than ``max_duration``)."""
    max_duration: int = 8
    """Most env steps an option runs (the high level's decision period at most)."""
    termination_reg: float = 0.01
    """Option-critic's deliberation cost xi: added to the advantage in the termination loss, it keeps options
    from ending at every step."""
    n_steps: int = 256
    """Env steps per env in each rollout."""
    n_epochs: int = 10
    """Passes over each rollout, at each level."""
    batch_size: int = 64
    """Low-level minibatch (env steps)."""
    high_batch_size: int = 32
    """High-level minibatch (option decisions)."""
    learning_rate: float = 3e-4
    """Adam learning rate of both levels."""
    gae_lambda: float = 0.95
    """GAE lambda at both levels (on the semi-MDP for the high level)."""
    clip_range: float = 0.2
    """PPO ratio clipping at both levels."""
    ent_coef: float = 0.0
    """Low-level entropy bonus."""
    high_ent_coef: float = 0.01
    """High-level entropy bonus (keeps it trying every option early on)."""
    vf_coef: float = 0.5
    """Value loss coefficient at both levels."""
    max_grad_norm: float = 0.5
    """Gradient clipping (global norm) per level."""
    net_arch: list[int] = None  # type: ignore[assignment]
    """Hidden widths of every MLP (default [64, 64])."""
    activation: str = "tanh"
    """Nonlinearity of the MLPs."""
    log_std_init: float = 0.0
    """Initial log std of the learned options' continuous actions."""

    def __post_init__(self) -> None:
        if self.net_arch is None:
            self.net_arch = [64, 64]
        super().__post_init__()
        self.skills = list(self.skills or [])
        if not self.skills and int(self.num_options) < 1:
            raise ConfigError(f"HPPOConfig.num_options: expected >= 1, got {self.num_options}")
        if self.termination not in TERMINATIONS:
            raise ConfigError(f"HPPOConfig.termination: expected one of {TERMINATIONS}, got {self.termination!r}")
        for name in ("max_duration", "n_steps", "n_epochs", "batch_size", "high_batch_size"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"HPPOConfig.{name}: expected >= 1, got {getattr(self, name)!r}")
        if self.batch_size > self.n_steps * self.n_envs:
            raise ConfigError(f"HPPOConfig.batch_size: expected 1..n_steps*n_envs={self.n_steps * self.n_envs}, "
                              f"got {self.batch_size}")
        if not 0.0 <= self.gae_lambda <= 1.0:
            raise ConfigError(f"HPPOConfig.gae_lambda: expected 0..1, got {self.gae_lambda}")
        if not self.clip_range > 0:
            raise ConfigError(f"HPPOConfig.clip_range: expected > 0, got {self.clip_range}")
        if self.termination_reg < 0:
            raise ConfigError(f"HPPOConfig.termination_reg: expected >= 0, got {self.termination_reg}")
        if self.normalize_obs:
            raise ConfigError("HPPOConfig.normalize_obs: not supported yet (three networks would need one shared "
                              "statistic folded into each exported level); normalize in the env instead")
