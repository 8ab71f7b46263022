// DQN's gradient step for an MLP Q-network on the CPU, compiled: the same step as `DQN._train_step`
// (dqn.py) in one call. The online network on [obs; next_obs] (the next half picks the double-Q action),
// the target network on next_obs, the TD target, the Huber (smooth L1, beta 1) loss with optional
// importance weights, its gradient written out layer by layer, clip_grad_norm_'s global-norm clip and
// torch's fused Adam step. At RL Zoo's sizes (batches of 64-128, 256-wide layers) the autograd step is
// some sixty dispatches whose cost is several times their arithmetic; here it is a few products (through
// the same library the SAC step chose, see native.py) and one pass over each activation.
// tests/algos/test_dqn_native.py holds it to the autograd step.
//
// Layouts (as nn.Linear holds them): weight [out, in], bias [out]; parameter lists are flat:
// W0, b0, W1, b1, ... (hidden layers, then the output layer with one column per action).

#include <ATen/ATen.h>
#include <torch/library.h>

#include "native_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tinker_dqn {

using at::Tensor;
using namespace tinker_native;  // native_kernels.h
using tinker_sac::product;
using tinker_sac::product_into;

// The MLP's hidden activations for x [n, in] (pushed onto hs) and its output q [n, A].
Tensor mlp_forward(const std::vector<Tensor>& net, const Tensor& x, int64_t act, std::vector<Tensor>& hs) {
  const int64_t L = static_cast<int64_t>(net.size()) / 2;
  Tensor h = x;
  for (int64_t k = 0; k < L - 1; ++k) {
    Tensor z;
    if (h.size(1) < NARROW) {
      z = narrow_linear(h, net[2 * k].t().contiguous(), net[2 * k + 1], act);
    } else {
      z = product(h, net[2 * k].t());
      const int64_t n = z.size(0), m = z.size(1);
      float* zp = P(z);
      const float* bp = P(net[2 * k + 1]);
      if (act == RELU) {
        for (int64_t i = 0; i < n; ++i) {
          float* r = zp + i * m;
#pragma omp simd
          for (int64_t j = 0; j < m; ++j) {
            const float v = r[j] + bp[j];
            r[j] = v > 0.f ? v : 0.f;
          }
        }
      } else {
        z.add_(net[2 * k + 1].reshape({1, -1})).tanh_();
      }
    }
    hs.push_back(z);
    h = z;
  }
  // the output layer: a dot product per row and action (few actions)
  const Tensor& W = net[2 * (L - 1)];
  const int64_t n = h.size(0), H = h.size(1), A = W.size(0);
  Tensor q = at::empty({n, A}, h.options());
  const float *hp = P(h), *wp = P(W), *bp = P(net[2 * (L - 1) + 1]);
  float* qp = P(q);
  for (int64_t i = 0; i < n; ++i) {
    const float* hr = hp + i * H;
    for (int64_t a = 0; a < A; ++a) {
      const float* wr = wp + a * H;
      float s = 0.f;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < H; ++j) s += hr[j] * wr[j];
      qp[i * A + a] = s + bp[a];
    }
  }
  return q;
}

