// SAC's gradient step for MLP actor and ensemble critic on the CPU, compiled: the products of
// `SACUpdate` (sac_update.py) through torch's BLAS or oneDNN, and everything between them (bias, activation,
// its backward, bias gradients, the critics' one-column last layer, the squashed Gaussian, the TD
// target) fused into single passes over each activation instead of one kernel dispatch per op.
// Same losses, same gradients, same order of products as `SACUpdate`; tests/algos/test_sac_native.py
// holds the two to each other.
//
// Layouts (as the Python modules hold them): actor nn.Linear weight [out, in], bias [out]; critic
// EnsembleLinear weight [E, in, out], bias [E, 1, out]. Parameter lists are flat: W0, b0, W1, b1, ...
// (the actor's trunk, then the mean head, then the log-std head; with gSDE (`sde`) the mean head, then
// gSDE's log_std [H, A]: no bias, so the list's length is odd).

#include <ATen/ATen.h>
#include <dlfcn.h>
#include <torch/library.h>

#include "native_kernels.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <vector>

namespace tinker_sac {

using at::Tensor;
using namespace tinker_native;  // native_kernels.h

constexpr float LOG_STD_MIN = -20.f, LOG_STD_MAX = 2.f;
constexpr float SDE_EPS = 1e-6f, CLIP_MEAN = 2.f;  // GSDESquashedActor's
const float HALF_LOG_2PI = static_cast<float>(0.5 * std::log(2.0 * M_PI));

// ---- products ----------------------------------------------------------------------------------
// The step's products go through torch's BLAS (MKL on x86) or through oneDNN, which torch also
// carries: on some CPUs one of them runs a slower code path (on an AMD EPYC, Zen 5, oneDNN's products
// ran 2.2x as fast as MKL's, which runs at AVX2 speed there). Which one is chosen once per machine
// (sac_native.py).
// oneDNN is reached through ATen's own fp32 entry point, looked up at run time so that a torch
// without it leaves the step on the BLAS instead of failing to load.

using DnnMatmul = void (*)(const Tensor&, const Tensor&, const Tensor&, float, float);

DnnMatmul dnn_matmul() {
  static const DnnMatmul fn = [] {
    void* lib = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
    // at::native::mkldnn_matmul(const Tensor& mat1, const Tensor& mat2, const Tensor& result, float beta, float alpha)
    void* sym = lib ? dlsym(lib, "_ZN2at6native13mkldnn_matmulERKNS_6TensorES3_S3_ff") : nullptr;
    return reinterpret_cast<DnnMatmul>(sym);
  }();
  return fn;
}

std::atomic<bool> use_dnn{false};

// Few rows, few inputs or few outputs (the first layers, the heads): the BLAS's small-matrix path.
constexpr int64_t DNN_MIN = 16;

// out [n, m] <- a [n, k] @ b [k, m] (a and b may be transposed views; out contiguous).
void product_into(const Tensor& out, const Tensor& a, const Tensor& b) {
  if (use_dnn.load(std::memory_order_relaxed) && a.size(0) >= DNN_MIN && a.size(1) >= DNN_MIN &&
      b.size(1) >= DNN_MIN) {
    dnn_matmul()(a, b, out, 0.f, 1.f);
  } else {
    at::mm_out(const_cast<Tensor&>(out), a, b);
  }
}

Tensor product(const Tensor& a, const Tensor& b) {
  Tensor out = at::empty({a.size(0), b.size(1)}, a.options());
  product_into(out, a, b);
  return out;
}

// Select the library for the products (1: oneDNN, 0: the BLAS); returns the one in effect (the BLAS
// when oneDNN cannot be found).
int64_t set_gemm(int64_t dnn) {
  use_dnn = dnn != 0 && dnn_matmul() != nullptr;
  return use_dnn ? 1 : 0;
}

// Microseconds per [256, 256] x [256, 256] product through one library (1: oneDNN, 0: the BLAS),
// the best of `rounds` rounds of `n`; what `set_gemm`'s choice is measured with. Leaves the choice as it was.
double time_gemm(int64_t dnn, int64_t n, int64_t rounds) {
  const bool was = use_dnn;
  if (dnn != 0 && dnn_matmul() == nullptr) return -1.0;
  use_dnn = dnn != 0;
  Tensor a = at::randn({256, 256}), b = at::randn({256, 256}), out = at::empty({256, 256});
  double best = 1e30;
  for (int64_t r = 0; r <= rounds; ++r) {  // round 0 warms up
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < n; ++i) product_into(out, a, b);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / n;
    if (r > 0) best = std::min(best, us);
  }
  use_dnn = was;
  return best;
}

// z <- act(z + b) for z [n, m], b [m] (any leading dims of size 1)
void bias_act_(Tensor& z, const Tensor& b, int64_t act) {
  if (act != RELU) {
    z.add_(b.reshape({1, -1})).tanh_();
    return;
  }
  const int64_t n = z.size(0), m = z.size(1);
  float* zp = P(z);
  const float* bp = P(b);
  for (int64_t i = 0; i < n; ++i) {
    float* r = zp + i * m;
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) {
      const float v = r[j] + bp[j];
      r[j] = v > 0.f ? v : 0.f;
    }
  }
}

