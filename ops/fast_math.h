// Scalar math written so that loops over it vectorize (libm's expf/erff run one element at a time)
// (internal).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "loom/ops/kernels/simd_math.h"

namespace loom::detail {

/// simd::exp for float (vectorizes), std::exp otherwise.
template <typename A>
LOOM_SIMD_INLINE A exp_of(A x) {
  if constexpr (std::is_same_v<A, float>) {
    return simd::exp(x);
  } else {
    return std::exp(x);
  }
}

}  // namespace loom::detail

namespace loom::detail {

/// erf for float32 (simd::erf); `e` receives exp(-x^2), which the derivative 2 / sqrt(pi) exp(-x^2)
/// needs too: one exponential serves both.
LOOM_SIMD_INLINE float erf_vec(float x, float& e) {
  e = simd::exp(-x * x);
  return simd::erf_given_exp(x, e);
}

}  // namespace loom::detail

namespace loom::detail {

/// sum of f(0) .. f(n-1) in 16 independent lanes, so the loop vectorizes (a single running sum is a
/// serial dependency the compiler may not reorder).
template <typename T, typename F>
inline T lane_sum(int n, F f) {
  constexpr int W = 16;
  T lanes[W] = {};
  int j = 0;
  for (; j + W <= n; j += W) {
    for (int l = 0; l < W; ++l) lanes[l] += f(j + l);
  }
  T s = 0;
  for (int l = 0; l < W; ++l) s += lanes[l];
  for (; j < n; ++j) s += f(j);
  return s;
}

/// max of x[0] .. x[n-1] (-inf for n = 0; NaNs are skipped) in 16 lanes.
template <typename T>
inline T lane_max(const T* x, int n) {
  constexpr int W = 16;
  T lanes[W];
  for (int l = 0; l < W; ++l) lanes[l] = -std::numeric_limits<T>::infinity();
  int j = 0;
  for (; j + W <= n; j += W) {
    for (int l = 0; l < W; ++l) lanes[l] = std::max(lanes[l], x[j + l]);
  }
  T m = -std::numeric_limits<T>::infinity();
  for (int l = 0; l < W; ++l) m = std::max(m, lanes[l]);
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

}  // namespace loom::detail
