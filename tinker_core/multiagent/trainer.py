"""`MultiAgentTrainer`: trains every agent of a PettingZoo Parallel env together, as its agents file says.

Agents are trained per **group**: the agents of one group share one `Algorithm` (PPO, SAC or DQN from
`tinker_core.algos`): its networks, optimizer, observation normalization and replay. An agent without
a group is a group of one. The algorithms' own pieces do the learning: PPO's sampling, GAE and
``_update`` (all epochs and minibatches), SAC's and DQN's replay ``_add`` and ``_train``; this module
only routes each agent's experience to its group.

- **Heterogeneous agents**: each group has its own spaces (image or vector observations, discrete or
  continuous actions) and its own algorithm and hyperparameters.
- **Normalization per group**: ``normalize_obs`` (any algorithm) and ``normalize_reward`` (PPO) in an
  agent's hyperparameters keep statistics per group.
- **Agents that finish early or join late**: experience is kept per agent, as that agent's own stream
  of steps; an agent that is not live in a step adds nothing to any batch, and each agent's advantages
  are computed over its own stream (bootstrapped where it was cut, zero where it terminated).
- **Centralized critic** (``centralized_critic: true``, MAPPO-style): a PPO group's advantages come
  from a critic that sees the env's global ``state()`` and which member is asking (one-hot), trained
  on the same returns; the actors still see only their own observations.

One trainer step steps the env once (every live agent acts once); ``total_timesteps`` counts those.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch
from torch import nn

from tinker_core.algos import ALGOS, DQN, PPO, Algorithm
from tinker_core.algos.checkpointing import load_checkpoint_into
from tinker_core.algos.optim import make_adam, update_scope
from tinker_core.algos.normalize import ObsNormalizer
from tinker_core.algos.off_policy import OffPolicyAlgorithm
from tinker_core.errors import CheckpointError, ConfigError
from tinker_core.multiagent.agents_file import AgentsConfig, AgentSpec, load_agents_file
from tinker_core.multiagent.channels import Channels
from tinker_core.multiagent.registry import make_parallel_env
from tinker_core.nn import mlp
from tinker_core.spec import spec_from_space
from tinker_core.training.logger import TrainingLogger

log = logging.getLogger("tinker.multiagent")

FORMAT_VERSION = 1
Callback = Callable[["MultiAgentTrainer", dict], Any]


class CentralCritic(nn.Module):
    """V(global state, which member): an MLP on the normalized state and the member's one-hot index."""

    def __init__(self, state_dim: int, n_members: int, net_arch: list[int], activation: str):
        super().__init__()
        self.state_norm = ObsNormalizer((state_dim,))
        self.n_members = n_members
        self.net = mlp(state_dim + n_members, net_arch, 1, activation)

    def inputs(self, states: np.ndarray, members: np.ndarray, update: bool = False) -> torch.Tensor:
        states = np.asarray(states, dtype=np.float64).reshape(len(members), -1)
        if update:
            self.state_norm.rms.update(states)
        x = self.state_norm.normalize_np(states)
        return torch.from_numpy(np.concatenate([x, np.eye(self.n_members, dtype=np.float32)[members]], 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


@dataclass
class _Group:
    """The agents that share one algorithm, and the experience in flight."""

    name: str
    entry: AgentSpec
    members: list[str]
    algo: Algorithm
    critic: CentralCritic | None = None
    critic_opt: torch.optim.Optimizer | None = None
    segments: dict[str, list[tuple]] = field(default_factory=dict)
    """PPO: per agent, its steps since the last update (obs, action, logp, value, reward, done, critic_in)."""
    stored: int = 0
    returns: dict[str, float] = field(default_factory=dict)
    """PPO reward normalization: each agent's running discounted return."""
    steps: int = 0
    """Env steps in which at least one member acted."""

    @property
    def on_policy(self) -> bool:
        return isinstance(self.algo, PPO)


class MultiAgentTrainer:
    """``MultiAgentTrainer(env, agents).learn()``: ``env`` is a PettingZoo ParallelEnv, a registered id or
    ``module:attr`` (see `registry`); ``agents`` an `AgentsConfig`, the same structure as a mapping, or
    the path of an agents file."""

    def __init__(self, env: Any, agents: AgentsConfig | Mapping[str, Any] | str | Path, *,
                 env_kwargs: Mapping[str, Any] | None = None):
        if isinstance(agents, (str, Path)):
            agents = load_agents_file(agents)
        elif isinstance(agents, Mapping):
            agents = AgentsConfig.from_dict(agents)
        if not isinstance(agents, AgentsConfig):
            raise ConfigError(f"agents: expected an AgentsConfig, a mapping or a path, got {type(agents).__name__}")
        self.config = agents
        if env is None:
            env = agents.env
        if env is None:
            raise ConfigError("env: no environment given (as the env argument or 'env' in the agents file)")
        self.env_id = env if isinstance(env, str) else None
        if isinstance(env, str):
            env = make_parallel_env(env, **{**agents.env_kwargs, **(env_kwargs or {})})
        if agents.channels:
            env = Channels(env, agents.channels)
        for attr in ("reset", "step", "observation_space", "action_space", "possible_agents"):
            if not hasattr(env, attr):
                raise ConfigError(f"env: expected a PettingZoo ParallelEnv (it has no {attr!r}), got {type(env).__name__}")
        self.env = env
        self.possible = list(env.possible_agents)
        self.entries = agents.resolve(self.possible)
        self._obs, _ = env.reset(seed=agents.seed)
        self.groups: dict[str, _Group] = {}
        self.group_of: dict[str, _Group] = {}
        self._build_groups()
        self.num_timesteps = 0
        self.num_episodes = 0
        self.curve: list[tuple[int, float]] = []
        self.successes: list[bool] = []
        self._ep_returns: dict[str, float] = {}

    # -- construction -------------------------------------------------------------------------------
    def _build_groups(self) -> None:
        members: dict[str, list[str]] = {}
        for a in self.possible:
            members.setdefault(self.entries[a].group_name, []).append(a)
        for gname, names in members.items():
            entry = self.entries[names[0]]
            ref_obs, ref_act = self.env.observation_space(names[0]), self.env.action_space(names[0])
            for a in names:
                e = self.entries[a]
                label = f"agents.{e.name}" + ("" if e.name == a else f" ({a})")
                obs_space, act_space = self.env.observation_space(a), self.env.action_space(a)
                if e.obs_space is not None:
                    e.obs_space.check(obs_space, f"{label}.obs_space")
                if e.action_space is not None:
                    e.action_space.check(act_space, f"{label}.action_space")
                if obs_space != ref_obs or act_space != ref_act:
                    raise ConfigError(f"{label}.group: group {gname!r} shares one policy, so its agents need the same "
                                      f"spaces; {a} has {obs_space} / {act_space}, {names[0]} has {ref_obs} / {ref_act}")
            config = entry.algo_config(self.config.seed)
            where = f"agents.{entry.name}.hyperparameters"
            if getattr(config, "use_sde", False):
                raise ConfigError(f"{where}.use_sde: gSDE is not supported in multi-agent runs, got true")
            if config.n_envs != 1:
                raise ConfigError(f"{where}.n_envs: a group's envs are its agents; expected 1, got {config.n_envs}")
            try:
                algo = ALGOS[entry.policy.lower()]((spec_from_space(ref_obs), spec_from_space(ref_act)), config)
            except ConfigError as e:
                raise ConfigError(f"{where}: {e}") from None
            except Exception as e:  # SpecError and friends from the algorithm: name the agent
                raise ConfigError(f"agents.{entry.name}.policy: {entry.policy} cannot act in {ref_act} on "
                                  f"{ref_obs}: {e}") from None
            algo.train(False)
            g = _Group(gname, entry, names, algo)
            if self.config.centralized_critic and g.on_policy:
                g.critic, g.critic_opt = self._central_critic(algo, len(names))
            self.groups[gname] = g
            for a in names:
                self.group_of[a] = g

    def _central_critic(self, algo: Algorithm, n_members: int) -> tuple[CentralCritic, torch.optim.Optimizer]:
        try:
            state = np.asarray(self.env.state(), dtype=np.float32).reshape(-1)
        except (NotImplementedError, AttributeError) as e:
            raise ConfigError(f"centralized_critic: the env has no global state() ({e}); set it to false") from None
        c = algo.config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(c.seed + 1)
            critic = CentralCritic(state.size, n_members, list(c.net_arch), c.activation)
        algo.central_critic = critic  # a submodule: saved and loaded with the group's checkpoint
        return critic, make_adam(critic.net.parameters(), c.learning_rate, eps=1e-5)

    # -- the API ------------------------------------------------------------------------------------
    def algo(self, agent: str) -> Algorithm:
        """The algorithm that trains ``agent`` (shared by its group)."""
        if agent not in self.group_of:
            raise ConfigError(f"agent: expected one of {self.possible}, got {agent!r}")
        return self.group_of[agent].algo

    def act(self, observations: Mapping[str, Any], deterministic: bool = True) -> dict[str, Any]:
        """Actions for a dict of observations, each agent's from its group's policy."""
        out: dict[str, Any] = {}
        for g in self.groups.values():
            live = [a for a in g.members if a in observations]
            if live:
                acts = g.algo.predict(_stack([observations[a] for a in live]), deterministic=deterministic)
                out.update({a: _scalar_action(acts[i]) for i, a in enumerate(live)})
        return out

    def learn(self, total_timesteps: int | None = None, *, out_dir: str | Path | None = None, checkpoint_every: int = 0,
              callback: Callback | None = None, progress: bool = True, tensorboard: bool = True) -> "MultiAgentTrainer":
        """Step the env ``total_timesteps`` times (default: the agents file's), training every group as
        its algorithm is due. ``callback(trainer, info)`` runs after each finished episode; False stops."""
        total = int(total_timesteps if total_timesteps is not None else self.config.total_timesteps)
        if total < 1:
            raise ConfigError(f"total_timesteps: expected >= 1, got {total}")
        start = self.num_timesteps
        self._target = start + total
        self._start = start
        out = None if out_dir is None else Path(out_dir)
        logger = TrainingLogger(out, self._target, start=start, progress=progress, tensorboard=tensorboard,
                                title=f"multi-agent {self.env_id or type(self.env).__name__}")
        logger.curve = list(self.curve)
        next_ckpt = start + checkpoint_every if checkpoint_every else None
        try:
            while self.num_timesteps < self._target:
                finished = self._step()
                if finished is not None:
                    ret, success = finished
                    logger.episodes(self.num_timesteps, [ret], [success])
                    logger.scalars(self.num_timesteps, self._scalars(logger))
                    logger.progress(self.num_timesteps)
                    if callback is not None and callback(self, {"return": ret, "success": success}) is False:
                        break
                if next_ckpt is not None and out is not None and self.num_timesteps >= next_ckpt:
                    next_ckpt += checkpoint_every
                    self.save(out / "checkpoints" / f"step_{self.num_timesteps}")
            if out is not None:
                self.save(out / "final")
        finally:
            logger.close(self.num_timesteps)
        return self

    def _scalars(self, logger: TrainingLogger) -> dict[str, float]:
        m: dict[str, float] = {"time/fps": logger.fps(self.num_timesteps)}
        r = logger.mean_return()
        if r is not None:
            m["rollout/ep_return_mean"] = r
        s = logger.success_rate()
        if s is not None:
            m["rollout/success_rate"] = s
        for g in self.groups.values():
            m[f"{g.name}/updates"] = float(g.algo.num_updates)
            for k, v in g.algo._metrics.items():
                if isinstance(v, torch.Tensor) and v.numel() == 1:
                    m[f"{g.name}/{k}"] = float(v)
        return m

    # -- one env step -------------------------------------------------------------------------------
    def _step(self) -> tuple[float, bool | None] | None:
        env = self.env
        live_now = [a for a in env.agents if a in self._obs]
        state = None
        if any(g.critic is not None for g in self.groups.values()):
            state = np.asarray(env.state(), dtype=np.float32).reshape(-1)
        actions: dict[str, Any] = {}
        pending: dict[str, tuple[_Group, list[str], dict]] = {}
        for g in self.groups.values():
            live = [a for a in g.members if a in live_now]
            if not live:
                continue
            obs = _stack([self._obs[a] for a in live])
            rec = self._act_on_policy(g, live, obs, state) if g.on_policy else self._act_off_policy(g, obs, len(live))
            for i, a in enumerate(live):
                actions[a] = _scalar_action(rec["env_actions"][i])
            pending[g.name] = (g, live, rec)
        next_obs, rew, term, trunc, infos = env.step(actions)
        self.num_timesteps += 1
        for a in live_now:
            self._ep_returns[a] = self._ep_returns.get(a, 0.0) + float(rew.get(a, 0.0))
        for g, live, rec in pending.values():
            g.steps += 1
            r = np.array([float(rew.get(a, 0.0)) for a in live], dtype=np.float32)
            te = np.array([bool(term.get(a, False)) for a in live])
            tr = np.array([bool(trunc.get(a, False)) for a in live])
            if g.on_policy:
                self._store_on_policy(g, live, rec, r, te, tr, next_obs)
            else:
                self._store_off_policy(g, live, rec, r, te, tr, next_obs)
        finished = None
        if not env.agents:
            finished = self._end_episode(infos)
            self._obs, _ = env.reset()
        else:
            self._obs = {a: o for a, o in next_obs.items() if a in env.agents}
        for g in self.groups.values():
            if g.on_policy and g.stored >= g.algo.config.n_steps:
                self._update_on_policy(g)
        return finished

    def _end_episode(self, infos: Mapping[str, Any]) -> tuple[float, bool | None]:
        rets = list(self._ep_returns.values())
        self._ep_returns = {}
        ret = float(np.mean(rets)) if rets else 0.0
        flags = [bool(i["is_success"]) for i in infos.values() if isinstance(i, Mapping) and "is_success" in i]
        success = (any(flags) if flags else None)
        self.num_episodes += 1
        self.curve.append((self.num_timesteps, ret))
        del self.curve[:-5000]
        if success is not None:
            self.successes.append(success)
            del self.successes[:-5000]
        return ret, success

    # -- PPO groups ---------------------------------------------------------------------------------
    def _act_on_policy(self, g: _Group, live: list[str], obs: Any, state: np.ndarray | None) -> dict:
        algo: PPO = g.algo  # type: ignore[assignment]
        with torch.no_grad():
            obs_t = algo._obs_to_tensor(obs, update_norm=True)
            feat = algo.perception(obs_t)
            a, logp = algo._sample_logp(feat)
            crit_in = None
            if g.critic is not None:
                idx = np.array([g.members.index(x) for x in live])
                crit_in = g.critic.inputs(np.repeat(state[None], len(live), 0), idx, update=True)  # type: ignore[index]
                v = g.critic(crit_in)
            else:
                v = algo.vf(feat).reshape(-1)
        return {"obs_t": algo._stored_obs(obs_t), "a": a.cpu(), "logp": logp.cpu(), "v": v.cpu(), "crit_in": crit_in,
                "env_actions": algo._to_env(a)}

    def _values_of(self, g: _Group, agents: list[str], obs: Mapping[str, Any]) -> np.ndarray:
        """V of the agents' observations ``obs`` (with the central critic: of the env's current state)."""
        algo: PPO = g.algo  # type: ignore[assignment]
        with torch.no_grad():
            if g.critic is not None:
                state = np.asarray(self.env.state(), dtype=np.float32).reshape(-1)
                idx = np.array([g.members.index(a) for a in agents])
                return g.critic(g.critic.inputs(np.repeat(state[None], len(agents), 0), idx)).numpy()
            x = algo._obs_to_tensor(_stack([obs[a] for a in agents]))
            return algo.vf(algo.perception(x)).reshape(-1).cpu().numpy()

    def _store_on_policy(self, g: _Group, live: list[str], rec: dict, r: np.ndarray, te: np.ndarray, tr: np.ndarray,
                         next_obs: Mapping[str, Any]) -> None:
        algo: PPO = g.algo  # type: ignore[assignment]
        c = algo.config
        if algo.reward_norm is not None:  # per group: each member's own discounted return, shared statistics
            rets = np.array([g.returns.get(a, 0.0) * c.gamma + r[i] for i, a in enumerate(live)])
            algo.reward_norm.rms.update(rets)
            for i, a in enumerate(live):
                g.returns[a] = 0.0 if (te[i] or tr[i]) else float(rets[i])
            std = float(np.sqrt(algo.reward_norm.rms.var.item() + algo.reward_norm.eps))
            r = np.clip(r / std, -algo.reward_norm.clip, algo.reward_norm.clip).astype(np.float32)
        boot = [i for i in range(len(live)) if tr[i] and not te[i] and live[i] in next_obs]
        if boot:  # cut by a time limit: bootstrap from the final observation
            r = r.copy()
            r[boot] += c.gamma * self._values_of(g, [live[i] for i in boot], next_obs)
        for i, a in enumerate(live):
            obs_i = {k: v[i] for k, v in rec["obs_t"].items()} if isinstance(rec["obs_t"], dict) else rec["obs_t"][i]
            ci = None if rec["crit_in"] is None else rec["crit_in"][i]
            g.segments.setdefault(a, []).append((obs_i, rec["a"][i], float(rec["logp"][i]), float(rec["v"][i]),
                                                 float(r[i]), bool(te[i] or tr[i]), ci))
        g.stored += len(live)
        algo.num_timesteps += len(live)

    def _update_on_policy(self, g: _Group) -> None:
        algo: PPO = g.algo  # type: ignore[assignment]
        c = algo.config
        alive = [a for a, seg in g.segments.items() if seg and not seg[-1][5] and a in self._obs]
        last_v = dict(zip(alive, self._values_of(g, alive, self._obs))) if alive else {}
        obs, acts, logps, vals, advs, rets, crit = [], [], [], [], [], [], []
        for a, seg in g.segments.items():
            if not seg:
                continue
            n = len(seg)
            v = np.array([s[3] for s in seg], dtype=np.float32)
            r = np.array([s[4] for s in seg], dtype=np.float32)
            done = np.array([s[5] for s in seg], dtype=np.float32)
            next_v = np.append(v[1:], last_v.get(a, 0.0)).astype(np.float32)
            delta = r + c.gamma * next_v * (1.0 - done) - v
            adv = np.zeros(n, dtype=np.float32)
            gae = 0.0
            for t in range(n - 1, -1, -1):
                gae = delta[t] + c.gamma * c.gae_lambda * (1.0 - done[t]) * gae
                adv[t] = gae
            obs += [s[0] for s in seg]
            acts += [s[1] for s in seg]
            logps.append(np.array([s[2] for s in seg], dtype=np.float32))
            vals.append(v)
            advs.append(adv)
            rets.append(adv + v)
            if g.critic is not None:
                crit += [s[6] for s in seg]
        col = lambda x: torch.from_numpy(np.concatenate(x)).reshape(-1, 1)
        if isinstance(obs[0], dict):
            o = {k: torch.stack([x[k] for x in obs]).unsqueeze(1) for k in obs[0]}
        else:
            o = torch.stack(obs).unsqueeze(1)
        ret_t = col(rets)
        algo._update(o, torch.stack(acts).unsqueeze(1), col(vals), col(logps), col(advs), ret_t)
        algo.train(False)  # acting mode until the next update (as PPO's own rollouts)
        if g.critic is not None:
            self._fit_critic(g, torch.stack(crit), ret_t.reshape(-1))
        g.segments = {a: [] for a in g.segments}
        g.stored = 0

    def _fit_critic(self, g: _Group, x: torch.Tensor, ret: torch.Tensor) -> None:
        c = g.algo.config
        critic, opt = g.critic, g.critic_opt
        n = x.shape[0]
        critic.train(True)  # type: ignore[union-attr]
        with update_scope():
            for _ in range(c.n_epochs):
                perm = torch.randperm(n, generator=g.algo.gen)
                for s in range(0, n, c.batch_size):
                    idx = perm[s:s + c.batch_size]
                    loss = torch.nn.functional.mse_loss(critic(x[idx]), ret[idx])  # type: ignore[misc]
                    opt.zero_grad(set_to_none=True)  # type: ignore[union-attr]
                    loss.backward()
                    nn.utils.clip_grad_norm_(critic.net.parameters(), c.max_grad_norm)  # type: ignore[union-attr]
                    opt.step()  # type: ignore[union-attr]
        g.algo._metrics["central_value_loss"] = loss.detach()

    # -- SAC / DQN groups ---------------------------------------------------------------------------
    def _act_off_policy(self, g: _Group, obs: Any, n: int) -> dict:
        algo: OffPolicyAlgorithm = g.algo  # type: ignore[assignment]
        c = algo.config
        if hasattr(algo, "exploration_rate"):  # DQN: epsilon falls over exploration_fraction of this run
            span = max(1, self._target - self._start)
            frac = min(1.0, (self.num_timesteps - self._start) / span / c.exploration_fraction)  # type: ignore[attr-defined]
            algo.exploration_rate = (c.exploration_initial_eps  # type: ignore[attr-defined]
                                     + frac * (c.exploration_final_eps - c.exploration_initial_eps))  # type: ignore[attr-defined]
        if algo.num_timesteps < c.learning_starts:
            acts = algo._random_actions(n)
        else:
            acts = algo._act_raw(obs, deterministic=False)
        return {"obs": obs, "env_actions": acts}

    def _store_off_policy(self, g: _Group, live: list[str], rec: dict, r: np.ndarray, te: np.ndarray, tr: np.ndarray,
                          next_obs: Mapping[str, Any]) -> None:
        algo: OffPolicyAlgorithm = g.algo  # type: ignore[assignment]
        c = algo.config
        obs = rec["obs"]
        # an agent that left without a final observation: its own last one stands in (no bootstrap: terminated)
        nxt = _stack([next_obs[a] if a in next_obs else _index(obs, i) for i, a in enumerate(live)])
        te = te | np.array([a not in next_obs for a in live])
        if algo.obs_norm is not None:
            algo.obs_norm.update(obs)
        algo._add(obs, np.asarray(rec["env_actions"]), r, nxt, te, te | tr)
        algo.num_timesteps += len(live)
        if algo.num_timesteps > c.learning_starts and g.steps % c.train_freq == 0:
            algo._train(c.gradient_steps)
        if isinstance(algo, DQN) and g.steps % max(algo.config.target_update_interval // len(g.members), 1) == 0:
            algo._update_target()  # as DQN's own loop: its forward() path has no target update

    # -- evaluation ---------------------------------------------------------------------------------
    def evaluate(self, episodes: int = 20, seed: int = 10_000, deterministic: bool = True,
                 random_agents: tuple[str, ...] = ()) -> dict[str, Any]:
        """Run ``episodes`` episodes with the current policies on a fresh reset sequence (``seed``):
        mean per-agent return and success rate. Agents in ``random_agents`` act uniformly at random
        (what the others achieve without them)."""
        env = self.env
        rets, succ = [], []
        for ep in range(episodes):
            obs, _ = env.reset(seed=seed + ep)
            total: dict[str, float] = {}
            infos: Mapping[str, Any] = {}
            while env.agents:
                policy_obs = {a: o for a, o in obs.items() if a in env.agents and a not in random_agents}
                actions = self.act(policy_obs, deterministic)
                actions.update({a: env.action_space(a).sample() for a in env.agents if a in random_agents})
                obs, rew, _, _, infos = env.step(actions)
                for a, v in rew.items():
                    total[a] = total.get(a, 0.0) + float(v)
            rets.append(float(np.mean(list(total.values()))) if total else 0.0)
            flags = [bool(i["is_success"]) for i in infos.values() if isinstance(i, Mapping) and "is_success" in i]
            if flags:
                succ.append(any(flags))
        self._obs, _ = env.reset(seed=seed + episodes)
        self._ep_returns = {}
        for g in self.groups.values():  # the rollouts in flight belong to the episodes just abandoned
            if g.on_policy:
                for a, seg in g.segments.items():
                    if seg:
                        seg[-1] = (*seg[-1][:5], True, seg[-1][6])
        return {"episodes": episodes, "mean_return": float(np.mean(rets)),
                "success_rate": float(np.mean(succ)) if succ else None}

    # -- checkpoints --------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """A directory: ``multiagent.json`` (the agents file, counters, curve) and one algorithm
        checkpoint per group under ``groups/`` (PPO rollouts in flight are not kept)."""
        path = Path(path)
        (path / "groups").mkdir(parents=True, exist_ok=True)
        for g in self.groups.values():
            g.algo.save_checked(path / "groups" / g.name)
        meta = {"format_version": FORMAT_VERSION, "agents_file": self.config.to_dict(), "env_id": self.env_id,
                "num_timesteps": self.num_timesteps, "num_episodes": self.num_episodes,
                "groups": {g.name: {"members": g.members, "steps": g.steps} for g in self.groups.values()},
                "curve": self.curve[-2000:], "successes": self.successes[-2000:]}
        (path / "multiagent.json").write_text(json.dumps(meta, indent=1))
        return path

    @classmethod
    def load(cls, path: str | Path, env: Any = None) -> "MultiAgentTrainer":
        """Rebuild a trainer from ``save(path)``: the same agents file, each group's weights, optimizer,
        normalization and counters (``env`` defaults to the recorded env id)."""
        path = Path(path)
        meta_path = path / "multiagent.json"
        if not meta_path.is_file():
            raise CheckpointError(f"{path}: not a multi-agent checkpoint (no multiagent.json)")
        meta = json.loads(meta_path.read_text())
        if meta.get("format_version") != FORMAT_VERSION:
            raise CheckpointError(f"{meta_path}: format_version {meta.get('format_version')!r}, this tinker reads "
                                  f"{FORMAT_VERSION}")
        trainer = cls(env if env is not None else meta.get("env_id"), AgentsConfig.from_dict(meta["agents_file"]))
        for name, g in trainer.groups.items():
            if name not in meta["groups"]:
                raise CheckpointError(f"{path}: no checkpoint for group {name!r}; it has {sorted(meta['groups'])}")
            load_checkpoint_into(g.algo, path / "groups" / name)
            g.steps = int(meta["groups"][name]["steps"])
        trainer.num_timesteps, trainer.num_episodes = int(meta["num_timesteps"]), int(meta["num_episodes"])
        trainer.curve = [tuple(x) for x in meta["curve"]]  # type: ignore[misc]
        trainer.successes = [bool(x) for x in meta["successes"]]
        return trainer

    def close(self) -> None:
        self.env.close()


def _stack(obs: list[Any]) -> Any:
    if isinstance(obs[0], Mapping):
        return {k: np.stack([np.asarray(o[k]) for o in obs]) for k in obs[0]}
    return np.stack([np.asarray(o) for o in obs])


def _index(obs: Any, i: int) -> Any:
    return {k: v[i] for k, v in obs.items()} if isinstance(obs, Mapping) else obs[i]


def _scalar_action(a: Any) -> Any:
    """A discrete action as a Python int (what PettingZoo envs expect), a continuous one as an array."""
    a = np.asarray(a)
    return int(a) if a.ndim == 0 else a


def train_agents(agents: AgentsConfig | Mapping[str, Any] | str | Path, env: Any = None, *,
                 out_dir: str | Path | None = None, **learn_kwargs: Any) -> MultiAgentTrainer:
    """Build a `MultiAgentTrainer` from an agents file (path, mapping or config) and train it."""
    trainer = MultiAgentTrainer(env, agents)
    t0 = time.perf_counter()
    trainer.learn(out_dir=out_dir, **learn_kwargs)
    log.info("trained %d env steps in %.1f s", trainer.num_timesteps, time.perf_counter() - t0)
    return trainer


__all__ = ["CentralCritic", "MultiAgentTrainer", "train_agents"]
