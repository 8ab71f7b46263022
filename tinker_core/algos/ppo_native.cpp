// PPO's whole update (every epoch, every minibatch) for the fused actor-critic MLP pair with Gaussian
// actions (gSDE or a state-independent std), compiled for the CPU: the same losses as `PPO._minibatch`,
// their gradients written out, the global-norm clip and the fused Adam step of the one flat buffer.
// At PPO's sizes (minibatches of 64, 64-wide layers) a minibatch through autograd is some hundred
// dispatches whose cost is many times their arithmetic; here it is a few small products and loops.
// tests/algos/test_ppo_native.py holds it to the autograd path.
//
// Parameters arrive as `FusedActorCritic`'s tiles (views of the flat buffer, in its order): the first
// layers of both MLPs stacked [2 H0, D] and [2 H0]; each further hidden layer [2, H, H_prev] and
// [2, 1, H]; the actor's output [A, H] and [A]; the value output [1, H] and [1]; the log std
// ([H, A] with gSDE, else [A]). `gtiles` are the same views of the flat gradient.

#include <ATen/ATen.h>
#include <torch/library.h>

#include "native_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tinker_ppo {

using at::Tensor;
using namespace tinker_native;  // native_kernels.h

struct Layer {
  Tensor W, b, gW, gb;  // W [out, in], b [out] and their gradients (contiguous views)
};

// z [n, out] <- act(x @ W^T + b)
Tensor layer_forward(const Layer& l, const Tensor& x, int64_t act) {
  if (x.size(1) < NARROW) return narrow_linear(x, l.W.t().contiguous(), l.b, act);
  const int64_t n = x.size(0), out = l.W.size(0);
  Tensor z = at::empty({n, out}, x.options());
  at::mm_out(z, x, l.W.t());
  float* zp = P(z);
  const float* bp = P(l.b);
  for (int64_t i = 0; i < n; ++i) {
    float* r = zp + i * out;
    if (act == RELU) {
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) {
        const float v = r[j] + bp[j];
        r[j] = v > 0.f ? v : 0.f;
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) r[j] += bp[j];
    }
  }
  if (act != RELU) z.tanh_();
  return z;
}

// Gradients of a hidden stack from d [n, H_last], the gradient of its last activation; d is consumed.
void hidden_backward(const std::vector<Layer>& layers, const std::vector<Tensor>& hs, const Tensor& x, Tensor d,
                     int64_t act) {
  const int64_t n = x.size(0);
  for (int64_t k = static_cast<int64_t>(layers.size()) - 1; k >= 0; --k) {
    const Layer& l = layers[k];
    const int64_t out = l.W.size(0);
    act_back_(P(d), P(hs[k]), n, out, act, P(l.gb));
    const Tensor& in = k == 0 ? x : hs[k - 1];
    const int64_t c = in.size(1);
    if (c < NARROW) {  // gW [out, c] from gW^T = in^T d
      Tensor gWt = at::empty({c, out}, d.options());
      narrow_weight_grad(in, d, P(gWt));
      l.gW.copy_(gWt.t());
    } else {
      at::mm_out(const_cast<Tensor&>(l.gW), d.t(), in);
    }
    if (k > 0) d = at::mm(d, l.W);
  }
}

