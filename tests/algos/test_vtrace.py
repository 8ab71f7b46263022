"""V-trace against a reference computation: the paper's sum formula written out in plain Python loops."""

from __future__ import annotations

import math
import random

import pytest
import torch

from tinker_core.algos.vtrace import next_values_of, vtrace
from tinker_core.errors import ConfigError


def reference(blp, tlp, r, v, nv, disc, ends, rho_bar, c_bar, pg_rho_bar, lam=1.0):
    """Eq. (1) of Espeholt et al. 2018 as a nested sum, per trajectory, in Python floats:
    v_s = V(x_s) + sum_{t=s}^{e} (prod_{i=s}^{t-1} gamma_i c_i) delta_t, where e is the first episode
    end at or after s (or the window's last step); advantages use v_{s+1} inside an episode and
    V(x'_s) at an end or the window's last step."""
    T, B = len(r), len(r[0])
    vs = [[0.0] * B for _ in range(T)]
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        ratio = [math.exp(tlp[t][b] - blp[t][b]) for t in range(T)]
        rho = [min(rho_bar, x) for x in ratio]
        c = [lam * min(c_bar, x) for x in ratio]
        delta = [rho[t] * (r[t][b] + disc[t][b] * nv[t][b] - v[t][b]) for t in range(T)]
        for s in range(T):
            total, coef = 0.0, 1.0
            for t in range(s, T):
                total += coef * delta[t]
                if ends[t][b]:
                    break
                coef *= disc[t][b] * c[t]
            vs[s][b] = v[s][b] + total
        for s in range(T):
            nxt = nv[s][b] if (ends[s][b] or s == T - 1) else vs[s + 1][b]
            adv[s][b] = min(pg_rho_bar, ratio[s]) * (r[s][b] + disc[s][b] * nxt - v[s][b])
    return vs, adv


def random_case(seed: int, T: int = 12, B: int = 3, spread: float = 0.7):
    g = random.Random(seed)
    gamma = 0.97
    blp = [[math.log(g.uniform(0.05, 0.95)) for _ in range(B)] for _ in range(T)]
    tlp = [[blp[t][b] + g.uniform(-spread, spread) for b in range(B)] for t in range(T)]
    r = [[g.uniform(-1, 1) for _ in range(B)] for _ in range(T)]
    v = [[g.uniform(-2, 2) for _ in range(B)] for _ in range(T)]
    term = [[False] * B for _ in range(T)]
    trunc = [[False] * B for _ in range(T)]
    # several episode ends: terminations and truncations at fixed places, one in the last step
    for t, b in ((2, 0), (7, 0), (4, 1), (T - 1, 2)):
        term[t][b] = True
    for t, b in ((9, 1), (5, 2)):
        trunc[t][b] = True
    end_v = [[g.uniform(-2, 2) for _ in range(B)] for _ in range(T)]  # V of each ended episode's last obs
    boot = [g.uniform(-2, 2) for _ in range(B)]
    ends = [[term[t][b] or trunc[t][b] for b in range(B)] for t in range(T)]
    nv = [[(end_v[t][b] if ends[t][b] else (v[t + 1][b] if t + 1 < T else boot[b])) for b in range(B)]
          for t in range(T)]
    disc = [[0.0 if term[t][b] else gamma for b in range(B)] for t in range(T)]
    return dict(blp=blp, tlp=tlp, r=r, v=v, nv=nv, disc=disc, ends=ends, boot=boot, end_v=end_v, gamma=gamma,
                term=term, trunc=trunc)


def tensors(case):
    t = lambda x: torch.tensor(x, dtype=torch.float64)
    return dict(behaviour_log_probs=t(case["blp"]), target_log_probs=t(case["tlp"]), rewards=t(case["r"]),
                values=t(case["v"]), next_values=t(case["nv"]), discounts=t(case["disc"]),
                episode_ends=torch.tensor(case["ends"]))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rho_bar,c_bar,pg_rho_bar", [(1.0, 1.0, 1.0), (1.5, 0.8, 2.0), (float("inf"), 1.0, 0.5)])
def test_matches_the_written_out_formula(seed, rho_bar, c_bar, pg_rho_bar):
    case = random_case(seed)
    out = vtrace(**tensors(case), rho_bar=rho_bar, c_bar=c_bar, pg_rho_bar=pg_rho_bar)
    vs, adv = reference(case["blp"], case["tlp"], case["r"], case["v"], case["nv"], case["disc"], case["ends"],
                        rho_bar, c_bar, pg_rho_bar)
    assert torch.allclose(out.vs, torch.tensor(vs, dtype=torch.float64), atol=1e-6, rtol=0)
    assert torch.allclose(out.pg_advantages, torch.tensor(adv, dtype=torch.float64), atol=1e-6, rtol=0)


def test_lambda_scales_the_trace():
    case = random_case(5)
    out = vtrace(**tensors(case), rho_bar=1.2, c_bar=0.9, lambda_=0.6)
    vs, _ = reference(case["blp"], case["tlp"], case["r"], case["v"], case["nv"], case["disc"], case["ends"],
                      1.2, 0.9, 1.2, lam=0.6)
    assert torch.allclose(out.vs, torch.tensor(vs, dtype=torch.float64), atol=1e-6, rtol=0)