// Column sums of x [n, m] into out [m].
void col_sum(const float* x, int64_t n, int64_t m, float* out) {
  std::fill(out, out + m, 0.f);
  for (int64_t i = 0; i < n; ++i) {
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) out[j] += x[i * m + j];
  }
}

// ---- critics ---------------------------------------------------------------------------------

struct CriticPass {
  std::vector<std::vector<Tensor>> hs;  // [member][hidden layer] activations [n, H_k]
  Tensor q;                             // [E, n]
};

// Every member's hidden activations and value for input x [n, in].
CriticPass critic_forward(const std::vector<Tensor>& net, const Tensor& x, int64_t act) {
  const int64_t L = static_cast<int64_t>(net.size()) / 2, E = net[0].size(0), n = x.size(0);
  CriticPass out;
  out.q = at::empty({E, n}, x.options());
  out.hs.resize(E);
  for (int64_t e = 0; e < E; ++e) {
    Tensor h = x;
    for (int64_t k = 0; k < L - 1; ++k) {
      Tensor z;
      if (h.size(1) < NARROW) {
        z = narrow_linear(h, net[2 * k][e], net[2 * k + 1][e], act);
      } else {
        z = product(h, net[2 * k][e]);
        bias_act_(z, net[2 * k + 1][e], act);
      }
      out.hs[e].push_back(z);
      h = z;
    }
    const int64_t H = h.size(1);
    const float* w = P(net[2 * (L - 1)][e]);  // [H, 1]
    const float b = *P(net[2 * (L - 1) + 1][e]);
    const float* hp = P(h);
    float* q = P(out.q) + e * n;
    for (int64_t i = 0; i < n; ++i) {
      float s = 0.f;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < H; ++j) s += hp[i * H + j] * w[j];
      q[i] = s + b;
    }
  }
  return out;
}

// Weight and bias gradients of member e from g [n], the gradient of its values.
void critic_weight_grads(const std::vector<Tensor>& net, const std::vector<Tensor>& grads, int64_t e,
                         const std::vector<Tensor>& hs, const Tensor& x, const float* g, int64_t act) {
  const int64_t L = static_cast<int64_t>(net.size()) / 2, n = x.size(0);
  const Tensor& hl = hs.back();
  const int64_t H = hl.size(1);
  const float* w = P(net[2 * (L - 1)][e]);
  float* gw = P(grads[2 * (L - 1)][e]);
  float* gb_hidden = P(grads[2 * (L - 2) + 1][e]);
  std::fill(gw, gw + H, 0.f);
  std::fill(gb_hidden, gb_hidden + H, 0.f);
  Tensor d = at::empty({n, H}, x.options());
  float* dp = P(d);
  const float* hp = P(hl);
  float gsum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float* hr = hp + i * H;
    float* dr = dp + i * H;
    gsum += gi;
    if (act == RELU) {
#pragma omp simd
      for (int64_t j = 0; j < H; ++j) {
        gw[j] += gi * hr[j];
        const float v = hr[j] > 0.f ? gi * w[j] : 0.f;
        dr[j] = v;
        gb_hidden[j] += v;
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < H; ++j) {
        gw[j] += gi * hr[j];
        const float v = gi * w[j] * (1.f - hr[j] * hr[j]);
        dr[j] = v;
        gb_hidden[j] += v;
      }
    }
  }
  *P(grads[2 * (L - 1) + 1][e]) = gsum;
  for (int64_t k = L - 2; k >= 0; --k) {
    const Tensor& in = k == 0 ? x : hs[k - 1];
    Tensor gW = grads[2 * k][e];
    if (in.size(1) < NARROW) {
      narrow_weight_grad(in, d, P(gW));
    } else {
      product_into(gW, in.t(), d);
    }
    if (k > 0) {
      Tensor d2 = product(d, net[2 * k][e].t());
      act_back_(P(d2), P(hs[k - 1]), n, d2.size(1), act, P(grads[2 * (k - 1) + 1][e]));
      d = d2;
    }
  }
}

// ---- actor -----------------------------------------------------------------------------------

// Hidden layers of the actor's trunk: its parameter list less the heads (two layers, or the mean
// layer and gSDE's log_std).
int64_t trunk_layers(const std::vector<Tensor>& actor, bool sde) {
  return sde ? (static_cast<int64_t>(actor.size()) - 3) / 2 : static_cast<int64_t>(actor.size()) / 2 - 2;
}

// Hidden activations of the trunk for x [n, in].
std::vector<Tensor> trunk_forward(const std::vector<Tensor>& actor, const Tensor& x, int64_t T, int64_t act) {
  std::vector<Tensor> hs;
  Tensor h = x;
  for (int64_t k = 0; k < T; ++k) {
    Tensor z;
    if (h.size(1) < NARROW) {
      z = narrow_linear(h, actor[2 * k].t().contiguous(), actor[2 * k + 1], act);
    } else {
      z = product(h, actor[2 * k].t());
      bias_act_(z, actor[2 * k + 1], act);
    }
    hs.push_back(z);
    h = z;
  }
  return hs;
}

