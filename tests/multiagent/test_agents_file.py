"""The agents file: round trip, and errors that name the agent and the field (messages pinned)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tinker_core.errors import ConfigError
from tinker_core.multiagent.agents_file import AgentsConfig, SpaceSpec, dump_agents_file, load_agents_file

REPO = Path(__file__).resolve().parents[2]

ISSUE_EXAMPLE = {"agents": {"robot1": {"policy": "PPO", "obs_space": [84, 84, 3]},
                            "robot2": {"policy": "DQN", "obs_space": [10]}}}


@pytest.mark.parametrize("name", ["agents_swarm.yaml", "agents_beacon.yaml", "fleet_reach.yaml"])
def test_round_trip_of_the_shipped_files(tmp_path, name):
    first = load_agents_file(REPO / "configs" / name)
    dump_agents_file(first, tmp_path / name)
    second = load_agents_file(tmp_path / name)
    assert second == first
    assert AgentsConfig.from_dict(first.to_dict()) == first


def test_the_issue_example_parses_and_round_trips(tmp_path):
    cfg = AgentsConfig.from_dict(ISSUE_EXAMPLE)
    assert cfg.agents["robot1"].obs_space == SpaceSpec(shape=(84, 84, 3))
    assert cfg.agents["robot2"].policy == "DQN" and cfg.agents["robot2"].group_name == "robot2"
    dump_agents_file(cfg, tmp_path / "a.yaml")
    assert load_agents_file(tmp_path / "a.yaml") == cfg
    changed = AgentsConfig.from_dict({"agents": {**ISSUE_EXAMPLE["agents"], "robot2": {"policy": "SAC"}}})
    assert changed != cfg  # the comparison can fail


def _agents(**entries):
    return {"agents": entries}


@pytest.mark.parametrize("data, message", [
    (_agents(robot1={"policy": "A2C"}), "agents.robot1.policy: expected one of PPO, SAC, DQN, got 'A2C'"),
    (_agents(robot1={"bundle": 3}), "agents.robot1.bundle: expected a bundle directory path, got 3"),
    (_agents(robot2={"obs_space": [10, -1]}),
     "agents.robot2.obs_space: expected a list of positive integers like [84, 84, 3], got [10, -1]"),
    (_agents(robot1={"action_space": {"discrete": 0}}),
     "agents.robot1.action_space.discrete: expected a number of actions >= 1, got 0"),
    (_agents(robot1={"obs_space": {"shape": [3], "dtype": "floaty"}}),
     "agents.robot1.obs_space.dtype: expected a numpy dtype name like float32, got 'floaty'"),
    (_agents(robot1={"policy": "PPO", "hyperparameters": {"lr": 0.1}}),
     "agents.robot1.hyperparameters: unknown key(s) ['lr'] for PPOConfig"),
    (_agents(robot1={"policy": "SAC", "hyperparameters": {"gamma": 2.0}}),
     "agents.robot1.hyperparameters: gamma: expected 0 <= gamma <= 1, got 2.0"),
    (_agents(robot1={"policy": "PPO", "speed": 3}), "agents.robot1: unknown key(s) ['speed']"),
    (_agents(robot1={"perception": "resnet"}), "agents.robot1.perception: expected 'auto' or one of"),
    (_agents(robot1={"group": ""}), "agents.robot1.group: expected a non-empty name, got ''"),
    (_agents(robot1={"policy": "DQN", "action_space": [2]}),
     "agents.robot1.action_space: DQN needs a discrete action space, got [2]"),
    (_agents(robot1={"policy": "SAC", "action_space": {"discrete": 3}}),
     "agents.robot1.action_space: SAC needs a continuous (Box) action space, got {'discrete': 3}"),
    (_agents(a={"policy": "PPO", "group": "g"}, b={"policy": "SAC", "group": "g"}),
     "agents.b.policy: group 'g' shares one policy, so it needs the same policy as a ('PPO'), got 'SAC'"),
    (_agents(a={"group": "g", "hyperparameters": {"n_steps": 64}}, b={"group": "g"}),
     "agents.b.hyperparameters: group 'g' shares one policy, so it needs the same hyperparameters as a"),
    ({"agents": {}}, "agents file: 'agents' must map agent names to their settings, got {}"),
    ({**ISSUE_EXAMPLE, "centralised": True}, "agents file: unknown top-level key(s) ['centralised']"),
    ({**ISSUE_EXAMPLE, "total_timesteps": 0}, "total_timesteps: expected an integer >= 1, got 0"),
])
def test_errors_name_the_agent_and_the_field(data, message):
    with pytest.raises(ConfigError) as e:
        AgentsConfig.from_dict(data)
    assert str(e.value).startswith(message), str(e.value)


def test_patterns_resolve_and_exact_names_win():
    cfg = AgentsConfig.from_dict(_agents(**{"robot_*": {"policy": "PPO", "group": "swarm"},
                                            "robot_2": {"policy": "SAC"}}))
    got = cfg.resolve(["robot_0", "robot_1", "robot_2"])
    assert [got[a].name for a in ("robot_0", "robot_1", "robot_2")] == ["robot_*", "robot_*", "robot_2"]
    with pytest.raises(ConfigError, match=r"^agents: the env has an agent 'drone_0' that no entry names or matches"):
        cfg.resolve(["robot_0", "robot_2", "drone_0"])
    with pytest.raises(ConfigError, match=r"^agents.robot_2: the env has no agent of that name"):
        cfg.resolve(["robot_0"])


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="file not found"):
        load_agents_file(tmp_path / "nope.yaml")