// One gradient step. `online` are the Q-network's parameters, which Adam updates (`adam_m`, `adam_v`,
// `adam_steps` its state in the same order; empty: no Adam step, the caller's optimizer takes it, as
// on the first step, which creates that state); `grads` their .grad tensors, every element written
// (clipped). adam_hyper: lr, beta1, beta2, weight decay, eps.
// Returns [loss, q_mean, grad_norm (before clipping), td_abs [B]].
std::vector<Tensor> train_step(const Tensor& obs, const Tensor& actions, const Tensor& next_obs, const Tensor& rewards,
                               const Tensor& dones, const c10::optional<Tensor>& weights, std::vector<Tensor> online,
                               std::vector<Tensor> target, std::vector<Tensor> grads, std::vector<Tensor> adam_m,
                               std::vector<Tensor> adam_v, std::vector<Tensor> adam_steps,
                               std::vector<double> adam_hyper, double gamma, bool double_q, double max_grad_norm,
                               int64_t act) {
  const int64_t B = obs.size(0), L = static_cast<int64_t>(online.size()) / 2;
  const int64_t A = online[2 * (L - 1)].size(0);
  Tensor x = (double_q ? at::cat({obs.reshape({B, -1}), next_obs.reshape({B, -1})}) : obs.reshape({B, -1}))
                 .to(at::kFloat)
                 .contiguous();
  Tensor xn = double_q ? x.narrow(0, B, B) : next_obs.reshape({B, -1}).to(at::kFloat).contiguous();
  std::vector<Tensor> hs, hs_t;
  Tensor q_all = mlp_forward(online, x, act, hs);    // [B or 2B, A]
  Tensor q_next = mlp_forward(target, xn, act, hs_t);  // [B, A]
  const Tensor a_idx = actions.reshape({B}).to(at::kLong).contiguous();
  const Tensor r = rewards.reshape({B}).to(at::kFloat).contiguous(), dn = dones.reshape({B}).to(at::kFloat).contiguous();
  c10::optional<Tensor> w;
  if (weights) w = weights->reshape({B}).to(at::kFloat).contiguous();
  // TD target, Huber loss and its gradient per sample (d loss / d q(s, a))
  Tensor g_q = at::empty({B}, x.options()), td_abs = at::empty({B}, x.options());
  double loss = 0.0, qsum = 0.0;
  {
    const float *qa = P(q_all), *qt = P(q_next), *rp = P(r), *dp = P(dn), *wp = w ? P(*w) : nullptr;
    const int64_t* ap = a_idx.data_ptr<int64_t>();
    float *gp = P(g_q), *tp = P(td_abs);
    const float gam = static_cast<float>(gamma), inv_b = 1.f / static_cast<float>(B);
    for (int64_t i = 0; i < B; ++i) {
      const float* tr = qt + i * A;
      float nq;
      if (double_q) {  // the online network's first best action, valued by the target network
        const float* on = qa + (B + i) * A;
        int64_t best = 0;
        for (int64_t k = 1; k < A; ++k)
          if (on[k] > on[best]) best = k;
        nq = tr[best];
      } else {
        nq = tr[0];
        for (int64_t k = 1; k < A; ++k) nq = std::max(nq, tr[k]);
      }
      const float t = rp[i] + (1.f - dp[i]) * gam * nq;
      const float q = qa[i * A + ap[i]];
      const float d = q - t, ad = std::fabs(d);
      const float per = ad < 1.f ? 0.5f * d * d : ad - 0.5f;
      const float wi = wp ? wp[i] : 1.f;
      loss += static_cast<double>(wp ? per * wi : per);
      qsum += q;
      gp[i] = (ad < 1.f ? d : (d > 0.f ? 1.f : -1.f)) * (wi * inv_b);
      tp[i] = ad;
    }
  }
  // the output layer's gradients and the last activation's
  const Tensor& xin = x.narrow(0, 0, B);
  const Tensor h_last = L > 1 ? hs.back().narrow(0, 0, B) : xin;
  const int64_t H = h_last.size(1);
  Tensor d = at::empty({B, H}, x.options());
  {
    const float *hp = P(h_last), *wp = P(online[2 * (L - 1)]), *gp = P(g_q);
    const int64_t* ap = a_idx.data_ptr<int64_t>();
    float *gw = P(grads[2 * (L - 1)]), *gb = P(grads[2 * (L - 1) + 1]), *dp = P(d);
    std::fill(gw, gw + A * H, 0.f);
    std::fill(gb, gb + A, 0.f);
    for (int64_t i = 0; i < B; ++i) {
      const float g = gp[i];
      const int64_t a = ap[i];
      const float *hr = hp + i * H, *wr = wp + a * H;
      float *gr = gw + a * H, *dr = dp + i * H;
      gb[a] += g;
#pragma omp simd
      for (int64_t j = 0; j < H; ++j) {
        gr[j] += g * hr[j];
        dr[j] = g * wr[j];
      }
    }
  }
  hidden_backward(d, x, hs, online, grads, L - 2, act);
  // clip_grad_norm_(max_grad_norm): the global L2 norm, every gradient scaled by min(1, max / (norm + 1e-6))
  double sq = 0.0;
  for (const Tensor& g : grads) {
    const float* gp = P(g);
    const int64_t n = g.numel();
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; ++j) s += static_cast<double>(gp[j]) * gp[j];
    sq += s;
  }
  const float norm = static_cast<float>(std::sqrt(sq));
  const float coef = static_cast<float>(max_grad_norm) / (norm + 1e-6f);
  if (coef < 1.f) {
    for (Tensor& g : grads) {
      float* gp = P(g);
      const int64_t n = g.numel();
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) gp[j] *= coef;
    }
  }
  if (!adam_m.empty()) {
    for (Tensor& s : adam_steps) *P(s) += 1.f;
    std::vector<Tensor> none;
    at::_fused_adam_(online, grads, adam_m, adam_v, none, adam_steps, adam_hyper[0], adam_hyper[1], adam_hyper[2],
                     adam_hyper[3], adam_hyper[4], /*amsgrad=*/false, /*maximize=*/false);
  }
  const auto opts = x.options();
  return {at::scalar_tensor(loss / B, opts), at::scalar_tensor(qsum / B, opts), at::scalar_tensor(norm, opts), td_abs};
}

}  // namespace tinker_dqn

TORCH_LIBRARY(tinker_dqn, m) {
  m.def("train_step(Tensor obs, Tensor actions, Tensor next_obs, Tensor rewards, Tensor dones, Tensor? weights, "
        "Tensor(a!)[] online, Tensor[] target, Tensor(b!)[] grads, Tensor(c!)[] adam_m, Tensor(d!)[] adam_v, "
        "Tensor(e!)[] adam_steps, float[] adam_hyper, float gamma, bool double_q, float max_grad_norm, int act) "
        "-> Tensor[]");
}

TORCH_LIBRARY_IMPL(tinker_dqn, CPU, m) { m.impl("train_step", &tinker_dqn::train_step); }