// Hidden activations of the trunk for x [n, in]; mean and unclamped log std [n, A].
std::vector<Tensor> actor_forward(const std::vector<Tensor>& actor, const Tensor& x, int64_t act,
                                  Tensor& mu, Tensor& ls_raw) {
  const int64_t T = trunk_layers(actor, false);
  std::vector<Tensor> hs = trunk_forward(actor, x, T, act);
  const Tensor& h = hs.back();
  // the two heads: a dot product per row and action dimension
  const int64_t n = h.size(0), H = h.size(1), A = actor[2 * T].size(0);
  mu = at::empty({n, A}, h.options());
  ls_raw = at::empty({n, A}, h.options());
  const float *hp = P(h), *wm = P(actor[2 * T]), *bm = P(actor[2 * T + 1]), *ws = P(actor[2 * T + 2]),
              *bs = P(actor[2 * T + 3]);
  float *mp = P(mu), *lp = P(ls_raw);
  for (int64_t i = 0; i < n; ++i) {
    const float* hr = hp + i * H;
    for (int64_t k = 0; k < A; ++k) {
      float sm = 0.f, sl = 0.f;
      const float *wmr = wm + k * H, *wsr = ws + k * H;
#pragma omp simd reduction(+ : sm, sl)
      for (int64_t j = 0; j < H; ++j) {
        sm += hr[j] * wmr[j];
        sl += hr[j] * wsr[j];
      }
      mp[i * A + k] = sm + bm[k];
      lp[i * A + k] = sl + bs[k];
    }
  }
  return hs;
}

// Gradients of every actor parameter from those of the mean and unclamped log std [B, A]; the
// first B rows of x and hs are the ones differentiated.
void actor_backward(const std::vector<Tensor>& actor, const std::vector<Tensor>& grads, const Tensor& x,
                    const std::vector<Tensor>& hs, const Tensor& g_mu, const Tensor& g_ls, int64_t act) {
  const int64_t T = static_cast<int64_t>(actor.size()) / 2 - 2, B = g_mu.size(0);
  auto rows = [B](const Tensor& t) { return t.narrow(0, 0, B); };
  // the heads in one pass over the last hidden layer: their weight gradients and the layer's gradient
  const Tensor h = rows(hs[T - 1]);
  const int64_t H = h.size(1), A = g_mu.size(1);
  float *gwm = P(grads[2 * T]), *gws = P(grads[2 * T + 2]);
  std::fill(gwm, gwm + A * H, 0.f);
  std::fill(gws, gws + A * H, 0.f);
  col_sum(P(g_mu), B, A, P(grads[2 * T + 1]));
  col_sum(P(g_ls), B, A, P(grads[2 * T + 3]));
  Tensor d = at::zeros({B, H}, h.options());
  {
    const float *hp = P(h), *wm = P(actor[2 * T]), *ws = P(actor[2 * T + 2]), *gm = P(g_mu), *gl = P(g_ls);
    float* dp = P(d);
    for (int64_t i = 0; i < B; ++i) {
      const float* hr = hp + i * H;
      float* dr = dp + i * H;
      for (int64_t k = 0; k < A; ++k) {
        const float um = gm[i * A + k], ul = gl[i * A + k];
        float *gmr = gwm + k * H, *glr = gws + k * H;
        const float *wmr = wm + k * H, *wsr = ws + k * H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
          gmr[j] += um * hr[j];
          glr[j] += ul * hr[j];
          dr[j] += um * wmr[j] + ul * wsr[j];
        }
      }
    }
  }
  hidden_backward(d, x, hs, actor, grads, T - 1, act);
}

// ---- gSDE's actor ------------------------------------------------------------------------------
// One noise matrix M [H, A] (exp(log_std) * E, drawn in Python) for every row. Per row, h the trunk's
// output: mean before the clip mu = W_mu h + b, noise n = h M, variance var = 1e-6 + (h * h) exp(2 log_std).

