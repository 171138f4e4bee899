// Scalar math written so that loops over it vectorize (libm's expf/erff run one element at a time)
// (internal).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace loom::detail {

// exp for float32: Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, and Cephes' degree-7
// polynomial for e^r: at most 1.03 ulp from the exact value on every float in [-87, 88] (measured).
// Below -87.3 (where expf leaves the normal range) it returns 0, above 88.72 +inf, and NaN stays NaN.
inline float exp_vec(float x) {
  const float xc = std::min(std::max(x, -87.3f), 88.0f);
  // n = round(x / ln2) by the 1.5 * 2^23 trick (floorf would not vectorize without -fno-trapping-math).
  const float fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - fn * 0.693359375f;  // ln2 split into an exact high part and a low part
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(fn) + 127) << 23;  // 2^n, n in [-126, 127]
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  float y = p * scale;
  y = x < -87.3f ? 0.0f : y;
  y = x > 88.72f ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;
}

/// exp_vec for float, std::exp otherwise.
template <typename A>
inline A exp_of(A x) {
  if constexpr (std::is_same_v<A, float>) {
    return exp_vec(x);
  } else {
    return std::exp(x);
  }
}

}  // namespace loom::detail

namespace loom::detail {

/// erf for float32 by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7) with exp_vec;
/// `e` receives exp(-x^2), which the derivative 2 / sqrt(pi) exp(-x^2) needs too.
inline float erf_vec(float x, float& e) {
  const float a = std::abs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  e = exp_vec(-a * a);
  const float y = 1.0f - p * t * e;
  return x < 0 ? -y : y;
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
