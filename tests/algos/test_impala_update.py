"""IMPALA's learner update on a real batch (CartPole trajectories acted by the learner's own policy): the default
is IMPALA's one gradient step per batch, ``n_epochs`` / ``minibatch_size`` make it PPO's several passes in
minibatches (as asynchronous PPO), and the metrics that show a collapsing policy (entropy, the share of each action
sampled and of each action as the greedy choice, value loss, mean rho)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from tinker_core.algos import IMPALA, IMPALAConfig
from tinker_core.algos.vtrace import vtrace
from tinker_core.errors import ConfigError
from tinker_core.impala.trajectory import Trajectory, TrajectoryBatch


def collect(algo: IMPALA, T: int = 16, n_envs: int = 2, seed: int = 0, trajectories: int = 2) -> list[Trajectory]:
    """``trajectories`` unrolls of ``T`` steps in ``n_envs`` real CartPole envs, acted by ``algo``'s policy."""
    envs = [gym.make("CartPole-v1") for _ in range(n_envs)]
    obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(envs)])
    out = []
    for _ in range(trajectories):
        o_l, n_l, a_l, lp_l, r_l, te_l, tr_l = [], [], [], [], [], [], []
        for _ in range(T):
            env_a, raw, logp = algo.act_logp(obs)
            nxt, rew, te, tr = [], [], [], []
            for i, e in enumerate(envs):
                o2, r, t1, t2, _ = e.step(int(env_a[i]))
                nxt.append(o2)
                rew.append(r)
                te.append(t1)
                tr.append(t2)
            nxt_arr = np.stack(nxt).astype(np.float32)
            o_l.append(obs)
            n_l.append(nxt_arr)
            a_l.append(raw)
            lp_l.append(logp)
            r_l.append(rew)
            te_l.append(te)
            tr_l.append(tr)
            obs = np.stack([e.reset()[0] if (te[i] or tr[i]) else nxt_arr[i] for i, e in enumerate(envs)])
        out.append(Trajectory(np.stack(o_l).astype(np.float32), np.stack(a_l), np.asarray(r_l, np.float32),
                              np.asarray(te_l), np.asarray(tr_l), np.stack(lp_l).astype(np.float32),
                              np.stack(n_l), policy_version=-1))
    return out


def make(**kw) -> IMPALA:
    return IMPALA("CartPole-v1", IMPALAConfig(seed=0, torch_threads=1, log_interval=10**9, **kw))


def test_the_default_is_impalas_one_gradient_step_on_the_whole_batch():
    """n_epochs 1, minibatch_size 0: the update is the V-trace actor-critic loss of the whole batch, one Adam step
    (written out here), so the default learner is IMPALA's as before these settings existed."""
    algo = make(learning_rate=1e-3)
    trajs = collect(algo)
    ref = make(learning_rate=1e-3)
    ref.load_state_dict(algo.state_dict())  # both with a fresh Adam
    m = algo.update_from_trajectories(trajs)
    assert m["gradient_steps"] == 1.0

    c = ref.config
    b = TrajectoryBatch.of(trajs)
    T, B = b.shape
    obs = torch.as_tensor(b.obs.reshape(T * B, -1))
    act = torch.as_tensor(b.actions.reshape(-1)).long()
    logp, ent = ref.pi.log_prob_entropy(ref.perception(obs), act)
    values = ref.vf(ref.perception(obs)).reshape(T, B)
    with torch.no_grad():
        nv = ref.vf(ref.perception(torch.as_tensor(b.next_obs.reshape(T * B, -1)))).reshape(T, B)
    term = torch.as_tensor(b.terminated, dtype=torch.float32)
    ends = torch.maximum(term, torch.as_tensor(b.truncated, dtype=torch.float32))
    vt = vtrace(torch.as_tensor(b.behaviour_log_probs), logp.detach().reshape(T, B), torch.as_tensor(b.rewards),
                values.detach(), nv, c.gamma * (1 - term), ends)
    loss = (-(logp.reshape(T, B) * vt.pg_advantages).mean() + c.vf_coef * 0.5 * (vt.vs - values).square().mean()
            - c.ent_coef * ent.mean())
    ref.opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(ref.parameters(), c.max_grad_norm)
    ref.opt.step()
    for (name, p), q in zip(algo.named_parameters(), ref.parameters()):
        assert torch.allclose(p, q, atol=1e-6), name
    assert m["value_loss"] == pytest.approx(float(0.5 * (vt.vs - values.detach()).square().mean()), rel=1e-5)