// Hidden activations of the trunk for x [n, in]; mu, n and var [n, A] in one pass over h (M and
// exp(2 log_std) read transposed, [A, H], as the mean's weight).
std::vector<Tensor> sde_actor_forward(const std::vector<Tensor>& actor, const Tensor& x, const Tensor& M,
                                      int64_t act, Tensor& mu, Tensor& noise, Tensor& var) {
  const int64_t T = trunk_layers(actor, true);
  std::vector<Tensor> hs = trunk_forward(actor, x, T, act);
  const Tensor& h = hs.back();
  const int64_t n = h.size(0), H = h.size(1), A = actor[2 * T].size(0);
  const Tensor Mt = M.t().contiguous(), St = actor[2 * T + 2].mul(2.f).exp_().t().contiguous();
  mu = at::empty({n, A}, h.options());
  noise = at::empty({n, A}, h.options());
  var = at::empty({n, A}, h.options());
  const float *hp = P(h), *wm = P(actor[2 * T]), *bm = P(actor[2 * T + 1]), *mp = P(Mt), *sp = P(St);
  float *op = P(mu), *np = P(noise), *vp = P(var);
  for (int64_t i = 0; i < n; ++i) {
    const float* hr = hp + i * H;
    for (int64_t k = 0; k < A; ++k) {
      float sm = 0.f, sn = 0.f, sv = 0.f;
      const float *wmr = wm + k * H, *mr = mp + k * H, *sr = sp + k * H;
#pragma omp simd reduction(+ : sm, sn, sv)
      for (int64_t j = 0; j < H; ++j) {
        sm += hr[j] * wmr[j];
        sn += hr[j] * mr[j];
        sv += hr[j] * hr[j] * sr[j];
      }
      op[i * A + k] = sm + bm[k];
      np[i * A + k] = sn;
      vp[i * A + k] = sv + SDE_EPS;
    }
  }
  return hs;
}

// Every actor parameter's gradient from those of the clipped mean (g_m, zero where it clips), the noise
// (g_n) and the variance (g_var) [B, A] of the first B rows: the mean's weights, log_std (through
// M = exp(log_std) * E and through the variance), then the trunk from
// g_h = g_m W_mu + g_n M^T + 2 h (g_var exp(2 log_std)^T).
void sde_actor_backward(const std::vector<Tensor>& actor, const std::vector<Tensor>& grads, const Tensor& x,
                        const std::vector<Tensor>& hs, const Tensor& M, const Tensor& g_m, const Tensor& g_n,
                        const Tensor& g_var, int64_t act) {
  const int64_t T = trunk_layers(actor, true), B = g_m.size(0);
  const Tensor h = hs[T - 1].narrow(0, 0, B);
  const int64_t H = h.size(1), A = g_m.size(1);
  const Tensor Mt = M.t().contiguous(), St = actor[2 * T + 2].mul(2.f).exp_().t().contiguous();
  float* gwm = P(grads[2 * T]);
  std::fill(gwm, gwm + A * H, 0.f);
  col_sum(P(g_m), B, A, P(grads[2 * T + 1]));
  Tensor gn_h = at::zeros({A, H}, h.options()), gv_h2 = at::zeros({A, H}, h.options());  // g_n^T h, g_var^T h^2
  Tensor d = at::zeros({B, H}, h.options());
  {
    const float *hp = P(h), *wm = P(actor[2 * T]), *mp = P(Mt), *sp = P(St), *gm = P(g_m), *gn = P(g_n),
                *gv = P(g_var);
    float *dp = P(d), *gnh = P(gn_h), *gvh = P(gv_h2);
    for (int64_t i = 0; i < B; ++i) {
      const float* hr = hp + i * H;
      float* dr = dp + i * H;
      for (int64_t k = 0; k < A; ++k) {
        const float um = gm[i * A + k], un = gn[i * A + k], uv = gv[i * A + k];
        float *gmr = gwm + k * H, *gnr = gnh + k * H, *gvr = gvh + k * H;
        const float *wmr = wm + k * H, *mr = mp + k * H, *sr = sp + k * H;
#pragma omp simd
        for (int64_t j = 0; j < H; ++j) {
          const float hj = hr[j];
          gmr[j] += um * hj;
          gnr[j] += un * hj;
          gvr[j] += uv * hj * hj;
          dr[j] += um * wmr[j] + un * mr[j] + 2.f * hj * uv * sr[j];
        }
      }
    }
    float* gls = P(grads[2 * T + 2]);  // [H, A]
    for (int64_t j = 0; j < H; ++j)
      for (int64_t k = 0; k < A; ++k)
        gls[j * A + k] = gnh[k * H + j] * mp[k * H + j] + gvh[k * H + j] * 2.f * sp[k * H + j];
  }
  hidden_backward(d, x, hs, actor, grads, T - 1, act);
}

// ---- the step ----------------------------------------------------------------------------------

// What `critic_step` keeps for `actor_step` before the trunk's activations: [critic_loss, q_mean,
// td_abs, a, logp] and then std, ls_raw, eps (plain) or mu, n, var, M (gSDE).
int64_t saved_heads(bool sde) { return sde ? 9 : 8; }

