"""The contract other layers use: deployable parts, export metadata, pipeline roles, external learner APIs."""

from __future__ import annotations

import threading

import gymnasium as gym
import numpy as np
import pytest
import torch

from tinker_core.algos import DQN, PPO, SAC
from tinker_core.pipeline import Pipeline
from tinker_core.spec import Spec
from tinker_core.transition import TransitionBatch


def _deploy_action(algo, obs: np.ndarray) -> np.ndarray:
    parts = algo.deployable_parts()
    with torch.no_grad():
        return parts["actor"](parts["perception"](torch.as_tensor(obs)[None]))[0].numpy()


@pytest.mark.parametrize("cls,env,fixture", [(SAC, "Pendulum-v1", "tiny_sac"), (PPO, "Pendulum-v1", "tiny_ppo"),
                                             (DQN, "CartPole-v1", "tiny_dqn"), (PPO, "CartPole-v1", "tiny_ppo")])
def test_deployable_parts_match_predict_with_folded_normalization(cls, env, fixture, request):
    algo = cls(env, request.getfixturevalue(fixture))
    algo.learn(256, progress=False)
    obs = np.asarray(gym.make(env).reset(seed=5)[0], dtype=np.float32)
    expected = algo.predict(obs, deterministic=True)
    got = _deploy_action(algo, obs)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    if not algo.discrete:
        assert np.all(got >= algo.action_spec.low - 1e-6) and np.all(got <= algo.action_spec.high + 1e-6)
    meta = algo.export_metadata()
    assert meta["obs_spec"] == algo.obs_spec.to_dict()
    assert meta["action_spec"] == algo.action_spec.to_dict()
    assert meta["training_step"] == 256 and meta["env_id"] == env
    assert meta["feature_spec"]["shape"] == [algo.deployable_parts()["perception"](torch.zeros(1, *algo.obs_spec.shape)).shape[1]]
    if algo.obs_norm is not None:
        assert len(meta["normalization"]["obs_mean"]) == algo.obs_spec.shape[0]


def test_deploy_parts_export_to_onnx(tmp_path, tiny_ppo):
    import onnxruntime as ort

    algo = PPO("Pendulum-v1", tiny_ppo)
    algo.learn(128, progress=False)
    parts = algo.deployable_parts()
    model = torch.nn.Sequential(parts["perception"], parts["actor"])
    x = torch.randn(3, 3)
    torch.onnx.export(model, (x,), str(tmp_path / "p.onnx"), opset_version=17, dynamo=False,
                      input_names=["obs"], output_names=["action"], dynamic_axes={"obs": {0: "b"}, "action": {0: "b"}})
    sess = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    out = sess.run(None, {"obs": x.numpy()})[0]
    np.testing.assert_allclose(out, model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cls,fixture", [(DQN, "tiny_dqn"), (PPO, "tiny_ppo")])
def test_swapping_algorithms_is_one_line_in_a_pipeline(cls, fixture, request):
    config = request.getfixturevalue(fixture)
    config.n_envs = 1
    env = gym.make("CartPole-v1")
    algo = cls(env, config)  # the one line that differs
    pipe = Pipeline(seed=0).connect(env, None, algo.policy, algo)
    stats = pipe.run(200)
    assert stats.steps == 200 and algo.num_timesteps == 200
    assert algo.num_updates > 0


def test_train_on_batch_returns_td_errors_for_priorities(tiny_sac):
    algo = SAC((Spec((3,), "float32"), Spec((1,), "float32", -2.0, 2.0)), tiny_sac)
    rng = np.random.default_rng(0)
    n = 16
    batch = TransitionBatch(obs=rng.normal(size=(n, 3)).astype(np.float32),
                            action=rng.uniform(-2, 2, size=(n, 1)).astype(np.float32),
                            reward=rng.normal(size=n).astype(np.float32), terminated=np.zeros(n, bool),
                            truncated=np.zeros(n, bool), next_obs=rng.normal(size=(n, 3)).astype(np.float32))
    before = algo.critic.layers[0].weight.detach().clone()
    out = algo.train_on_batch(batch, weights=np.ones(n, np.float32))
    assert out["td_errors"].shape == (n,) and np.all(out["td_errors"] >= 0)
    assert algo.num_updates == 1 and np.isfinite(out["critic_loss"])
    assert not torch.equal(before, algo.critic.layers[0].weight)


def test_update_from_rollout(tiny_ppo):
    env = gym.make("CartPole-v1")
    algo = PPO(env, tiny_ppo)
    obs, _ = env.reset(seed=0)
    ts = []
    from tinker_core.transition import Transition

    for _ in range(64):
        a = algo.predict(obs, deterministic=False)
        nxt, r, te, tr, _ = env.step(int(a))
        ts.append(Transition(obs, np.asarray(a), float(r), te, tr, {}, nxt))
        obs = nxt if not (te or tr) else env.reset()[0]
    m = algo.update_from_rollout(TransitionBatch.from_transitions(ts))
    assert algo.num_updates > 0 and np.isfinite(m["value_loss"])


def test_control_changes_settings_pauses_and_checkpoints_while_running(tmp_path, tiny_sac):
    algo = SAC("Pendulum-v1", tiny_sac)
    seen = {}

    def cb(a, info):
        if a.num_timesteps == 100:
            a.control.set(lr=1e-5, ent_coef=0.05)
            a.control.checkpoint(str(tmp_path / "hot"))
        if a.num_timesteps == 110:
            seen["lr"] = a.actor_opt.param_groups[0]["lr"]
            seen["ent"] = float(a.log_ent_coef.detach().exp())

    algo.learn(130, progress=False, callback=cb)
    assert seen["lr"] == pytest.approx(1e-5) and seen["ent"] == pytest.approx(0.05)
    assert (tmp_path / "hot" / "meta.json").is_file()
    assert [h.get("set") for h in algo.control.history if "set" in h] == ["lr", "ent_coef"]

    # pause from another thread: no env step happens until resume
    algo.control.pause()
    t = threading.Thread(target=algo.learn, args=(50,), kwargs={"progress": False})
    t.start()
    t.join(0.5)
    assert algo.num_timesteps == 130 and t.is_alive()
    algo.control.resume()
    t.join(60)
    assert algo.num_timesteps == 180


def test_control_rejects_unknown_settings(tiny_dqn):
    from tinker_core.errors import ConfigError

    algo = DQN("CartPole-v1", tiny_dqn)
    with pytest.raises(ConfigError, match="unknown setting"):
        algo.control.set(ent_coef=0.1)
    assert algo.control.handle({"cmd": "set", "lr": -1})["ok"] is False
    assert algo.control.handle({"cmd": "pause"})["paused"] is True
