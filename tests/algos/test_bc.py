"""BC + DAgger on tiny budgets: it learns the expert, DAgger labels the learner's own states, export parity,
checkpoints, the sorting-accuracy figure of eval, and the ``tinker train`` wiring with the scripted sort expert."""

from __future__ import annotations

import copy
import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from tinker_core.algos import BC, BCConfig, load_algorithm
from tinker_cli import main
from tinker_core.errors import ConfigError, SpecError, ValidationError


def pendulum_expert(obs: np.ndarray) -> np.ndarray:
    """A smooth stateless controller for Pendulum-v1 (torque in [-2, 2]): what BC must reproduce."""
    cos, sin, w = np.asarray(obs, dtype=np.float64)
    return np.clip([-2.0 * sin - 0.4 * w + 0.5 * cos], -2.0, 2.0).astype(np.float32)


class CountingExpert:
    """pendulum_expert with the optional reset() of a stateful expert, counting both calls."""

    def __init__(self, env):
        self.env, self.calls, self.resets = env, 0, 0

    def reset(self) -> None:
        self.resets += 1

    def act(self, obs):
        self.calls += 1
        return pendulum_expert(obs)


def _expert_states(seed: int) -> np.ndarray:
    """States of a held-out expert episode: the distribution imitation is judged on."""
    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=seed)
    out = []
    for _ in range(200):
        out.append(obs)
        obs, *_ = env.step(pendulum_expert(obs))
    return np.array(out, dtype=np.float32)


def _states(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    th, w = rng.uniform(-np.pi, np.pi, n), rng.uniform(-8.0, 8.0, n)
    return np.stack([np.cos(th), np.sin(th), w], 1).astype(np.float32)


def _mse_to_expert(algo: BC, states: np.ndarray) -> float:
    want = np.stack([pendulum_expert(s) for s in states])
    return float(np.mean((algo.predict(states) - want) ** 2))


def tiny(**kw) -> BCConfig:
    return BCConfig(**{"expert_episodes": 3, "dagger_rounds": 1, "dagger_episodes": 1, "gradient_steps": 400,
                       "batch_size": 64, "net_arch": [64, 64], "learning_rate": 1e-3, "seed": 0, "log_interval": 200,
                       **kw})


def test_bc_learns_the_expert_on_a_tiny_budget():
    algo = BC("Pendulum-v1", tiny(), expert=lambda env: pendulum_expert)
    states = np.concatenate([_expert_states(100), _expert_states(101)])
    before = _mse_to_expert(algo, states)
    algo.learn(10_000, progress=False, tensorboard=False)
    after = _mse_to_expert(algo, states)
    assert algo.episodes_labelled == 4 and algo.num_timesteps == 800  # the schedule, not total_timesteps, ended it
    assert [r["round"] for r in algo.round_log] == [0, 1] and algo.round_log[1]["dataset"] == 800
    assert after < 0.05 * before and after < 0.02, (before, after)


def test_dagger_labels_the_states_the_learner_visits():
    experts: list[CountingExpert] = []

    def factory(env):
        experts.append(CountingExpert(env))
        return experts[-1]

    # no expert round and beta 0: the untrained learner alone drives one episode
    config = tiny(expert_episodes=0, dagger_episodes=1, beta=0.0, gradient_steps=5)
    algo = BC("Pendulum-v1", config, expert=factory)
    untrained = BC("Pendulum-v1", copy.deepcopy(config))  # same seed: the same initial weights
    algo.learn(10_000, progress=False, tensorboard=False)
    data = algo.dataset.tensors()
    assert len(data["actions"]) == 200 and experts[0].calls == 200
    assert experts[0].resets == 2  # at the start and after the episode
    # every visited state is labelled with the expert's action (stored in [-1, 1]: torque / 2)
    labels = np.stack([pendulum_expert(o) for o in data["obs"]]) / 2.0
    np.testing.assert_allclose(data["actions"], labels, atol=1e-6)
    # ... and the states are the learner's own trajectory, not the expert's
    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    visited = []
    for _ in range(200):
        visited.append(obs)
        obs, *_ = env.step(untrained.predict(obs))
    np.testing.assert_allclose(data["obs"], np.array(visited), atol=1e-5)
    expert_path = [env.reset(seed=0)[0]]
    for _ in range(20):
        expert_path.append(env.step(pendulum_expert(expert_path[-1]))[0])
    assert not np.allclose(data["obs"][:21], np.array(expert_path), atol=1e-3)


def test_beta_mixes_expert_and_learner_and_decays():
    algo = BC("Pendulum-v1", tiny(beta=0.5, beta_decay=0.5, dagger_rounds=3), expert=lambda env: pendulum_expert)
    assert [algo.beta_for(r) for r in range(4)] == [1.0, 0.5, 0.25, 0.125]


def test_deployable_parts_match_predict_and_export_to_onnx(tmp_path):
    import onnxruntime as ort

    algo = BC("Pendulum-v1", tiny(normalize_obs=True, gradient_steps=50), expert=lambda env: pendulum_expert)
    algo.learn(10_000, progress=False, tensorboard=False)
    parts = algo.deployable_parts()
    model = torch.nn.Sequential(parts["perception"], parts["actor"])
    x = torch.as_tensor(_states(16, seed=3))
    expected = algo.predict(x.numpy())
    np.testing.assert_allclose(model(x).numpy(), expected, rtol=1e-5, atol=1e-5)
    assert np.all(np.abs(expected) <= 2.0 + 1e-6)
    path = tmp_path / "bc.onnx"
    torch.onnx.export(model, (x,), str(path), opset_version=17, dynamo=False, input_names=["obs"],
                      output_names=["action"], dynamic_axes={"obs": {0: "b"}, "action": {0: "b"}})
    out = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"obs": x.numpy()})[0]
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    meta = algo.export_metadata()
    assert meta["algo"] == "bc" and meta["normalization"] is not None and meta["env_id"] == "Pendulum-v1"