// The critic's part of the step, up to (not including) its optimizer step: the actor on obs and
// next obs ([obs; next_obs] = x2 [2B, in]), the squashed sample with noise eps [2B, A] (with `sde`:
// gSDE's, with the one matrix M = noise [H, A] for all rows), the TD target from the target critics,
// the critics' loss and their gradients (written into critic_grads).
// Returns [critic_loss, q_mean, td_abs [B], a [2B, A], logp [2B], std [2B, A], ls_raw [2B, A], eps,
// trunk activations...] or with `sde` [..., logp, mu [2B, A], n [2B, A], var [2B, A], M, trunk
// activations...] (from a on, what `actor_step` needs).
std::vector<Tensor> critic_step(const Tensor& x2, const Tensor& actions, const Tensor& rewards,
                                const Tensor& dones, const c10::optional<Tensor>& weights, const Tensor& noise,
                                std::vector<Tensor> actor, std::vector<Tensor> critic,
                                std::vector<Tensor> target, std::vector<Tensor> critic_grads, double ent_coef,
                                double gamma, int64_t actor_act, int64_t critic_act, bool sde) {
  const int64_t B = actions.size(0), A = actions.size(1);
  const int64_t E = critic[0].size(0);
  Tensor mu, h1, h2;  // plain: std and ls_raw; gSDE: n and var
  std::vector<Tensor> hs_a = sde ? sde_actor_forward(actor, x2, noise, actor_act, mu, h1, h2)
                                 : actor_forward(actor, x2, actor_act, mu, h2);
  Tensor a = at::empty_like(mu), logp = at::empty({2 * B}, mu.options());
  if (sde) {
    const float *mp = P(mu), *vp = P(h2);
    float *np = P(h1), *ap = P(a), *op = P(logp);
    for (int64_t i = 0; i < 2 * B; ++i) {
      float gauss = 0.f, squash = 0.f;
      for (int64_t k = 0; k < A; ++k) {
        const int64_t j = i * A + k;
        const float m = std::min(std::max(mp[j], -CLIP_MEAN), CLIP_MEAN);
        const float u = m + np[j];
        np[j] = u - m;  // the noise as the autograd step's log-density sees it (pre-tanh action minus mean)
        const float ak = std::tanh(u);
        ap[j] = ak;
        gauss += -0.5f * np[j] * np[j] / vp[j] - 0.5f * std::log(vp[j]) - HALF_LOG_2PI;
        squash += std::log1p(-(ak * ak) + 1e-6f);
      }
      op[i] = gauss - squash;
    }
  } else {
    h1 = at::empty_like(mu);
    const float *mp = P(mu), *lp = P(h2), *ep = P(noise);
    float *ap = P(a), *sp = P(h1), *op = P(logp);
    for (int64_t i = 0; i < 2 * B; ++i) {
      float gauss = 0.f, squash = 0.f;
      for (int64_t k = 0; k < A; ++k) {
        const int64_t j = i * A + k;
        const float ls = std::min(std::max(lp[j], LOG_STD_MIN), LOG_STD_MAX);
        const float s = std::exp(ls);
        const float ak = std::tanh(mp[j] + s * ep[j]);
        sp[j] = s;
        ap[j] = ak;
        gauss += -0.5f * ep[j] * ep[j] - ls - HALF_LOG_2PI;
        squash += std::log1p(-(ak * ak) + 1e-6f);
      }
      op[i] = gauss - squash;
    }
  }
  const float ent = static_cast<float>(ent_coef), gam = static_cast<float>(gamma);
  // target critics on [next_obs, next_a]
  Tensor xt = at::cat({x2.narrow(0, B, B), a.narrow(0, B, B)}, 1);
  CriticPass tp = critic_forward(target, xt, critic_act);
  Tensor tgt = at::empty({B}, mu.options());
  {
    const float *tq = P(tp.q), *r = P(rewards), *dn = P(dones), *nl = P(logp) + B;
    float* out = P(tgt);
    for (int64_t i = 0; i < B; ++i) {
      float m = tq[i];
      for (int64_t e = 1; e < E; ++e) m = std::min(m, tq[e * B + i]);
      out[i] = r[i] + (1.f - dn[i]) * gam * (m - ent * nl[i]);
    }
  }
  // critics on [obs, actions]: loss 0.5 * sum_e mean_i w_i td^2, its gradient per value
  Tensor xc = at::cat({x2.narrow(0, 0, B), actions}, 1);
  CriticPass cp = critic_forward(critic, xc, critic_act);
  Tensor g_q = at::empty({E, B}, mu.options()), td_abs = at::zeros({B}, mu.options());
  double loss = 0.0, qsum = 0.0;
  {
    const float *q = P(cp.q), *t = P(tgt), *w = weights ? P(*weights) : nullptr;
    float *g = P(g_q), *ta = P(td_abs);
    const float inv_b = 1.f / static_cast<float>(B);
    for (int64_t e = 0; e < E; ++e) {
      double per = 0.0;
      for (int64_t i = 0; i < B; ++i) {
        const float td = q[e * B + i] - t[i];
        const float wi = w ? w[i] : 1.f;
        g[e * B + i] = td * (wi * inv_b);
        per += static_cast<double>(td * td * wi);
        qsum += q[e * B + i];
        ta[i] = std::max(ta[i], std::fabs(td));
      }
      loss += per / B;
    }
  }
  for (int64_t e = 0; e < E; ++e)
    critic_weight_grads(critic, critic_grads, e, cp.hs[e], xc, P(g_q) + e * B, critic_act);
  std::vector<Tensor> out = {at::scalar_tensor(0.5 * loss, mu.options()),
                             at::scalar_tensor(qsum / static_cast<double>(E * B), mu.options()), td_abs, a, logp};
  if (sde) {
    out.insert(out.end(), {mu, h1, h2, noise});
  } else {
    out.insert(out.end(), {h1, h2, noise});
  }
  out.insert(out.end(), hs_a.begin(), hs_a.end());
  return out;
}

