// Kernels shared by the compiled steps (sac_native.cpp, ppo_native.cpp): an activation's backward, and
// layers with few inputs, where a BLAS call costs several times a pass over the result.

#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>

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

}  // namespace tinker_native
