// Kernels shared by the compiled steps (sac_native.cpp, ppo_native.cpp, dqn_native.cpp): an activation's
// backward, layers with few inputs (where a BLAS call costs several times a pass over the result), and the
// backward pass through an MLP's hidden layers.

#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tinker_sac {  // sac_native.cpp: the products, through the BLAS or oneDNN (one choice per machine)
void product_into(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b);
at::Tensor product(const at::Tensor& a, const at::Tensor& b);
}  // namespace tinker_sac

namespace tinker_native {

using at::Tensor;

constexpr int64_t RELU = 0;  // activation codes: 0 relu, anything else tanh

inline float* P(const Tensor& t) { return t.data_ptr<float>(); }

// Row r of d (r in rows, or all n rows when rows is null) <- d * act'(h[src(r)]), h = act(z) [., m];
// the column sums of the result go to gb when given.
inline void act_back_(float* d, const float* h, int64_t n, int64_t m, int64_t act, float* gb,
                      const int64_t* rows = nullptr) {
  if (gb) std::fill(gb, gb + m, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    float* dr = d + i * m;
    const float* hr = h + (rows ? rows[i] : i) * m;
    if (act == RELU) {
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) dr[j] = hr[j] > 0.f ? dr[j] : 0.f;
    } else {
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) dr[j] *= 1.f - hr[j] * hr[j];
    }
    if (gb) {
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) gb[j] += dr[j];
    }
  }
}

// Inputs this few (the first layers: observation and action) go through the loops below.
constexpr int64_t NARROW = 16;

// z [n, m] <- act(x @ Wt + b) for x [n, c] with c small, Wt [c, m]: one pass over z.
inline Tensor narrow_linear(const Tensor& x, const Tensor& Wt, const Tensor& b, int64_t act) {
  const int64_t n = x.size(0), c = x.size(1), m = Wt.size(1);
  Tensor z = at::empty({n, m}, x.options());
  const float *xp = P(x), *wp = P(Wt), *bp = P(b);
  float* zp = P(z);
  for (int64_t i = 0; i < n; ++i) {
    float* r = zp + i * m;
#pragma omp simd
    for (int64_t j = 0; j < m; ++j) r[j] = bp[j];
    for (int64_t k = 0; k < c; ++k) {
      const float xv = xp[i * c + k];
      const float* wr = wp + k * m;
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) r[j] += xv * wr[j];
    }
    if (act == RELU) {
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) r[j] = r[j] > 0.f ? r[j] : 0.f;
    }
  }
  if (act != RELU) z.tanh_();
  return z;
}

// gWt [c, m] <- x^T d for x [n, c] with c small, d [n, m].
inline void narrow_weight_grad(const Tensor& x, const Tensor& d, float* gWt) {
  const int64_t n = x.size(0), c = x.size(1), m = d.size(1);
  const float *xp = P(x), *dp = P(d);
  std::fill(gWt, gWt + c * m, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    const float* dr = dp + i * m;
    for (int64_t k = 0; k < c; ++k) {
      const float xv = xp[i * c + k];
      float* g = gWt + k * m;
#pragma omp simd
      for (int64_t j = 0; j < m; ++j) g[j] += xv * dr[j];
    }
  }
}

// Backward through hidden layers last..0 of an MLP (nn.Linear layouts: net[2k] = W_k [out, in], grads[2k],
// grads[2k + 1] its weight and bias gradients). d [B, m] enters as the gradient at layer `last`'s output
// (after its activation); each layer takes its activation's backward (bias gradient with it), its weight
// gradient from its input (the first B rows of x for layer 0, else of hs[k - 1]) and hands d on through W_k.
inline void hidden_backward(Tensor d, const Tensor& x, const std::vector<Tensor>& hs, const std::vector<Tensor>& net,
                            const std::vector<Tensor>& grads, int64_t last, int64_t act) {
  const int64_t B = d.size(0);
  for (int64_t k = last; k >= 0; --k) {
    act_back_(P(d), P(hs[k]), B, d.size(1), act, P(grads[2 * k + 1]));
    const Tensor in = (k == 0 ? x : hs[k - 1]).narrow(0, 0, B);
    Tensor gW = grads[2 * k];
    if (in.size(1) < NARROW) {
      Tensor gWt = at::empty({in.size(1), d.size(1)}, d.options());
      narrow_weight_grad(in, d, P(gWt));
      gW.copy_(gWt.t());
    } else {
      tinker_sac::product_into(gW, d.t(), in);
    }
    if (k > 0) d = tinker_sac::product(d, net[2 * k]);
  }
}

}  // namespace tinker_native