// gSDE's actor gradients from g_a [B, A], the actor loss's gradient at the actions of obs through the
// critics, and k, its gradient per logp term (ent_coef / B): per element g_u = (g_a + k * 2a / (1 - a^2 +
// 1e-6)) (1 - a^2), g_n = g_u - k n / var, g_var = k (n^2 / (2 var^2) - 1 / (2 var)), g_m = g_u where the
// mean is not clipped; then `sde_actor_backward`. `saved` is `critic_step`'s output.
void sde_actor_grads(const Tensor& x2, const std::vector<Tensor>& saved, const std::vector<Tensor>& actor,
                     const std::vector<Tensor>& actor_grads, const Tensor& g_a, float k, int64_t actor_act) {
  const int64_t B = g_a.size(0), A = g_a.size(1);
  const Tensor &a_all = saved[3], &mu_all = saved[5], &n_all = saved[6], &var_all = saved[7], &M = saved[8];
  std::vector<Tensor> hs_a(saved.begin() + saved_heads(true), saved.end());
  Tensor g_m = at::empty({B, A}, g_a.options()), g_n = at::empty({B, A}, g_a.options()),
         g_var = at::empty({B, A}, g_a.options());
  const float *ap = P(a_all), *mp = P(mu_all), *np = P(n_all), *vp = P(var_all), *gx = P(g_a);
  float *gm = P(g_m), *gn = P(g_n), *gv = P(g_var);
  for (int64_t j = 0; j < B * A; ++j) {
    const float a = ap[j], a2 = a * a;
    const float u = (gx[j] + k * (2.f * a) / (1.f - a2 + 1e-6f)) * (1.f - a2);
    const float n = np[j], v = vp[j];
    gm[j] = (mp[j] > -CLIP_MEAN && mp[j] < CLIP_MEAN) ? u : 0.f;
    gn[j] = u - k * n / v;
    gv[j] = k * (0.5f * n * n / (v * v) - 0.5f / v);
  }
  sde_actor_backward(actor, actor_grads, x2, hs_a, M, g_m, g_n, g_var, actor_act);
}

// The actor's part, after the critic's optimizer step: min over the (stepped) critics at the
// sampled action, each sample back through its argmin critic only, then the actor's gradients
// (written into actor_grads). `saved` is `critic_step`'s output. Returns [actor_loss, mean logp].
std::vector<Tensor> actor_step(const Tensor& x2, std::vector<Tensor> saved, std::vector<Tensor> actor,
                               std::vector<Tensor> actor_grads, std::vector<Tensor> critic, double ent_coef,
                               int64_t actor_act, int64_t critic_act, bool sde) {
  const Tensor &a_all = saved[3], &logp_all = saved[4];
  std::vector<Tensor> hs_a(saved.begin() + saved_heads(sde), saved.end());
  const int64_t B = x2.size(0) / 2, A = a_all.size(1), D = x2.size(1);
  const int64_t E = critic[0].size(0), L = static_cast<int64_t>(critic.size()) / 2;
  const float ent = static_cast<float>(ent_coef);
  Tensor obs = x2.narrow(0, 0, B);
  Tensor a_pi = a_all.narrow(0, 0, B);
  Tensor xp = at::cat({obs, a_pi}, 1);
  CriticPass pp = critic_forward(critic, xp, critic_act);
  // argmin member per sample and the actor loss
  std::vector<std::vector<int64_t>> rows(E);
  double loss = 0.0, lsum = 0.0;
  {
    const float *q = P(pp.q), *lp = P(logp_all);
    for (int64_t i = 0; i < B; ++i) {
      int64_t arg = 0;
      float m = q[i];
      for (int64_t e = 1; e < E; ++e)
        if (q[e * B + i] < m) m = q[e * B + i], arg = e;
      rows[arg].push_back(i);
      loss += static_cast<double>(ent * lp[i] - m);
      lsum += lp[i];
    }
  }
  // d actor_loss / d action through the argmin critic: -1/B per sample
  Tensor g_a = at::empty({B, A}, a_pi.options());
  const float g_min = -1.f / static_cast<float>(B);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t ne = static_cast<int64_t>(rows[e].size());
    if (ne == 0) continue;
    const int64_t* ri = rows[e].data();
    const Tensor& hl = pp.hs[e].back();
    const int64_t H = hl.size(1);
    const float* w = P(critic[2 * (L - 1)][e]);
    Tensor d = at::empty({ne, H}, a_pi.options());
    float* dp = P(d);
    for (int64_t r = 0; r < ne; ++r)
#pragma omp simd
      for (int64_t j = 0; j < H; ++j) dp[r * H + j] = g_min * w[j];
    act_back_(dp, P(hl), ne, H, critic_act, nullptr, ri);
    for (int64_t k = L - 2; k >= 1; --k) {
      Tensor d2 = product(d, critic[2 * k][e].t());
      act_back_(P(d2), P(pp.hs[e][k - 1]), ne, d2.size(1), critic_act, nullptr, ri);
      d = d2;
    }
    Tensor ga = product(d, critic[0][e].narrow(0, D, A).t());  // the action's columns of the input
    const float* gp = P(ga);
    float* out = P(g_a);
    for (int64_t r = 0; r < ne; ++r)
      for (int64_t k = 0; k < A; ++k) out[ri[r] * A + k] = gp[r * A + k];
  }
  if (sde) {
    sde_actor_grads(x2, saved, actor, actor_grads, g_a, ent / static_cast<float>(B), actor_act);
    return {at::scalar_tensor(loss / B, a_pi.options()), at::scalar_tensor(lsum / B, a_pi.options())};
  }
  // through the squashing and the log-probability: d/d mean and d/d unclamped log std
  Tensor g_mu = at::empty({B, A}, a_pi.options()), g_ls = at::empty({B, A}, a_pi.options());
  {
    const Tensor &std_all = saved[5], &ls_all = saved[6], &eps_all = saved[7];
    const float k = ent / static_cast<float>(B);
    const float *ap = P(a_all), *ep = P(eps_all), *sp = P(std_all), *lp = P(ls_all), *gx = P(g_a);
    float *gu = P(g_mu), *gl = P(g_ls);
    for (int64_t j = 0; j < B * A; ++j) {
      const float a = ap[j], a2 = a * a;
      const float ga = gx[j] + k * (2.f * a) / (1.f - a2 + 1e-6f);
      const float u = ga * (1.f - a2);
      gu[j] = u;
      gl[j] = (lp[j] >= LOG_STD_MIN && lp[j] <= LOG_STD_MAX) ? u * ep[j] * sp[j] - k : 0.f;
    }
  }
  actor_backward(actor, actor_grads, x2, hs_a, g_mu, g_ls, actor_act);
  return {at::scalar_tensor(loss / B, a_pi.options()), at::scalar_tensor(lsum / B, a_pi.options())};
}

