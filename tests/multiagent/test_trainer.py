"""`MultiAgentTrainer` on tiny budgets: heterogeneous agents (image + vector, discrete + continuous,
PPO + SAC + DQN) all update, save and load; a shared group's parameters are one set; agents that
finish early or join late; a third-party PettingZoo env (mpe2) and the CLI."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from pettingzoo import ParallelEnv

import tinker_sim.multi  # noqa: F401  (registers tinker/ multi-agent ids)
from tinker_core.errors import ConfigError
from tinker_core.multiagent.trainer import MultiAgentTrainer

REPO = Path(__file__).resolve().parents[2]
SMALL_OFF = {"learning_starts": 30, "batch_size": 16, "buffer_size": 2000, "net_arch": [32, 32]}
SMALL_PPO = {"n_steps": 64, "batch_size": 32, "n_epochs": 2, "net_arch": [32, 32]}


def _weights(algo) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in algo.state_dict().items()}


def _changed(before, algo, prefix: str) -> bool:
    after = algo.state_dict()
    return any(not torch.equal(before[k], after[k]) for k in before if k.startswith(prefix))


def test_heterogeneous_dqn_on_images_and_sac_on_vectors_train_save_and_load(tmp_path):
    cfg = {"env": "tinker/BeaconRelay-v0", "seed": 0, "total_timesteps": 120, "agents": {
        "spotter": {"policy": "DQN", "obs_space": {"shape": [36, 36, 3], "dtype": "uint8"},
                    "action_space": {"discrete": 4}, "hyperparameters": {**SMALL_OFF, "target_update_interval": 20}},
        "rover": {"policy": "SAC", "obs_space": [9], "hyperparameters": {**SMALL_OFF, "normalize_obs": True}}}}
    tr = MultiAgentTrainer(None, cfg)
    spotter, rover = tr.algo("spotter"), tr.algo("rover")
    assert type(spotter).__name__ == "DQN" and type(rover).__name__ == "SAC" and spotter is not rover
    before = {"spotter": _weights(spotter), "rover": _weights(rover)}
    tr.learn(progress=False, tensorboard=False, out_dir=tmp_path / "run")
    assert spotter.num_updates > 0 and rover.num_updates > 0
    assert _changed(before["spotter"], spotter, "q_net.") and _changed(before["rover"], rover, "actor.")
    assert spotter.num_timesteps == rover.num_timesteps == 120  # one transition per agent per env step
    assert float(rover.obs_norm.rms.count) > 100  # per-agent observation statistics
    loaded = MultiAgentTrainer.load(tmp_path / "run" / "final")
    for name in ("spotter", "rover"):
        a, b = tr.algo(name).state_dict(), loaded.algo(name).state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    obs, _ = tr.env.reset(seed=7)
    want = tr.act(obs)
    got = loaded.act(obs)
    assert want["spotter"] == got["spotter"] and isinstance(got["spotter"], int)
    np.testing.assert_allclose(want["rover"], got["rover"], atol=1e-6)
    assert (tmp_path / "run" / "learning_curve.png").is_file()
    alone = loaded.evaluate(2, random_agents=("spotter",))  # the rover without its spotter
    assert alone["episodes"] == 2 and 0.0 <= alone["success_rate"] <= 1.0
    tr.close()
    loaded.close()


def test_ppo_on_images_and_ppo_continuous_with_a_centralized_critic(tmp_path):
    cfg = {"env": "tinker/BeaconRelay-v0", "seed": 1, "total_timesteps": 140, "centralized_critic": True, "agents": {
        "spotter": {"policy": "PPO", "hyperparameters": SMALL_PPO},
        "rover": {"policy": "PPO", "hyperparameters": {**SMALL_PPO, "normalize_obs": True, "normalize_reward": True}}}}
    tr = MultiAgentTrainer(None, cfg)
    critic = tr.groups["rover"].critic
    assert critic is not None and critic.net[0].in_features == tr.env.state().size + 1  # global state + member
    before = {n: _weights(tr.algo(n)) for n in ("spotter", "rover")}
    tr.learn(progress=False, tensorboard=False)
    for n in ("spotter", "rover"):
        assert tr.algo(n).num_updates > 0
        assert _changed(before[n], tr.algo(n), "pi."), n
        assert _changed(before[n], tr.algo(n), "central_critic.net."), n
    assert float(tr.algo("rover").reward_norm.rms.count) > 100
    tr.save(tmp_path / "ck")
    again = MultiAgentTrainer.load(tmp_path / "ck")
    assert torch.equal(again.algo("rover").central_critic.net[0].weight, critic.net[0].weight)
    tr.close()
    again.close()


def test_a_group_shares_one_set_of_parameters():
    cfg = {"env": "tinker/SwarmFormation-v0", "env_kwargs": {"n_robots": 4, "max_steps": 20}, "total_timesteps": 40,
           "agents": {"robot_*": {"policy": "PPO", "group": "swarm", "hyperparameters": SMALL_PPO},
                      "robot_3": {"policy": "PPO", "hyperparameters": SMALL_PPO}}}
    tr = MultiAgentTrainer(None, cfg)
    shared = tr.algo("robot_0")
    assert tr.algo("robot_1") is shared and tr.algo("robot_2") is shared and tr.algo("robot_3") is not shared
    assert tr.groups["swarm"].members == ["robot_0", "robot_1", "robot_2"]
    tr.learn(progress=False, tensorboard=False)
    # the shared policy got all three robots' steps, the lone robot its own
    assert shared.num_timesteps == 3 * 40 and tr.algo("robot_3").num_timesteps == 40
    # one update once 64 samples were in: 66 (22 steps x 3 robots), 2 epochs of 3 minibatches; robot_3 has 40
    assert shared.num_updates == 2 * 3 and tr.algo("robot_3").num_updates == 0
    obs = np.full(11, 0.3, dtype=np.float32)
    acts = {a: tr.act({a: obs})[a] for a in ("robot_0", "robot_1", "robot_2", "robot_3")}
    np.testing.assert_array_equal(acts["robot_0"], acts["robot_1"])
    np.testing.assert_array_equal(acts["robot_0"], acts["robot_2"])
    assert not np.allclose(acts["robot_0"], acts["robot_3"], atol=1e-4)
    with torch.no_grad():  # a change to the shared weights is a change for every member, and only for them
        shared.pi.mean[-1].bias.add_(0.25)
    moved = {a: tr.act({a: obs})[a] for a in acts}
    for a in ("robot_0", "robot_1", "robot_2"):
        np.testing.assert_allclose(moved[a], np.clip(acts[a] + 0.25, -1, 1), atol=1e-5)
    np.testing.assert_array_equal(moved["robot_3"], acts["robot_3"])
    tr.close()


class _ComingAndGoing(ParallelEnv):
    """Test double (no shipped env is built to do this on purpose): 'late' joins at step 3, 'early'
    terminates at step 4 while the others go on, 'steady' lasts the 10-step episode."""

    metadata = {"name": "coming_and_going"}

    def __init__(self):
        self.possible_agents = ["steady", "early", "late"]
        self.agents = []

    @functools.lru_cache(maxsize=None)
    def observation_space(self, agent):
        return spaces.Box(-1, 1, (3,), np.float32)

    @functools.lru_cache(maxsize=None)
    def action_space(self, agent):
        return spaces.Discrete(2) if agent == "early" else spaces.Box(-1, 1, (1,), np.float32)

    def _obs(self, a):
        return np.array([self.t / 10, float(a == "late"), 0.5], np.float32)

    def reset(self, seed=None, options=None):
        self.t = 0
        self.agents = ["steady", "early"]
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        if set(actions) != set(self.agents):
            raise RuntimeError(f"actions for {sorted(actions)}, live agents {sorted(self.agents)}")
        self.t += 1
        live = list(self.agents)
        term = {a: a == "early" and self.t == 4 for a in live}
        trunc = {a: self.t == 10 for a in live}
        obs = {a: self._obs(a) for a in live}
        rew = {a: 1.0 for a in live}
        self.agents = [a for a in live if not (term[a] or trunc[a])]
        if self.t == 3:
            self.agents.append("late")
            obs["late"] = self._obs("late")
        return obs, rew, term, trunc, {a: {} for a in obs}


def test_agents_that_finish_early_or_join_late_do_not_break_batching():
    cfg = {"seed": 0, "agents": {"steady": {"policy": "PPO", "group": "cont", "hyperparameters": SMALL_PPO},
                                 "late": {"policy": "PPO", "group": "cont", "hyperparameters": SMALL_PPO},
                                 "early": {"policy": "DQN", "hyperparameters": SMALL_OFF}}}
    tr = MultiAgentTrainer(_ComingAndGoing(), cfg)
    tr.learn(100, progress=False, tensorboard=False)
    assert tr.num_episodes == 10
    # agent-steps per episode: steady 10, late 7 (steps 4..10), early 4
    assert tr.algo("steady").num_timesteps == 10 * (10 + 7)
    assert tr.algo("early").num_timesteps == 10 * 4
    assert tr.algo("steady").num_updates > 0 and tr.algo("early").num_updates > 0
    tr.close()


def test_a_third_party_pettingzoo_env_trains_without_an_adapter():
    pytest.importorskip("mpe2")
    cfg = {"env": "mpe2.simple_spread_v3:parallel_env", "env_kwargs": {"N": 3, "max_cycles": 25},
           "total_timesteps": 100, "centralized_critic": True,
           "agents": {"agent_*": {"policy": "PPO", "group": "spread", "obs_space": [18], "action_space": {"discrete": 5},
                                  "hyperparameters": SMALL_PPO}}}
    tr = MultiAgentTrainer(None, cfg)
    tr.learn(progress=False, tensorboard=False)
    assert tr.algo("agent_0").num_updates > 0 and tr.num_episodes == 4
    tr.close()


def test_spaces_are_checked_against_the_env():
    cfg = {"env": "tinker/BeaconRelay-v0", "agents": {"spotter": {"policy": "DQN", "hyperparameters": SMALL_OFF},
                                                       "rover": {"policy": "SAC", "obs_space": [10]}}}
    with pytest.raises(ConfigError, match=r"^agents.rover.obs_space: expected shape \[10\], the env gives \[9\]$"):
        MultiAgentTrainer(None, cfg)
    cfg["agents"]["rover"] = {"policy": "DQN", "hyperparameters": SMALL_OFF}
    with pytest.raises(ConfigError, match=r"^agents.rover.policy: DQN cannot act in Box"):
        MultiAgentTrainer(None, cfg)
    cfg["agents"] = {"spotter": {"policy": "PPO", "group": "g"}, "rover": {"policy": "PPO", "group": "g"}}
    with pytest.raises(ConfigError, match=r"^agents.rover.group: group 'g' shares one policy, so its agents need the "
                                          r"same spaces; rover has Box"):
        MultiAgentTrainer(None, cfg)


def test_tinker_train_takes_an_agents_file(tmp_path):
    agents = tmp_path / "agents.yaml"
    agents.write_text("env: tinker/BeaconRelay-v0\nagents:\n  spotter: {policy: PPO, hyperparameters: {n_steps: 32, "
                      "batch_size: 16, n_epochs: 1}}\n  rover: {policy: PPO, hyperparameters: {n_steps: 32, "
                      "batch_size: 16, n_epochs: 1}}\n")
    out = tmp_path / "run"
    from tinker_cli import main  # in process: a subprocess would spend most of the test importing

    assert main(["train", "--config", str(agents), "--total-timesteps", "70", "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["timesteps"] == 70 and summary["groups"]["rover"]["updates"] == 2 * 2  # 2 rollouts of 2 minibatches
    assert (out / "final" / "multiagent.json").is_file() and (out / "agents.yaml").is_file()
    # and continues from its checkpoint up to the new total
    assert main(["train", "--resume", str(out / "final"), "--total-timesteps", "100", "--out", str(tmp_path / "more"),
                 "--no-progress"]) == 0
    more = json.loads((tmp_path / "more" / "summary.json").read_text())
    # the counters continue; the 30 new steps do not fill a 32-step rollout (one in flight is not checkpointed)
    assert more["timesteps"] == 100 and more["groups"]["rover"]["updates"] == 2 * 2