def test_checkpoint_round_trip_keeps_policy_and_schedule(tmp_path):
    algo = BC("Pendulum-v1", tiny(gradient_steps=50, keep_dataset=True), expert=lambda env: pendulum_expert)
    algo.learn(10_000, progress=False, tensorboard=False)
    algo.save(tmp_path / "ck")
    back = load_algorithm(tmp_path / "ck")
    states = _states(32)
    np.testing.assert_array_equal(back.predict(states), algo.predict(states))
    assert (back.episodes_labelled, back.round, len(back.dataset)) == (4, 2, 800)
    assert back.round_log == algo.round_log


def test_bad_config_and_missing_expert_are_reported():
    with pytest.raises(ConfigError, match=r"beta: expected 0 <= beta <= 1, got 1.5"):
        BCConfig(beta=1.5)
    with pytest.raises(ConfigError, match=r"expected >= 1 labelled episode"):
        BCConfig(expert_episodes=0, dagger_rounds=0)
    with pytest.raises(ConfigError, match=r"action_weights: expected 1 weights"):
        BC("Pendulum-v1", tiny(action_weights=[1.0, 2.0]))
    with pytest.raises(SpecError, match="continuous"):
        BC("CartPole-v1", tiny())
    algo = BC("Pendulum-v1", tiny())
    with pytest.raises(ConfigError, match="no expert"):
        algo.learn(100, progress=False, tensorboard=False)
    algo.set_expert(lambda env: (lambda obs: np.zeros(2, np.float32)))
    with pytest.raises(ValidationError, match="BC expert"):
        algo.learn(100, progress=False, tensorboard=False)


def test_tinker_train_bc_on_arm_sort_with_the_scripted_expert(tmp_path):
    import tinker_sim as sim  # noqa: F401  (tinker/ ids)
    from tinker_sim.scripted import ScriptedSortController
    from tinker_cli._compose import make_env
    from tinker_core.evaluate import evaluate

    cfg = tmp_path / "bc.yaml"
    cfg.write_text("algo: bc\nenv: tinker/ArmSort-v0\nexpert: tinker_sim.scripted:ScriptedSortController\n"
                   "total_timesteps: 5000\nenv_kwargs:\n  randomize: true\n"
                   "bc:\n  expert_episodes: 1\n  dagger_rounds: 1\n  dagger_episodes: 1\n  gradient_steps: 20\n"
                   "  net_arch: [32, 32]\n  log_interval: 100\n")
    out = tmp_path / "run"
    assert main(["train", "--config", str(cfg), "--out", str(out), "--no-progress"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["algo"] == "bc" and summary["episodes_labelled"] == 2
    assert summary["expert_calls"] == summary["timesteps"] > 0
    assert load_algorithm(out / "final").round == 2

    # eval's sorting figure: objects in the right bin / objects (the scripted expert, 2 episodes, safety on)
    env = make_env("tinker/ArmSort-v0", safety=True)
    try:
        ctl = ScriptedSortController(env)
        policy = type("P", (), {"reset": lambda self: ctl.reset(), "__call__": lambda self, o: ctl.act(o)})()
        res = evaluate(env, policy, 2, seed=1000)
    finally:
        env.close()
    d = res.to_dict()
    assert d["objects_total"] == 4 and d["objects_sorted"] == sum(r["objects_sorted"] for r in res.per_episode)
    assert d["objects_sorted_rate"] == d["objects_sorted"] / 4 and d["objects_ci_low"] <= d["objects_sorted_rate"]
    assert "objects sorted" in res.format()


def test_eval_result_has_no_sorting_keys_for_other_tasks():
    env = gym.make("Pendulum-v1")
    from tinker_core.evaluate import evaluate

    d = evaluate(env, pendulum_expert, 1).to_dict()
    assert "objects_sorted_rate" not in d and d["episodes"] == 1


def test_tinker_eval_reports_sorting_accuracy_of_the_shipped_arm_sort_bundle(capsys):
    assert main(["eval", "--env", "tinker/ArmSort-v0", "--episodes", "2", "--json"]) == 0
    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert d["policy"].endswith("pretrained/arm_sort/bundle") and d["objects_total"] == 4
    assert d["objects_sorted_rate"] == d["objects_sorted"] / 4 >= 0.5
    assert d["ci_low"] <= d["success_rate"] <= d["ci_high"]