// Adam's step for every parameter with a gradient (torch's fused kernel), counting each
// parameter's step in place: `torch.optim.Adam(fused=True).step()` without its per-call bookkeeping.
void adam_step(std::vector<Tensor> params, std::vector<Tensor> grads, std::vector<Tensor> exp_avgs,
               std::vector<Tensor> exp_avg_sqs, std::vector<Tensor> steps, double lr, double beta1, double beta2,
               double weight_decay, double eps) {
  for (Tensor& s : steps) *P(s) += 1.f;
  std::vector<Tensor> none;
  at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, none, steps, lr, beta1, beta2, weight_decay, eps,
                   /*amsgrad=*/false, /*maximize=*/false);
}

// dst <- lerp(dst, src, tau) for each pair (torch.lerp's formula): the target critics' Polyak update.
void polyak_(std::vector<Tensor> dst, std::vector<Tensor> src, double tau) {
  const float w = static_cast<float>(tau);
  for (size_t i = 0; i < dst.size(); ++i) {
    float* d = P(dst[i]);
    const float* s = P(src[i]);
    const int64_t n = dst[i].numel();
    if (w < 0.5f) {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) d[j] = d[j] + w * (s[j] - d[j]);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) d[j] = s[j] - (s[j] - d[j]) * (1.f - w);
    }
  }
}

