// float32 exp, log, tanh, sigmoid, erf and gelu written so that a loop calling them vectorizes (internal).
// std:: math calls libm one element at a time; these are branch-free (selects, no calls), so GCC turns
// `for (i) y[i] = simd::exp(x[i])` into SIMD code at the width the build targets (-march=native:
// AVX-512 or AVX2). Each is a range reduction and a polynomial fitted (near-minimax, coefficients
// rounded to float) for this file. Accuracy against the exact value, measured over a sample of all
// float32 values and every float near the formula switches (tests/ops/simd_math_test.cpp): exp and log
// within 1 ulp, tanh and erf within 1.5, sigmoid within 2.5.
// Special values (±0, ±inf, NaN, subnormal inputs and results) come out as std:: gives them.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

// Every function here is forced inline: a loop vectorizes only over code it sees, and GCC's size
// heuristics (and -fPIC's interposable calls) would otherwise leave exp as a call.
#define LOOM_SIMD_INLINE inline __attribute__((always_inline))

namespace loom::simd {

namespace detail {

LOOM_SIMD_INLINE float from_bits(int32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
LOOM_SIMD_INLINE int32_t to_bits(float f) {
  int32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
// a * b + c, fused where the target has FMA (a libm fmaf call would not vectorize).
LOOM_SIMD_INLINE float mul_add(float a, float b, float c) {
#ifdef __FMA__
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}
// c0 x^n + c1 x^(n-1) + ... + cn by Horner's rule: ((c0 x + c1) x + c2) ..., each step one mul_add.
LOOM_SIMD_INLINE float horner(float, float c) { return c; }
template <typename... C>
LOOM_SIMD_INLINE float horner(float x, float c0, float c1, C... rest) {
  return horner(x, mul_add(c0, x, c1), rest...);
}
LOOM_SIMD_INLINE float abs(float x) { return from_bits(to_bits(x) & 0x7fffffff); }
// |m| with the sign of s.
LOOM_SIMD_INLINE float with_sign_of(float m, float s) {
  return from_bits((to_bits(m) & 0x7fffffff) | (to_bits(s) & INT32_MIN));
}
// c ? a : b, as a bit blend: GCC sinks the computation of a select's operand into a branch when the
// other side does not need it, and a branch holding float math (which may raise exceptions under
// -ftrapping-math) stops the loop from vectorizing. A blend uses both operands, so nothing sinks.
LOOM_SIMD_INLINE float blend(bool c, float a, float b) {
  const int32_t m = -static_cast<int32_t>(c);
  return from_bits((to_bits(a) & m) | (to_bits(b) & ~m));
}
inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace detail

namespace detail {
// e^xc for a clamped xc: x = n ln2 + r with |r| <= ln2 / 2 and e^r = 1 + r + r^2 P(r). Returns e^r
// and n.
LOOM_SIMD_INLINE float exp_reduced(float xc, int32_t& n) {
  // n = round(x / ln2) by adding and subtracting 1.5 * 2^23 (floorf would not vectorize).
  const float fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // ln2 = 0.693359375 (exact in 9 bits, so fn * it is exact) - 2.12194440e-4.
  float r = mul_add(fn, -0.693359375f, xc);
  r = mul_add(fn, 2.12194440e-4f, r);
  const float q = horner(r, 1.973942708e-4f, 1.393508748e-3f, 8.333571255e-3f, 4.166646302e-2f, 1.666666567e-1f, 0.5f);
  n = static_cast<int32_t>(fn);
  return mul_add(q, r * r, r) + 1.0f;
}
// e^x for x in [-87, 88], where the result is a normal float: exp without the clamping, the NaN
// check and the two-factor scaling that only subnormal or overflowing results need (same bits).
LOOM_SIMD_INLINE float exp_normal_range(float x) {
  int32_t n;
  const float p = exp_reduced(x, n);
  return p * from_bits((n + 127) << 23);
}
}  // namespace detail

/// e^x. x = n ln2 + r with |r| <= ln2 / 2, e^r = 1 + r + r^2 P(r), and 2^n applied as two factors so
/// that results in the subnormal range round once (as expf's do).
LOOM_SIMD_INLINE float exp(float x) {
  using namespace detail;
  // Clamp (NaN goes to -104, so the integer conversion below stays defined; NaN is restored last).
  float xc = blend(x > -104.0f, x, -104.0f);
  xc = blend(xc < 89.0f, xc, 89.0f);
  int32_t n;
  const float p = exp_reduced(xc, n);
  // 2^n = 2^n1 * 2^n2 with n in [-150, 128]: both factors are normal floats, and the first product
  // is exact, so only the last multiply rounds (to a subnormal, to FLT_MAX or to inf).
  const int32_t n1 = n >> 1, n2 = n - n1;
  const float y = (p * from_bits((n1 + 127) << 23)) * from_bits((n2 + 127) << 23);
  return blend(x != x, x, y);
}

/// Natural log. x = 2^k m with m in [sqrt(1/2), sqrt(2)), f = m - 1, s = f / (2 + f), and
/// log(1 + f) = 2 atanh(s) = f - f^2/2 + s (f^2/2 + s^2 Q(s^2)), summed so that f (exact) goes last.
LOOM_SIMD_INLINE float log(float x) {
  using namespace detail;
  const int32_t ix = to_bits(x);
  const bool sub = ix < 0x00800000;  // subnormal (or <= 0: replaced at the end)
  const int32_t bits = to_bits(blend(sub, x * 8388608.0f, x));  // * 2^23
  int32_t k = ((bits >> 23) & 0xff) - (sub ? 127 + 23 : 127);
  const int32_t mbits = (bits & 0x007fffff) | 0x3f800000;  // m in [1, 2)
  const bool big = mbits > 0x3fb504f3;  // m > sqrt(2)
  const float m = from_bits(big ? mbits - 0x00800000 : mbits);  // m / 2 when big
  k += big;
  const float f = m - 1.0f;  // exact
  const float s = f / (2.0f + f);
  const float z = s * s;
  const float q = horner(z, 2.987189591e-1f, 3.997755945e-1f, 6.666677594e-1f);
  const float R = z * q;
  const float hfsq = 0.5f * f * f;
  const float kf = static_cast<float>(k);
  // ln2 = 0.693145751953125 (16 bits, so kf * it is exact) + 1.42860677e-6.
  const float y = kf * 0.693145751953125f - ((hfsq - mul_add(s, hfsq + R, kf * 1.42860677e-6f)) - f);
  const int32_t ax = ix & 0x7fffffff;
  float special = ax == 0 ? -kInf : kNaN;            // ±0; x < 0
  special = ix == 0x7f800000 ? x : special;          // +inf
  special = ax > 0x7f800000 ? x : special;           // NaN
  return blend(static_cast<uint32_t>(ix) - 1u < 0x7f7fffffu, y, special);  // 0 < x < inf (unsigned wrap)
}

/// tanh(x): x + x^3 P(x^2) for |x| < 0.625, else 1 - 2 / (e^{2|x|} + 1) with x's sign.
LOOM_SIMD_INLINE float tanh(float x) {
  using namespace detail;
  const float a = abs(x);
  const float z = x * x;
  const float p = horner(z, 2.152681118e-3f, -8.190012537e-3f, 2.170689404e-2f, -5.394817889e-2f, 1.333322078e-1f,
                         -3.333333135e-1f);
  const float small = mul_add(x * z, p, x);
  // e^{2|x|} for the lanes that use it (|x| >= 0.625): 2|x| clamped to 88 (from |x| = 9.01 on tanh
  // rounds to 1), so the result is normal. NaN lanes go to 88 and get their NaN back below.
  const float a2 = blend(a + a < 88.0f, a + a, 88.0f);
  const float e = exp_normal_range(a2);
  const float large = 1.0f - 2.0f / (e + 1.0f);
  return blend(x != x, x, with_sign_of(blend(a < 0.625f, small, large), x));  // keeps tanh(-0) = -0
}

/// 1 / (1 + e^-x), as 1 / (1 + e^-|x|) or e^-|x| / (1 + e^-|x|) so that neither side overflows.
LOOM_SIMD_INLINE float sigmoid(float x) {
  const float e = exp(-detail::abs(x));
  return detail::blend(x >= 0.0f, 1.0f, e) / (1.0f + e);
}

namespace detail {
// erfc(t) e^{t^2} for t in [1, 4], a polynomial in t - 1.
LOOM_SIMD_INLINE float erfcx_1_4(float t) {
  return horner(t - 1.0f, 1.086539924e-4f, -1.069548074e-3f, 4.945400171e-3f, -1.515754126e-2f,
                3.691078350e-2f, -7.906793058e-2f, 1.543535292e-1f, -2.732113302e-1f, 4.275835752e-1f);
}
}  // namespace detail

/// erf(x) given e = e^{-x^2}: x + x P(x^2) for |x| < 1, else 1 - e Q(|x|) with x's sign (1 from
/// |x| = 3.92 on, where erf rounds to 1: there any e in [0, e^{-16}] gives it). For callers that
/// need that exponential themselves (erf's derivative): they compute it once.
LOOM_SIMD_INLINE float erf_given_exp(float x, float e) {
  using namespace detail;
  const float z = x * x;
  const float p = horner(z, 7.806903159e-5f, -7.997853099e-4f, 5.187162198e-3f, -2.685334720e-2f, 1.128357872e-1f,
                         -3.761262596e-1f, 1.283791661e-1f);
  const float small = mul_add(x, p, x);
  const float a = abs(x);
  const float t = blend(a < 4.0f, a, 4.0f);
  const float large = with_sign_of(1.0f - e * erfcx_1_4(t), x);
  return blend(x != x, x, blend(a < 1.0f, small, large));
}

/// erf(x), as erf_given_exp with e^{-t^2}, t = min(|x|, 4) (NaN too): always a normal float.
LOOM_SIMD_INLINE float erf(float x) {
  const float a = detail::abs(x);
  const float t = detail::blend(a < 4.0f, a, 4.0f);
  return erf_given_exp(x, detail::exp_normal_range(-(t * t)));
}

/// Exact GELU, x (1 + erf(x / sqrt 2)) / 2, as nn::gelu computes it.
LOOM_SIMD_INLINE float gelu(float x) { return 0.5f * x * (1.0f + erf(x * 0.707106781186547524f)); }

/// GELU's tanh approximation, x sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)), as nn::gelu_approx.
LOOM_SIMD_INLINE float gelu_tanh(float x) {
  const float c1 = 1.59576912160573073f;  // 2 sqrt(2 / pi)
  const float c2 = c1 * 0.044715f;
  return x * sigmoid(x * (x * x * c2 + c1));
}

}  // namespace loom::simd