def test_on_policy_reduces_to_n_step_returns():
    """Behaviour == target (rho = c = 1): v_s is the discounted reward sum to the episode's end (or the
    window's end) plus the discounted bootstrap there: the n-step / lambda=1 return."""
    case = random_case(3)
    case["tlp"] = [row[:] for row in case["blp"]]
    out = vtrace(**tensors(case))
    T, B = len(case["r"]), len(case["r"][0])
    for b in range(B):
        for s in range(T):
            ret, disc = 0.0, 1.0
            for t in range(s, T):
                ret += disc * case["r"][t][b]
                disc *= case["disc"][t][b]
                if case["ends"][t][b] or t == T - 1:
                    ret += disc * case["nv"][t][b]  # 0 after a termination, V(last obs) after a truncation
                    break
            assert out.vs[s, b].item() == pytest.approx(ret, abs=1e-6)
            # on-policy advantage: the n-step return from s+1 bootstrapped into a one-step TD
            assert out.pg_advantages[s, b].item() == pytest.approx(ret - case["v"][s][b], abs=1e-6)
    assert torch.all(out.rhos == 1.0) and torch.all(out.cs == 1.0)


def test_truncation_clips_the_importance_weights():
    case = random_case(4, spread=3.0)  # ratios from e^-3 to e^3
    ins = tensors(case)
    ratio = (ins["target_log_probs"] - ins["behaviour_log_probs"]).exp()
    assert (ratio > 1.5).any() and (ratio < 0.5).any()
    out = vtrace(**ins, rho_bar=1.0, c_bar=0.5)
    assert float(out.rhos.max()) == pytest.approx(1.0)
    assert torch.equal(out.rhos, torch.minimum(ratio, torch.tensor(1.0, dtype=ratio.dtype)))
    assert torch.equal(out.cs, torch.minimum(ratio, torch.tensor(0.5, dtype=ratio.dtype)))
    unclipped = vtrace(**ins, rho_bar=float("inf"), c_bar=float("inf"))
    assert float(unclipped.rhos.max()) > 1.5
    assert not torch.allclose(out.vs, unclipped.vs)  # the clipping changes the targets


def test_episode_end_cuts_the_trace():
    """Changing anything after an episode end leaves the targets before it unchanged."""
    case = random_case(6)
    a = vtrace(**tensors(case))
    for t in range(3, 12):
        case["r"][t][0] += 10.0  # trajectory 0 terminated at step 2
    b = vtrace(**tensors(case))
    assert torch.equal(a.vs[:3, 0], b.vs[:3, 0])
    assert not torch.allclose(a.vs[3:, 0], b.vs[3:, 0])


def test_next_values_of_bootstraps_at_truncation():
    case = random_case(7)
    t = torch.tensor
    nv = next_values_of(t(case["v"], dtype=torch.float64), t(case["boot"], dtype=torch.float64),
                        t(case["end_v"], dtype=torch.float64), t(case["ends"]))
    assert torch.allclose(nv, t(case["nv"], dtype=torch.float64))


def test_bad_shapes_are_named():
    ins = tensors(random_case(0))
    ins["values"] = ins["values"][:-1]
    with pytest.raises(ConfigError, match=r"vtrace.values: expected shape \(12, 3\)"):
        vtrace(**ins)
    with pytest.raises(ConfigError, match="vtrace.c_bar: expected > 0"):
        vtrace(**tensors(random_case(0)), c_bar=0.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_clip_advantages_are_the_vtrace_advantages_without_their_weight(seed):
    """IMPALA's ``policy_loss: clip`` uses r + gamma v' - V(x); times min(pg_rho_bar, pi/mu) that is V-trace's
    policy-gradient advantage (the reference formula above), at episode ends and the window's last step too."""
    from tinker_core.algos.impala import clip_advantages

    case = random_case(seed, spread=1.5)
    ins = tensors(case)
    out = vtrace(**ins, pg_rho_bar=1.3)
    adv = clip_advantages(out.vs, ins["next_values"], ins["values"], ins["rewards"], ins["discounts"],
                          ins["episode_ends"])
    ratio = (ins["target_log_probs"] - ins["behaviour_log_probs"]).exp()
    _, ref = reference(case["blp"], case["tlp"], case["r"], case["v"], case["nv"], case["disc"], case["ends"],
                       1.0, 1.0, 1.3)
    assert torch.allclose(adv * ratio.clamp(max=1.3), torch.tensor(ref, dtype=torch.float64), atol=1e-9)
    assert not torch.allclose(adv, out.pg_advantages)  # the weights differ from 1 in this case


@pytest.mark.parametrize("lam", [1.0, 0.95, 0.5])
def test_on_policy_targets_are_hppos_semi_mdp_returns(lam):
    """On-policy (pi == mu), V-trace's v_s is the semi-MDP lambda-return HPPO's high level learns from
    (`tinker_core.hierarchy.smdp.smdp_gae`, advantages + values): with OptionEnv's rewards (discounted sums over
    each option of 5 steps) and IMPALA's discount gamma^5, across terminations (no bootstrap), truncations
    (bootstrap from the cut episode's last observation) and the window's end."""
    from tinker_core.hierarchy.smdp import smdp_gae

    case = random_case(4)
    case["tlp"] = [row[:] for row in case["blp"]]
    step_gamma = case["gamma"] ** (1 / 5)  # a decision lasts 5 env steps: gamma_decision = step_gamma ** 5
    out = vtrace(**tensors(case), lambda_=lam)
    T, B = len(case["r"]), len(case["r"][0])
    for b in range(B):
        col = lambda k: [case[k][t][b] for t in range(T)]  # noqa: E731
        _, ret = smdp_gae(col("r"), [5] * T, col("v"), col("nv"), col("term"), col("ends"), step_gamma, lam)
        assert torch.allclose(out.vs[:, b], torch.tensor(ret, dtype=torch.float64), atol=1e-9)
