"""RL Zoo hyperparameter entries (rl-baselines3-zoo ``hyperparams/<algo>.yml``) as tinker settings.

An entry loads as written: ``lin_<start>`` schedules, ``train_freq: [1, episode]`` / ``[4, step]``,
``gradient_steps: -1``, ``policy_kwargs`` as RL Zoo's python-dict string (read by a parser that
accepts literals, ``dict(...)`` and activation names, and evaluates nothing), ``normalize`` (true or
a dict string), ``frame_stack``, ``env_wrapper``, ``n_envs``, ``n_timesteps``, ``policy``. Where tinker
differs on purpose, or lacks the feature, the error names the key and the value and says what to
write instead. `RLZooEntry.settings` gives the algorithm section, the env and the budget.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tinker_core.errors import ConfigError


ACTIVATIONS = {"ReLU": "relu", "Tanh": "tanh", "ELU": "elu", "SiLU": "silu"}
"""torch.nn activation classes tinker's MLPs have, by class name"""


@dataclass(frozen=True)
class Ref:
    """A dotted name in a policy_kwargs string (``nn.ReLU``, ``th.optim.Adam``), kept as text."""

    name: str

    @property
    def leaf(self) -> str:
        return self.name.rsplit(".", 1)[-1]


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def parse_literal(text: str, key: str) -> Any:
    """A python literal as RL Zoo writes it (``dict(a=1, b=[2, 3])``, ``{'norm_obs': True}``,
    ``nn.ReLU``) -> plain data, dotted names as `Ref`. Nothing is evaluated or imported."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ConfigError(f"{key}: not a python literal: {text!r} ({e.msg})") from None

    def conv(n: ast.AST) -> Any:
        if isinstance(n, ast.Constant):
            return n.value
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = conv(n.operand)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.Dict):
            if any(k is None for k in n.keys):
                raise ConfigError(f"{key}: '**' unpacking is not supported in {text!r}")
            return {conv(k): conv(v) for k, v in zip(n.keys, n.values)}
        if isinstance(n, (ast.List, ast.Tuple)):
            return [conv(e) for e in n.elts]
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "dict" and not n.args:
            if any(kw.arg is None for kw in n.keywords):
                raise ConfigError(f"{key}: '**' unpacking is not supported in {text!r}")
            return {kw.arg: conv(kw.value) for kw in n.keywords}
        name = _dotted(n)
        if name is not None:
            return Ref(name)
        raise ConfigError(f"{key}: only literals, dict(...) and names are read, not "
                          f"{ast.unparse(n)!r} (in {text!r})")

    return conv(tree.body)


# -- policy_kwargs ---------------------------------------------------------------------------------
def _net_arch(value: Any, algo: str, key: str) -> list[int]:
    v = value
    if isinstance(v, list) and len(v) == 1 and isinstance(v[0], Mapping):
        v = v[0]  # SB3 < 1.8's [dict(pi=..., vf=...)]
    if isinstance(v, Mapping):
        lists = {k: v[k] for k in v}
        unknown = sorted(set(lists) - {"pi", "vf", "qf"})
        if unknown:
            raise ConfigError(f"{key}: net_arch keys {unknown} in {value!r}: tinker's actor and critic are separate "
                              "MLPs with the same widths; write net_arch=[w1, w2]")
        widths = [list(x) for x in lists.values()]
        if any(w != widths[0] for w in widths):
            raise ConfigError(f"{key}: net_arch {value!r}: tinker's actor and critic have the same hidden widths; "
                              "write one list, e.g. net_arch=" + str(widths[0]))
        v = widths[0]
    if not isinstance(v, list) or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in v):
        raise ConfigError(f"{key}: net_arch: expected a list of layer widths, got {value!r}")
    return list(v)


def policy_kwargs_to_fields(policy_kwargs: Mapping | str, algo: str, key: str = "policy_kwargs") -> dict[str, Any]:
    """SB3 ``policy_kwargs`` (a dict, or RL Zoo's string) -> tinker config fields."""
    pk = parse_literal(policy_kwargs, key) if isinstance(policy_kwargs, str) else dict(policy_kwargs)
    if not isinstance(pk, Mapping):
        raise ConfigError(f"{key}: expected dict(...), got {policy_kwargs!r}")
    out: dict[str, Any] = {}
    for k, v in pk.items():
        where = f"{key}.{k}"
        if k == "net_arch":
            out["net_arch"] = _net_arch(v, algo, where)
        elif k == "activation_fn":
            leaf = v.leaf if isinstance(v, Ref) else getattr(v, "__name__", str(v))
            if leaf not in ACTIVATIONS:
                raise ConfigError(f"{where}: {leaf} is not one of tinker's activations "
                                  f"{sorted(ACTIVATIONS)}; write activation_fn=nn.ReLU (or Tanh, ELU, SiLU)")
            out["activation"] = ACTIVATIONS[leaf]
        elif k == "log_std_init" and algo in ("ppo", "sac"):
            out["log_std_init"] = float(v)  # SAC reads it with use_sde only, as SB3's
        elif k == "ortho_init" and algo == "ppo":
            out["ortho_init"] = bool(v)
        elif k == "n_critics" and algo == "sac":
            out["n_critics"] = int(v)
        elif k in ("squash_output", "use_expln") and v is False or k == "full_std" and v is True:
            pass  # SB3's defaults, which tinker's gSDE is
        elif k == "normalize_images" and v is True:
            pass
        else:
            raise ConfigError(f"{where}={_show(v)}: not a setting tinker's {algo.upper()} has; policy_kwargs may "
                              "hold net_arch, activation_fn" + (", log_std_init, ortho_init" if algo == "ppo" else "")
                              + (", log_std_init, n_critics" if algo == "sac" else ""))
    return out


def _show(v: Any) -> str:
    return v.name if isinstance(v, Ref) else repr(v)


# -- the entry ------------------------------------------------------------------------------------
_REFUSED = {
    "target_kl": {"ppo": "tinker's PPO has no early stop on KL; remove target_kl (watch train/approx_kl)"},
    "callback": {"*": "RL Zoo callbacks are SB3 classes; in tinker use tinker_core.training.callbacks from Python "
                      "or --checkpoint-every on the command line"},
    "replay_buffer_class": {"ppo": "PPO has no replay; remove replay_buffer_class"},
    "replay_buffer_kwargs": {"ppo": "PPO has no replay; remove replay_buffer_kwargs"},
    "noise_type": {"*": "tinker's SAC and DQN take no action noise; remove noise_type"},
    "noise_std": {"*": "tinker's SAC and DQN take no action noise; remove noise_std"},
    "optimize_memory_usage": {"*": "tinker's replay always stores next observations; remove optimize_memory_usage"},
    "vec_env_wrapper": {"*": "tinker's VecEnv takes gymnasium wrappers per env: use env_wrapper"},
    "monitor_kwargs": {"*": "tinker records episode returns itself; remove monitor_kwargs"},
}
_RLZOO_ONLY = {"policy", "n_timesteps", "normalize", "frame_stack", "env_wrapper", "policy_kwargs", "env_kwargs",
               "replay_buffer_class", "replay_buffer_kwargs"}


def _int_fields(cls: type) -> set[str]:
    hints = typing.get_type_hints(cls)
    return {f.name for f in dataclasses.fields(cls) if hints.get(f.name) is int}


@dataclass
class RLZooSettings:
    """What an RL Zoo entry means in tinker: the algorithm section, the env's extras and the budget."""

    section: dict[str, Any]
    """tinker config fields of the algorithm (e.g. the ``ppo:`` section)"""
    total_timesteps: int | None = None
    env_wrappers: list = field(default_factory=list)
    env_kwargs: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    """translations made (e.g. a batch larger than the rollout), for the run's log"""


def _normalize(value: Any, algo: str, key: str) -> tuple[bool, bool]:
    if isinstance(value, bool):
        return value, value
    d = parse_literal(value, key) if isinstance(value, str) else value
    if not isinstance(d, Mapping):
        raise ConfigError(f"{key}: expected true, false or \"{{'norm_obs': ..., 'norm_reward': ...}}\", got {value!r}")
    unknown = sorted(set(d) - {"norm_obs", "norm_reward", "gamma", "clip_obs", "clip_reward", "epsilon"})
    if unknown:
        raise ConfigError(f"{key}: unknown VecNormalize setting(s) {unknown} in {value!r}")
    for k, default in (("clip_obs", 10.0), ("clip_reward", 10.0), ("epsilon", 1e-8)):
        if k in d and float(d[k]) != default:
            raise ConfigError(f"{key}: {k}={d[k]!r}: tinker's normalization uses {k}={default}; remove {k}")
    return bool(d.get("norm_obs", True)), bool(d.get("norm_reward", True))


def from_rlzoo(entry: Mapping[str, Any], algo: str, config_class: type, where: str = "rlzoo") -> RLZooSettings:
    """Translate one RL Zoo entry (the mapping under the env id) for ``algo`` (ppo, sac, dqn)."""
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: expected the RL Zoo entry as a mapping, got {type(entry).__name__}")
    fields = {f.name for f in dataclasses.fields(config_class)}
    ints = _int_fields(config_class)
    out = RLZooSettings(section={})
    sec = out.section
    for key, value in entry.items():
        k = f"{where}.{key}"
        refusal = _REFUSED.get(key, {})
        if algo in refusal or ("*" in refusal and key not in fields):
            if value in (False, None) and key in ("use_sde", "use_sde_at_warmup", "optimize_memory_usage"):
                continue  # asks for what tinker does anyway
            raise ConfigError(f"{k}={value!r}: {refusal.get(algo) or refusal['*']}")
        if key == "n_timesteps":
            out.total_timesteps = _as_int(value, k)
        elif key == "policy":
            from tinker_core.algos.sb3_compat import SB3_POLICY_NAMES

            if value not in SB3_POLICY_NAMES:
                raise ConfigError(f"{k}={value!r}: expected one of {sorted(SB3_POLICY_NAMES)} (tinker picks the "
                                  "networks from the observation space; a custom policy class is not read)")
            sec["perception"] = SB3_POLICY_NAMES[value]
        elif key == "normalize":
            norm_obs, norm_reward = _normalize(value, algo, k)
            sec["normalize_obs"] = norm_obs
            if norm_reward and algo != "ppo":
                raise ConfigError(f"{k}={value!r}: tinker normalizes rewards in PPO only; for {algo.upper()} write "
                                  "normalize: \"{'norm_obs': True, 'norm_reward': False}\"")
            if algo == "ppo":
                sec["normalize_reward"] = norm_reward
        elif key == "frame_stack":
            n = _as_int(value, k)
            out.env_wrappers.append({"gymnasium.wrappers.FrameStackObservation": {"stack_size": n}})
        elif key == "env_wrapper":
            out.env_wrappers.extend(value if isinstance(value, list) else [value])
        elif key == "env_kwargs":
            kw = parse_literal(value, k) if isinstance(value, str) else value
            if not isinstance(kw, Mapping):
                raise ConfigError(f"{k}: expected a mapping, got {value!r}")
            out.env_kwargs.update(kw)
        elif key == "policy_kwargs":
            sec.update(policy_kwargs_to_fields(value, algo, k))
        elif key == "train_freq":
            sec["train_freq"] = _train_freq(value, k)
        elif key == "replay_buffer_class":
            from tinker_core.algos.her import her_config_from_sb3

            her = her_config_from_sb3(value, entry.get("replay_buffer_kwargs"))
            if her is not None:
                sec["her"] = dataclasses.asdict(her)
        elif key == "replay_buffer_kwargs":
            if "replay_buffer_class" not in entry:
                raise ConfigError(f"{k}: only read with replay_buffer_class: HerReplayBuffer; add it or remove "
                                  "replay_buffer_kwargs")
        elif key in fields:
            sec[key] = _as_int(value, k) if key in ints and not isinstance(value, bool) else value
        else:
            raise ConfigError(f"{k}={value!r}: not a setting of tinker's {algo.upper()}; its settings: "
                              f"{sorted(fields - {'schedules'})} and RL Zoo's {sorted(_RLZOO_ONLY)}")
    _gradient_steps(sec, out, where)
    _rollout_batch(sec, out, algo, config_class, where)
    return out


def _as_int(value: Any, key: str) -> int:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: expected a whole number, got {value!r}") from None
    if f != int(f):
        raise ConfigError(f"{key}: expected a whole number, got {value!r}")
    return int(f)


def _train_freq(value: Any, key: str) -> Any:
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or value[1] not in ("step", "episode"):
            raise ConfigError(f"{key}: expected N or [N, step] or [N, episode], got {value!r}")
        n = _as_int(value[0], key)
        return n if value[1] == "step" else [n, "episode"]
    return _as_int(value, key)


def _gradient_steps(sec: dict, out: RLZooSettings, where: str) -> None:
    """``gradient_steps: -1`` (as many as env steps collected) is fixed for step units; with episode
    units the algorithm counts it at run time."""
    if sec.get("gradient_steps") != -1:
        return
    tf = sec.get("train_freq", 1)
    if isinstance(tf, list):
        return
    n = int(tf) * int(sec.get("n_envs", 1))
    sec["gradient_steps"] = n
    out.notes.append(f"{where}.gradient_steps=-1: {n} gradient steps per training (train_freq x n_envs env steps)")


def _rollout_batch(sec: dict, out: RLZooSettings, algo: str, config_class: type, where: str) -> None:
    """RL Zoo's PPO may ask for a minibatch larger than the rollout; SB3 then trains on the whole
    rollout as one minibatch, and so does this translation."""
    if algo != "ppo" or "batch_size" not in sec:
        return
    defaults = config_class()
    rollout = int(sec.get("n_steps", defaults.n_steps)) * int(sec.get("n_envs", defaults.n_envs))
    if int(sec["batch_size"]) > rollout:
        out.notes.append(f"{where}.batch_size={sec['batch_size']} is larger than one rollout (n_steps x n_envs = "
                         f"{rollout}): one minibatch of the whole rollout per epoch, as SB3 does")
        sec["batch_size"] = rollout


def read_rlzoo_file(path: str | os.PathLike, env_id: str) -> dict:
    """The entry for ``env_id`` in an RL Zoo hyperparameter file (YAML anchors and ``!!float`` as RL Zoo)."""
    from tinker_core.config import read_yaml

    data = read_yaml(path)
    if env_id not in data:
        raise ConfigError(f"{path}: no entry for {env_id!r}; entries: {sorted(data)}")
    return dict(data[env_id] or {})


def algo_of_file(path: str | os.PathLike) -> str:
    """RL Zoo names its files after the algorithm (hyperparams/ppo.yml)."""
    return Path(path).stem.lower()


__all__ = ["Ref", "RLZooSettings", "parse_literal", "policy_kwargs_to_fields", "from_rlzoo", "read_rlzoo_file",
           "algo_of_file", "ACTIVATIONS"]