def test_epochs_and_minibatches_and_the_collapse_metrics():
    algo = make(policy_loss="clip", n_epochs=3, minibatch_size=16)
    trajs = collect(algo)  # 2 trajectories x 16 steps x 2 envs = 64 steps
    acts = np.concatenate([t.actions.reshape(-1) for t in trajs])
    m = algo.update_from_trajectories(trajs)
    assert m["gradient_steps"] == 3 * 4
    assert algo.num_timesteps == 64 and algo.num_updates == 1
    assert [m["action_frac_0"], m["action_frac_1"]] == pytest.approx(list(np.bincount(acts, minlength=2) / 64))
    assert m["greedy_frac_0"] + m["greedy_frac_1"] == pytest.approx(1.0)
    assert 0.0 <= m["clip_fraction"] <= 1.0 and 0.0 < m["entropy"] <= np.log(2) + 1e-6
    assert m["rho_mean"] == pytest.approx(1.0, abs=1e-5)  # the learner acted the batch itself: on-policy
    assert algo.inner_env_steps == 64  # CartPole counts no inner steps: one per step


def test_several_epochs_raise_the_surrogate_within_the_clip():
    """PPO's epochs on one batch move the policy towards the actions with a positive (standardized) advantage:
    the unclipped surrogate mean(ratio * A) starts at 0 (on-policy) and ends above it."""
    algo = make(policy_loss="clip", n_epochs=8, minibatch_size=32, learning_rate=1e-3, ent_coef=0.0)
    trajs = collect(algo, T=32)
    b = TrajectoryBatch.of(trajs)
    T, B = b.shape
    obs = torch.as_tensor(b.obs.reshape(T * B, -1))
    act = torch.as_tensor(b.actions.reshape(-1)).long()
    from tinker_core.algos.impala import clip_advantages

    with torch.no_grad():
        feat = algo.perception(obs)
        v = algo.vf(feat).reshape(T, B)
        nv = algo.vf(algo.perception(torch.as_tensor(b.next_obs.reshape(T * B, -1)))).reshape(T, B)
        term = torch.as_tensor(b.terminated, dtype=torch.float32)
        ends = torch.maximum(term, torch.as_tensor(b.truncated, dtype=torch.float32))
        lp = torch.as_tensor(b.behaviour_log_probs)
        vt = vtrace(lp, lp, torch.as_tensor(b.rewards), v, nv, algo.config.gamma * (1 - term), ends)
        adv = clip_advantages(vt.vs, nv, v, torch.as_tensor(b.rewards), algo.config.gamma * (1 - term), ends).reshape(-1)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    algo.update_from_trajectories(trajs)
    with torch.no_grad():
        logp, _ = algo.pi.log_prob_entropy(algo.perception(obs), act)
        ratio = (logp - lp.reshape(-1)).exp()
    assert float((ratio * adv).mean()) > 0.01
    assert float((ratio - 1).abs().max()) > 0.0


def test_config_errors_name_the_setting():
    with pytest.raises(ConfigError, match="IMPALAConfig.n_epochs: expected >= 1"):
        IMPALAConfig(n_epochs=0)
    with pytest.raises(ConfigError, match="IMPALAConfig.minibatch_size: expected >= 0"):
        IMPALAConfig(minibatch_size=-1)