// The update. obs [N, D], actions [N, A], scal [N, 4] (old value, old log-prob, advantage, return),
// perms [epochs, N] (each epoch's order). Returns [losses [M, 2] (policy, value per minibatch),
// log ratios [epochs * N] (in the order seen), gradient norms [M]].
std::vector<Tensor> update(const Tensor& obs, const Tensor& actions, const Tensor& scal, const Tensor& perms,
                           std::vector<Tensor> tiles, std::vector<Tensor> gtiles, Tensor flat, Tensor flat_grad,
                           Tensor exp_avg, Tensor exp_avg_sq, Tensor step, int64_t n_hidden, int64_t act, bool sde,
                           double sde_eps, int64_t batch_size, double clip_range, double clip_range_vf,
                           double vf_coef, double ent_coef, double max_grad_norm, bool normalize_advantage,
                           double lr, double beta1, double beta2, double weight_decay, double adam_eps) {
  TORCH_CHECK(obs.dim() == 2 && actions.dim() == 2 && scal.size(1) == 4, "ppo update: bad batch shapes");
  const int64_t N = obs.size(0), D = obs.size(1), A = actions.size(1), E = perms.size(0), L = n_hidden;
  const int64_t M = (N + batch_size - 1) / batch_size;
  const auto f32 = obs.options();
  // the two networks' hidden layers as separate [out, in] weights (views of the stacked tiles)
  std::vector<Layer> net[2];
  const int64_t H0 = tiles[0].size(0) / 2;
  for (int64_t j = 0; j < 2; ++j) {
    net[j].push_back({tiles[0].narrow(0, j * H0, H0), tiles[1].narrow(0, j * H0, H0),
                      gtiles[0].narrow(0, j * H0, H0), gtiles[1].narrow(0, j * H0, H0)});
    for (int64_t k = 1; k < L; ++k)
      net[j].push_back({tiles[2 * k][j], tiles[2 * k + 1][j].reshape({-1}), gtiles[2 * k][j],
                        gtiles[2 * k + 1][j].reshape({-1})});
  }
  const Tensor &Wmu = tiles[2 * L], &bmu = tiles[2 * L + 1], &Wv = tiles[2 * L + 2], &bv = tiles[2 * L + 3];
  const Tensor& log_std = tiles[2 * L + 4];
  const Tensor &gWmu = gtiles[2 * L], &gbmu = gtiles[2 * L + 1], &gWv = gtiles[2 * L + 2], &gbv = gtiles[2 * L + 3];
  const Tensor& g_log_std = gtiles[2 * L + 4];
  const double log_norm = 0.5 * std::log(2.0 * M_PI) * A;
  const float ent_const = static_cast<float>(A * (0.5 + 0.5 * std::log(2.0 * M_PI)));
  const float lo = static_cast<float>(1.0 - clip_range), hi = static_cast<float>(1.0 + clip_range);
  const float cvf = static_cast<float>(clip_range_vf);

  Tensor losses = at::empty({E * M, 2}, f32), log_ratios = at::empty({E * N}, f32), norms = at::empty({E * M}, f32);
  const float *op = P(obs), *ap = P(actions), *sp = P(scal);
  const int64_t* pp = perms.data_ptr<int64_t>();
  int64_t mb_index = 0;
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t start = 0; start < N; start += batch_size, ++mb_index) {
      const int64_t n = std::min(batch_size, N - start);
      const int64_t* idx = pp + e * N + start;
      Tensor x = at::empty({n, D}, f32), a = at::empty({n, A}, f32);
      std::vector<float> old_v(n), old_lp(n), adv(n), ret(n);
      {
        float *xp = P(x), *aq = P(a);
        for (int64_t i = 0; i < n; ++i) {
          const int64_t r = idx[i];
          std::copy(op + r * D, op + (r + 1) * D, xp + i * D);
          std::copy(ap + r * A, ap + (r + 1) * A, aq + i * A);
          old_v[i] = sp[r * 4], old_lp[i] = sp[r * 4 + 1], adv[i] = sp[r * 4 + 2], ret[i] = sp[r * 4 + 3];
        }
      }
      // forward: both hidden stacks, the mean and the value
      std::vector<Tensor> hs[2];
      for (int64_t j = 0; j < 2; ++j) {
        Tensor h = x;
        for (const Layer& l : net[j]) {
          h = layer_forward(l, h, act);
          hs[j].push_back(h);
        }
      }
      const Tensor &hp = hs[0].back(), &hv = hs[1].back();
      const int64_t H = hp.size(1);
      Tensor mu = at::mm(hp, Wmu.t());  // [n, A]
      Tensor v = at::mm(hv, Wv.t());    // [n, 1]
      // the variance of each action dimension
      Tensor var;
      if (sde) {
        var = at::mm(hp.square(), at::exp(2.0 * log_std));  // [n, A]; the latent is not differentiated here
      }
      // losses and the gradients of mean, variance (or log std) and value
      if (normalize_advantage && n > 1) {
        double mean = 0.0;
        for (int64_t i = 0; i < n; ++i) mean += adv[i];
        mean /= n;
        double ss = 0.0;
        for (int64_t i = 0; i < n; ++i) ss += (adv[i] - mean) * (adv[i] - mean);
        const double sd = std::sqrt(ss / (n - 1));
        for (int64_t i = 0; i < n; ++i) adv[i] = static_cast<float>((adv[i] - mean) / (sd + 1e-8));
      }
      Tensor g_mu = at::empty({n, A}, f32), g_var = at::empty({n, A}, f32);
      std::vector<float> g_v(n);
      std::vector<double> g_ls_plain(sde ? 0 : A, 0.0);
      float* lr_out = P(log_ratios) + e * N + start;
      double pg = 0.0, vl = 0.0;
      {
        const float *mp = P(mu), *vp = P(v), *aq = P(a), *bm = P(bmu), *lsp = P(log_std);
        const float bvv = *P(bv);
        float* varp = sde ? P(var) : nullptr;
        float *gm = P(g_mu), *gvar = P(g_var);
        const float inv_n = 1.f / static_cast<float>(n);
        for (int64_t i = 0; i < n; ++i) {
          double logp = 0.0;
          for (int64_t k = 0; k < A; ++k) {
            const int64_t q = i * A + k;
            const float diff = aq[q] - (mp[q] + bm[k]);
            if (sde) {
              const float vq = varp[q] + static_cast<float>(sde_eps);
              varp[q] = vq;
              logp += -0.5f * diff * diff / vq - 0.5f * std::log(vq);
            } else {
              const float s = std::exp(-lsp[k]);
              logp += -0.5f * (diff * s) * (diff * s) - lsp[k];
            }
          }
          const float lr = static_cast<float>(logp - log_norm) - old_lp[i];
          lr_out[i] = lr;
          const float ratio = std::exp(lr);
          const float clipped = std::min(std::max(ratio, lo), hi);
          const float s1 = adv[i] * ratio, s2 = adv[i] * clipped;
          pg += -std::min(s1, s2);
          // d(-min)/d ratio, split as torch.minimum splits a tie
          const float w1 = s1 < s2 ? 1.f : (s1 > s2 ? 0.f : 0.5f);
          const float in_range = (ratio >= lo && ratio <= hi) ? 1.f : 0.f;
          const float g_logp = -inv_n * adv[i] * (w1 + (1.f - w1) * in_range) * ratio;
          for (int64_t k = 0; k < A; ++k) {
            const int64_t q = i * A + k;
            const float diff = aq[q] - (mp[q] + bm[k]);
            if (sde) {
              const float vq = varp[q];
              gm[q] = g_logp * diff / vq;
              float gv = g_logp * (0.5f * diff * diff / (vq * vq) - 0.5f / vq);
              if (ent_coef != 0.0) gv += -static_cast<float>(ent_coef) * inv_n * 0.5f / vq;
              gvar[q] = gv;
            } else {
              const float s2k = std::exp(-2.f * lsp[k]);
              gm[q] = g_logp * diff * s2k;
              g_ls_plain[k] += g_logp * (diff * diff * s2k - 1.f);
            }
          }
          // the value: optionally clipped around the old value
          float vi = vp[i] + bvv, mask = 1.f;
          if (cvf >= 0.f) {
            const float dv = vi - old_v[i];
            mask = (dv >= -cvf && dv <= cvf) ? 1.f : 0.f;
            vi = old_v[i] + std::min(std::max(dv, -cvf), cvf);
          }
          vl += (vi - ret[i]) * (vi - ret[i]);
          g_v[i] = static_cast<float>(vf_coef) * 2.f * (vi - ret[i]) * inv_n * mask;
        }
        if (!sde && ent_coef != 0.0)
          for (int64_t k = 0; k < A; ++k) g_ls_plain[k] -= ent_coef;  // d(-ent_coef * mean(sum log std))
      }
      pg /= n;
      vl /= n;
      float* lp_out = P(losses) + 2 * mb_index;
      lp_out[0] = static_cast<float>(pg), lp_out[1] = static_cast<float>(vl);
      // heads: weight and bias gradients, and the gradient of each network's last activation
      Tensor d_p = at::mm(g_mu, Wmu);  // [n, H]
      at::mm_out(const_cast<Tensor&>(gWmu), g_mu.t(), hp);
      {
        float* gb = P(gbmu);
        const float* gm = P(g_mu);
        for (int64_t k = 0; k < A; ++k) {
          float s = 0.f;
          for (int64_t i = 0; i < n; ++i) s += gm[i * A + k];
          gb[k] = s;
        }
      }
      Tensor d_v = at::empty({n, H}, f32);
      {
        const float *w = P(Wv), *hvp = P(hv);
        float *dv = P(d_v), *gw = P(gWv);
        std::fill(gw, gw + H, 0.f);
        float gsum = 0.f;
        for (int64_t i = 0; i < n; ++i) {
          const float gi = g_v[i];
          gsum += gi;
#pragma omp simd
          for (int64_t j = 0; j < H; ++j) {
            dv[i * H + j] = gi * w[j];
            gw[j] += gi * hvp[i * H + j];
          }
        }
        *P(gbv) = gsum;
      }
      if (sde) {  // d var / d log_std [H, A] = 2 exp(2 log_std) * latent^2 summed against g_var
        Tensor g = at::mm(hp.square().t(), g_var);
        g.mul_(at::exp(2.0 * log_std)).mul_(2.0);
        g_log_std.copy_(g);
      } else {
        float* gl = P(g_log_std);
        for (int64_t k = 0; k < A; ++k) gl[k] = static_cast<float>(g_ls_plain[k]);
      }
      hidden_backward(net[0], hs[0], x, d_p, act);
      hidden_backward(net[1], hs[1], x, d_v, act);
      // global-norm clip (clip_grad_norm_'s formula) and Adam on the flat buffer
      Tensor norm = at::linalg_vector_norm(flat_grad);
      flat_grad.mul_(at::clamp(max_grad_norm / (norm + 1e-6), c10::nullopt, 1.0));
      P(norms)[mb_index] = norm.item<float>();
      *P(step) += 1.f;
      at::_fused_adam_({flat}, {flat_grad}, {exp_avg}, {exp_avg_sq}, {}, {step}, lr, beta1, beta2, weight_decay,
                       adam_eps, /*amsgrad=*/false, /*maximize=*/false);
    }
  }
  return {losses, log_ratios, norms};
}

}  // namespace tinker_ppo

TORCH_LIBRARY(tinker_ppo, m) {
  m.def("update(Tensor obs, Tensor actions, Tensor scal, Tensor perms, Tensor[] tiles, Tensor[] gtiles, "
        "Tensor(a!) flat, Tensor(b!) flat_grad, Tensor(c!) exp_avg, Tensor(d!) exp_avg_sq, Tensor(e!) step, "
        "int n_hidden, int act, bool sde, float sde_eps, int batch_size, float clip_range, float clip_range_vf, "
        "float vf_coef, float ent_coef, float max_grad_norm, bool normalize_advantage, float lr, float beta1, "
        "float beta2, float weight_decay, float eps) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(tinker_ppo, CPU, m) { m.impl("update", &tinker_ppo::update); }