// One whole step, as `SAC` takes it: the critic's gradients and Adam step, the actor's gradients
// through the stepped critic, the entropy coefficient's gradient, the actor's and the coefficient's
// Adam steps, then (polyak_dst not empty) the target update. Adam's lists hold the optimizers one after
// another (adam_sizes: critic, actor, coefficient; adam_hyper: lr, beta1, beta2, weight decay, eps of
// each). The noise is drawn from gen as the Python step draws it; with gSDE it is sde_matrix, M [H, A],
// drawn in Python (the actor draws it). One call instead of some forty
// dispatches from Python, each of which costs several microseconds once the products have pushed the
// interpreter's and the dispatcher's memory out of the caches.
// Returns [critic_loss, actor_loss, ent_coef, entropy, q_mean, td_abs].
std::vector<Tensor> train_step(const Tensor& obs, const Tensor& actions, const Tensor& next_obs, const Tensor& rewards,
                               const Tensor& dones, const c10::optional<Tensor>& weights,
                               c10::optional<at::Generator> gen, const Tensor& log_ent_coef,
                               const c10::optional<Tensor>& ent_grad, double target_entropy, double gamma,
                               std::vector<Tensor> actor, std::vector<Tensor> critic, std::vector<Tensor> target,
                               std::vector<Tensor> actor_grads, std::vector<Tensor> critic_grads,
                               std::vector<Tensor> adam_params, std::vector<Tensor> adam_grads,
                               std::vector<Tensor> adam_m, std::vector<Tensor> adam_v, std::vector<Tensor> adam_steps,
                               std::vector<int64_t> adam_sizes, std::vector<double> adam_hyper,
                               std::vector<Tensor> polyak_dst, std::vector<Tensor> polyak_src, double tau,
                               int64_t actor_act, int64_t critic_act, const c10::optional<Tensor>& sde_matrix) {
  const int64_t B = obs.size(0);
  const auto f32 = obs.options().dtype(at::kFloat);
  Tensor x2 = at::cat({obs.reshape({B, -1}), next_obs.reshape({B, -1})}).to(at::kFloat).contiguous();
  Tensor act = actions.reshape({B, -1}).to(at::kFloat).contiguous();
  const int64_t A = act.size(1);
  const bool sde = sde_matrix.has_value();
  Tensor noise = sde ? sde_matrix->contiguous() : at::cat({at::randn({B, A}, gen, f32), at::randn({B, A}, gen, f32)});
  Tensor ent = log_ent_coef.detach().exp();
  const double ent_f = static_cast<double>(ent.item<float>());
  c10::optional<Tensor> w;
  if (weights) w = weights->to(at::kFloat).contiguous();
  auto adam = [&](size_t g) {
    int64_t lo = 0;
    for (size_t i = 0; i < g; ++i) lo += adam_sizes[i];
    const int64_t n = adam_sizes[g];
    if (n == 0) return;
    auto part = [&](const std::vector<Tensor>& v) { return std::vector<Tensor>(v.begin() + lo, v.begin() + lo + n); };
    const double* h = adam_hyper.data() + 5 * g;
    adam_step(part(adam_params), part(adam_grads), part(adam_m), part(adam_v), part(adam_steps), h[0], h[1], h[2],
              h[3], h[4]);
  };
  std::vector<Tensor> saved = critic_step(x2, act, rewards.to(at::kFloat).contiguous(),
                                          dones.to(at::kFloat).contiguous(), w, noise, actor, critic, target,
                                          critic_grads, ent_f, gamma, actor_act, critic_act, sde);
  adam(0);
  std::vector<Tensor> a = actor_step(x2, saved, actor, actor_grads, critic, ent_f, actor_act, critic_act, sde);
  if (ent_grad) ent_grad->fill_(-(a[1].item<float>() + static_cast<float>(target_entropy)));
  adam(1);
  adam(2);
  if (!polyak_dst.empty()) polyak_(polyak_dst, polyak_src, tau);
  return {saved[0], a[0], ent.squeeze(), a[1].neg(), saved[1], saved[2]};
}

}  // namespace tinker_sac

TORCH_LIBRARY(tinker_sac, m) {
  m.def("critic_step(Tensor x2, Tensor actions, Tensor rewards, Tensor dones, Tensor? weights, Tensor noise, "
        "Tensor[] actor, Tensor[] critic, Tensor[] target, Tensor[] critic_grads, float ent_coef, float gamma, "
        "int actor_act, int critic_act, bool sde) -> Tensor[]");
  m.def("actor_step(Tensor x2, Tensor[] saved, Tensor[] actor, Tensor[] actor_grads, Tensor[] critic, "
        "float ent_coef, int actor_act, int critic_act, bool sde) -> Tensor[]");
  m.def("adam_step(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
        "Tensor(d!)[] steps, float lr, float beta1, float beta2, float weight_decay, float eps) -> ()");
  m.def("polyak_(Tensor(a!)[] dst, Tensor[] src, float tau) -> ()");
  m.def("set_gemm(int dnn) -> int", &tinker_sac::set_gemm);  // no tensor arguments: one kernel for all
  m.def("time_gemm(int dnn, int n, int rounds) -> float", &tinker_sac::time_gemm);
  m.def("train_step(Tensor obs, Tensor actions, Tensor next_obs, Tensor rewards, Tensor dones, Tensor? weights, "
        "Generator? gen, Tensor log_ent_coef, Tensor(a!)? ent_grad, float target_entropy, float gamma, "
        "Tensor[] actor, Tensor[] critic, Tensor[] target, Tensor[] actor_grads, Tensor[] critic_grads, "
        "Tensor(b!)[] adam_params, Tensor[] adam_grads, Tensor(c!)[] adam_m, Tensor(d!)[] adam_v, "
        "Tensor(e!)[] adam_steps, int[] adam_sizes, float[] adam_hyper, Tensor(f!)[] polyak_dst, "
        "Tensor[] polyak_src, float tau, int actor_act, int critic_act, Tensor? sde_matrix) -> Tensor[]");
}

TORCH_LIBRARY_IMPL(tinker_sac, CPU, m) {
  m.impl("critic_step", &tinker_sac::critic_step);
  m.impl("actor_step", &tinker_sac::actor_step);
  m.impl("adam_step", &tinker_sac::adam_step);
  m.impl("polyak_", &tinker_sac::polyak_);
  m.impl("train_step", &tinker_sac::train_step);
}
