#include "loom/ops/random.h"
#include "loom/ops/linalg.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "loom/core/eval.h"
#include "loom/core/primitive.h"
#include "loom/core/serialize.h"
#include "loom/ops/batching.h"
#include "loom/ops/elementwise.h"
#include "loom/kernels/elementwise.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::random {

using ::loom::detail::msg;
using ::loom::detail::shape_str;
using Key = std::array<uint32_t, 2>;

namespace {

// ---------------------------------------------------------------------------------------------
// MLX's stream layout (mlx/backend/cpu RandomBits). A draw of n 32-bit words from key k: with
// h = n / 2 and o = h + (n odd), threefry2x32(k, (j, j + o)) gives words j and j + o for j < h, and
// when n is odd threefry2x32(k, (h, 0)) gives word h (its first output). Counters are taken mod 2^32.
// Calls f(w, word) for every word w in [0, n), split across threads; word w depends only on (key, n, w).
// Threefry-2x32 (20 rounds) of kLanes counter pairs at once, in lane-wise loops the compiler turns
// into vector instructions. x0, x1: the counters in, the two output words out.
constexpr int kLanes = 16;
using Lanes = uint32_t[kLanes];

template <int R>
[[gnu::always_inline]] inline void lanes_round(Lanes& x0, Lanes& x1) {
  for (int l = 0; l < kLanes; ++l) {
    x0[l] += x1[l];
    x1[l] = (x1[l] << R) | (x1[l] >> (32 - R));
    x1[l] ^= x0[l];
  }
}
// Four rounds (rotations R0..R3), then key injection i (ks[i % 3], ks[(i + 1) % 3] + i).
template <int R0, int R1, int R2, int R3>
[[gnu::always_inline]] inline void lanes_four(Lanes& x0, Lanes& x1, uint32_t a, uint32_t b) {
  lanes_round<R0>(x0, x1);
  lanes_round<R1>(x0, x1);
  lanes_round<R2>(x0, x1);
  lanes_round<R3>(x0, x1);
  for (int l = 0; l < kLanes; ++l) {
    x0[l] += a;
    x1[l] += b;
  }
}
inline void threefry_lanes(const Key& k, Lanes& x0, Lanes& x1) {
  const uint32_t ks[3] = {k[0], k[1], 0x1BD11BDAu ^ k[0] ^ k[1]};
  for (int l = 0; l < kLanes; ++l) {
    x0[l] += ks[0];
    x1[l] += ks[1];
  }
  lanes_four<13, 15, 26, 6>(x0, x1, ks[1], ks[2] + 1);
  lanes_four<17, 29, 16, 24>(x0, x1, ks[2], ks[0] + 2);
  lanes_four<13, 15, 26, 6>(x0, x1, ks[0], ks[1] + 3);
  lanes_four<17, 29, 16, 24>(x0, x1, ks[1], ks[2] + 4);
  lanes_four<13, 15, 26, 6>(x0, x1, ks[2], ks[0] + 5);
}

template <typename F>
void draw(const Key& key, size_t n, F f) {
  const size_t h = n / 2, o = h + (n & 1);
  kernels::parallel_for(
      h,
      [&](size_t b, size_t e) {
        const Key k = key;
        alignas(64) Lanes x0, x1;
        for (size_t j0 = b; j0 < e; j0 += kLanes) {
          const int m = static_cast<int>(std::min<size_t>(kLanes, e - j0));
          for (int l = 0; l < kLanes; ++l) {
            x0[l] = static_cast<uint32_t>(j0 + l);
            x1[l] = static_cast<uint32_t>(j0 + l + o);
          }
          threefry_lanes(k, x0, x1);
          for (int l = 0; l < m; ++l) f(j0 + l, x0[l]);
          for (int l = 0; l < m; ++l) f(j0 + l + o, x1[l]);
        }
      },
      // Each pair costs a Threefry block: parallelize sooner than plain copies.
      size_t(1) << 12);
  if (n & 1) f(h, detail::threefry2x32<20>(key, {static_cast<uint32_t>(h), 0u})[0]);
}

// ---- MLX's float32 arithmetic (mlx/backend/cpu/simd/math.h, scalar path), reproduced bit for bit ----

// exp(x) as 2^round(x log2 e) times a degree-6 polynomial in the remainder (Cephes constants).
inline float mlx_exp(float x0) {
  const float x = x0 * 1.442695f;
  const float ip = static_cast<float>(std::floor(static_cast<double>(x) + 0.5));
  const float fp = x - ip;
  float p = 1.535336188319500e-4f;
  p = std::fma(p, fp, 1.339887440266574e-3f);
  p = std::fma(p, fp, 9.618437357674640e-3f);
  p = std::fma(p, fp, 5.550332471162809e-2f);
  p = std::fma(p, fp, 2.402264791363012e-1f);
  p = std::fma(p, fp, 6.931472028550421e-1f);
  p = std::fma(p, fp, 1.000000000000000f);
  // ip leaves [-127, 128] only where x0 is NaN or beyond +-88, whose results are set below; there it
  // may be infinite or NaN, which must not reach the int cast (undefined behaviour: clang's UBSan
  // stops there).
  const int32_t ii = (ip >= -127.0f && ip <= 128.0f) ? static_cast<int32_t>(ip) : 0;
  const uint32_t eb = static_cast<uint32_t>(ii + 127) << 23;
  float scale;
  std::memcpy(&scale, &eb, sizeof(scale));
  float r = std::isnan(x0) ? x0 : scale * p;
  if (x0 > 88.0f) r = std::numeric_limits<float>::infinity();
  if (x0 < -88.0f) r = 0.0f;
  return r;
}

// erf(x) by Abramowitz-Stegun 7.1.26 with mlx_exp.
inline float mlx_erf(float v) {
  const float t = 1.0f / std::fma(0.3275911f, std::fabs(v), 1.0f);
  float r = std::fma(1.061405429f, t, -1.453152027f);
  r = std::fma(r, t, 1.421413741f);
  r = std::fma(r, t, -0.284496736f);
  r = std::fma(r, t, 0.254829592f);
  const float e = -mlx_exp(-v * v);
  const float res = std::fma(e * t, r, 1.0f);
  return v > 0 ? res : -res;
}

// erfinv(a): a polynomial in log(1 - a^2), one of two by |log(1 - a^2)| > 6.125.
inline float mlx_erfinv(float a) {
  const float t = std::log(std::fma(a, 0.0f - a, 1.0f));
  float p;
  if (std::fabs(t) > 6.125f) {
    p = 3.03697567e-10f;
    p = std::fma(p, t, 2.93243101e-8f);
    p = std::fma(p, t, 1.22150334e-6f);
    p = std::fma(p, t, 2.84108955e-5f);
    p = std::fma(p, t, 3.93552968e-4f);
    p = std::fma(p, t, 3.02698812e-3f);
    p = std::fma(p, t, 4.83185798e-3f);
    p = std::fma(p, t, -2.64646143e-1f);
    p = std::fma(p, t, 8.40016484e-1f);
  } else {
    p = 5.43877832e-9f;
    p = std::fma(p, t, 1.43285448e-7f);
    p = std::fma(p, t, 1.22774793e-6f);
    p = std::fma(p, t, 1.12963626e-7f);
    p = std::fma(p, t, -5.61530760e-5f);
    p = std::fma(p, t, -1.47697632e-4f);
    p = std::fma(p, t, 2.31468678e-3f);
    p = std::fma(p, t, 1.15392581e-2f);
    p = std::fma(p, t, -2.32015476e-1f);
    p = std::fma(p, t, 8.86226892e-1f);
  }
  return a * p;
}

// Arithmetic in T with one rounding per operation, as MLX's separate elementwise ops do (half types
// compute in float32 and round; this file is compiled with -ffp-contract=off, so no fused a*b+c).
template <typename T>
inline T t_mul(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return a * b;
  else return T(static_cast<float>(a) * static_cast<float>(b));
}
template <typename T>
inline T t_add(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return a + b;
  else return T(static_cast<float>(a) + static_cast<float>(b));
}
template <typename T>
inline T t_sub(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return a - b;
  else return T(static_cast<float>(a) - static_cast<float>(b));
}
template <typename T>
inline T t_div(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return a / b;
  else return T(static_cast<float>(a) / static_cast<float>(b));
}
template <typename T>
inline T t_log(T a) {
  if constexpr (std::is_floating_point_v<T>) return std::log(a);
  else return T(std::log(static_cast<float>(a)));
}

// The largest value of a 16-bit float type below 1, as float32 (MLX's below_one).
template <typename T>
float below_one() {
  T one(1.0f);
  one.bits = static_cast<uint16_t>(one.bits - 1);
  return static_cast<float>(one);
}

// MLX's uniform in [0, 1) for a result of type T (float32, float16, bfloat16): the word as float32
// divided by 2^32 (float(UINT32_MAX)), capped at the largest T below 1, then cast to T.
template <typename T>
inline T unit(uint32_t w, float cap) {
  const float u = std::min(static_cast<float>(w) / 4294967296.0f, cap);
  return static_cast<T>(u);
}
template <typename T>
float unit_cap() {
  if constexpr (std::is_same_v<T, float>) return std::nextafter(1.0f, 0.0f);
  else return below_one<T>();
}

// The output elements drawn from one key: the whole output, or one key's block of it.
struct Block {
  void* data;
  size_t n, item;
  size_t size() const { return n; }
  size_t itemsize() const { return item; }
  void* raw_data() const { return data; }
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

// float64 results (Loom only: MLX's uniform has no float64): a 64-bit word per element (words 2i and
// 2i + 1 of a draw of 2n words, as bits(shape, 8) gives them), u = (w >> 11) 2^-53 in [0, 1).
inline double unit64(uint64_t w) { return static_cast<double>(w >> 11) * 0x1p-53; }

// Fills out (n elements of 8 bytes) with 64-bit words, then calls f(i, word) on each in place.
template <typename F>
void draw64(const Key& k, const Block& out, F f) {
  const size_t n = out.size();
  uint32_t* w32 = static_cast<uint32_t*>(out.raw_data());
  draw(k, 2 * n, [&](size_t w, uint32_t v) { w32[w] = v; });
  const uint64_t* w64 = static_cast<const uint64_t*>(out.raw_data());
  kernels::parallel_for(n, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) f(i, w64[i]);
  });
}

// A distribution parameter broadcast to the output shape, read by flat index.
template <typename P>
struct Param {
  std::optional<array> hold;
  const P* p = nullptr;
  bool scalar = true;
  explicit Param(const array& a) {
    if (a.data_size() == 1) {
      p = kernels::ptr<P>(a);
    } else {
      hold = kernels::row_contiguous(a);
      p = kernels::ptr<P>(*hold);
      scalar = false;
    }
  }
  P operator[](size_t i) const { return scalar ? p[0] : p[i]; }
  // The parameter from flat index `off` on (the block of one key of a batch of keys).
  Param from(size_t off) const {
    Param q = *this;
    if (!scalar) q.p += off;
    return q;
  }
};

enum class Dist { bits, uniform, normal, truncated_normal, randint, bernoulli, gumbel, laplace, permutation, categorical };

const char* dist_name(Dist d) {
  switch (d) {
    case Dist::bits: return "RandomBits";
    case Dist::uniform: return "RandomUniform";
    case Dist::normal: return "RandomNormal";
    case Dist::truncated_normal: return "RandomTruncatedNormal";
    case Dist::randint: return "RandomInt";
    case Dist::bernoulli: return "RandomBernoulli";
    case Dist::gumbel: return "RandomGumbel";
    case Dist::laplace: return "RandomLaplace";
    case Dist::permutation: return "RandomPermutation";
    case Dist::categorical: return "RandomCategorical";
  }
  return "Random";
}

// ---- kernels ----

// bits: the draw's words are the little-endian bytes of the output (MLX's layout for widths 1, 2
// and 4: ceil(n * width / 4) words, the last one cut to the bytes that remain; width 8 is 2n words).
void bits_kernel(const Key& k, const Block& out) {
  const size_t nbytes = out.size() * out.itemsize();
  char* y = static_cast<char*>(out.raw_data());
  draw(k, (nbytes + 3) / 4, [&](size_t w, uint32_t v) {
    if (4 * w + 4 <= nbytes) std::memcpy(y + 4 * w, &v, 4);
    else std::memcpy(y + 4 * w, &v, nbytes - 4 * w);
  });
}

// uniform: MLX's range * u + low in T, range = high - low in T.
template <typename T>
void uniform_kernel(const Key& k, const Param<T>& lo, const Param<T>& hi, const Block& out) {
  T* y = out.ptr<T>();
  if constexpr (sizeof(T) == 8) {
    draw64(k, out, [&](size_t i, uint64_t w) { y[i] = t_add(t_mul(t_sub(hi[i], lo[i]), T(unit64(w))), lo[i]); });
  } else {
    const float cap = unit_cap<T>();
    draw(k, out.size(), [&](size_t i, uint32_t w) {
      y[i] = t_add(t_mul(t_sub(hi[i], lo[i]), unit<T>(w, cap)), lo[i]);
    });
  }
}

// MLX's normal/laplace source: float32 uniform in [nextafter(-1, 0), 1).
inline float sym_unit(uint32_t w) {
  const float lo = std::nextafter(-1.0f, 0.0f);
  static const float range = 1.0f - std::nextafter(-1.0f, 0.0f);  // 2 in float32
  return range * unit<float>(w, std::nextafter(1.0f, 0.0f)) + lo;
}

// normal: loc + (sqrt(2) * scale) * T(erfinv(u)), each step rounded in T as MLX's ops are.
template <typename T>
void normal_kernel(const Key& k, std::optional<double> loc, std::optional<double> scale, const Block& out) {
  T* y = out.ptr<T>();
  T s = static_cast<T>(std::sqrt(2.0));
  if (scale) s = t_mul(s, static_cast<T>(*scale));
  const bool has_loc = loc.has_value();
  const T l = static_cast<T>(loc.value_or(0.0));
  draw(k, out.size(), [&](size_t i, uint32_t w) {
    T z = t_mul(s, static_cast<T>(mlx_erfinv(sym_unit(w))));
    y[i] = has_loc ? t_add(l, z) : z;
  });
}

// laplace: sign(u) * log1p(-|u|) (float32, or float64 for float64 results), then scale and loc in T.
template <typename T>
void laplace_kernel(const Key& k, double loc, double scale, const Block& out) {
  T* y = out.ptr<T>();
  const T s = static_cast<T>(scale), l = static_cast<T>(loc);
  draw(k, out.size(), [&](size_t i, uint32_t w) {
    const float u = sym_unit(w);
    const float sg = static_cast<float>((u > 0) - (u < 0));
    T v;
    if constexpr (std::is_same_v<T, double>) {
      v = static_cast<double>(sg) * std::log1p(-1.0 * static_cast<double>(std::fabs(u)));
    } else {
      v = static_cast<T>(sg * std::log1p(-1.0f * std::fabs(u)));
    }
    if (scale != 1.0) v = t_mul(s, v);
    if (loc != 0.0) v = t_add(l, v);
    y[i] = v;
  });
}

// erf in T as MLX computes it (float32 inside; float64 results use std::erf: Loom only).
template <typename T>
inline T t_erf(T x) {
  if constexpr (std::is_same_v<T, double>) return std::erf(x);
  else return static_cast<T>(mlx_erf(static_cast<float>(x)));
}
template <typename T>
inline T t_erfinv(T x) {
  if constexpr (std::is_same_v<T, double>) return ::loom::detail::erfinv_d(x);
  else return static_cast<T>(mlx_erfinv(static_cast<float>(x)));
}

// truncated_normal (MLX, after JAX): a = erf(lower / sqrt2), b = erf(upper / sqrt2),
// u = uniform(a, b) in T, z = sqrt2 * erfinv(u) in T, clipped to [lower, upper].
template <typename T>
void truncated_normal_kernel(const Key& k, const Param<T>& lo, const Param<T>& hi, const Block& out) {
  T* y = out.ptr<T>();
  const T sqrt2 = static_cast<T>(std::sqrt(2.0));
  auto one = [&](size_t i, T u01) {
    const T l = lo[i], h = hi[i];
    const T a = t_erf(t_div(l, sqrt2));
    const T b = t_erf(t_div(h, sqrt2));
    const T u = t_add(t_mul(t_sub(b, a), u01), a);
    const T z = t_mul(sqrt2, t_erfinv(u));
    // maximum(minimum(upper, z), lower); NaN propagates as through MLX's minimum and maximum.
    const double hd = static_cast<double>(h), zd = static_cast<double>(z), ld = static_cast<double>(l);
    const T m = std::isnan(hd) ? h : std::isnan(zd) ? z : (hd < zd ? h : z);
    const double md = static_cast<double>(m);
    y[i] = std::isnan(md) ? m : std::isnan(ld) ? l : (md < ld ? l : m);
  };
  if constexpr (sizeof(T) == 8) {
    draw64(k, out, [&](size_t i, uint64_t w) { one(i, T(unit64(w))); });
  } else {
    const float cap = unit_cap<T>();
    draw(k, out.size(), [&](size_t i, uint32_t w) { one(i, unit<T>(w, cap)); });
  }
}

// gumbel: -log(-log(u)) in T, u uniform in [0, 1).
template <typename T>
void gumbel_kernel(const Key& k, const Block& out) {
  T* y = out.ptr<T>();
  if constexpr (sizeof(T) == 8) {
    draw64(k, out, [&](size_t i, uint64_t w) { y[i] = -std::log(-std::log(unit64(w))); });
  } else {
    const float cap = unit_cap<T>();
    draw(k, out.size(), [&](size_t i, uint32_t w) {
      const T u = unit<T>(w, cap);
      y[i] = static_cast<T>(-static_cast<float>(t_log(static_cast<T>(-static_cast<float>(t_log(u))))));
    });
  }
}

// randint: floor(float32 uniform(low, high)) clamped to [low, high - 1] (bounds as float32 for the
// draw). The clamp is done in int64 before the cast to T.
template <typename T>
void randint_kernel(const Key& k, const Param<int64_t>& lo, const Param<int64_t>& hi, const Block& out) {
  T* y = out.ptr<T>();
  const float cap = unit_cap<float>();
  draw(k, out.size(), [&](size_t i, uint32_t w) {
    const int64_t l = lo[i], h = hi[i];
    const float lf = static_cast<float>(l), hf = static_cast<float>(h);
    const float v = std::floor((hf - lf) * unit<float>(w, cap) + lf);
    int64_t r = v >= 0x1p63f ? std::numeric_limits<int64_t>::max()
                : v < -0x1p63f ? std::numeric_limits<int64_t>::min()
                               : static_cast<int64_t>(v);
    r = std::max(std::min(r, h - 1), l);
    y[i] = static_cast<T>(r);
  });
}

// bernoulli: bits < p * nextafter(2^32 as float32, +inf), compared in float32 (in float64 for
// float64 p), as MLX's less(bits, multiply(p, upper)) promotes.
template <typename P>
void bernoulli_kernel(const Key& k, const Param<P>& p, const Block& out) {
  bool* y = out.ptr<bool>();
  const float upper = std::nextafter(static_cast<float>(std::numeric_limits<uint32_t>::max()),
                                     std::numeric_limits<float>::max());
  draw(k, out.size(), [&](size_t i, uint32_t w) { y[i] = static_cast<P>(w) < p[i] * static_cast<P>(upper); });
}

// permutation: the stable argsort of bits((n)).
void permutation_kernel(const Key& k, const Block& out) {
  const size_t n = out.size();
  std::vector<std::pair<uint32_t, int32_t>> keys(n);
  draw(k, n, [&](size_t i, uint32_t w) { keys[i] = {w, static_cast<int32_t>(i)}; });
  std::sort(keys.begin(), keys.end());  // ties break by index: a stable sort of the words
  int32_t* y = out.ptr<int32_t>();
  for (size_t i = 0; i < n; ++i) y[i] = keys[i].second;
}

// categorical of one distribution by its inverse CDF (MLX's path for logits holding a single
// distribution and a non-empty sample shape): T = float32 (float64 for float64 logits),
// w = exp(x - max) (where max is +-inf: w = (x == max)), cdf = exclusive running sum of w,
// sample = (index of the first cdf entry > u * sum(w)) - 1 with u uniform float32.
template <typename T>
void categorical_kernel(const Key& k, const T* xp, size_t m, const Block& out) {
  T mx = xp[0];
  for (size_t j = 1; j < m; ++j) {
    // MLX's max propagates NaN
    if (std::isnan(static_cast<double>(xp[j])) || xp[j] > mx) mx = xp[j];
    if (std::isnan(static_cast<double>(mx))) break;
  }
  std::vector<T> cdf(m);
  T total = 0;
  for (size_t j = 0; j < m; ++j) {
    T wj = std::isinf(static_cast<double>(mx)) ? T(xp[j] == mx ? 1 : 0) : T(mlx_exp(static_cast<float>(xp[j] - mx)));
    cdf[j] = total;
    total = total + wj;
  }
  int32_t* y = out.ptr<int32_t>();
  const float cap = unit_cap<float>();
  draw(k, out.size(), [&](size_t i, uint32_t w) {
    const T u = static_cast<T>(unit<float>(w, cap)) * total;
    y[i] = static_cast<int32_t>(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin()) - 1;
  });
}

// ---- primitives ----

class Random : public UnaryPrimitive {
 public:
  // a and b: normal's loc and scale (NaN: absent), laplace's loc and scale.
  Random(Dist d, Shape shape, Dtype dtype, double a = 0, double b = 1)
      : dist_(d), shape_(std::move(shape)), dtype_(dtype), a_(a), b_(b) {}
  void save(::loom::detail::Writer& w) const override { w.put(dist_, shape_, dtype_, a_, b_); }

  // The key is (2) or, under vmap, (K.., 2): a batch of keys, each drawing its own block of
  // prod(shape_) output elements (the output is (K.., shape_..)) exactly as it would alone; the
  // parameters then carry the same leading axes.
  void eval_cpu(const std::vector<array>& in, array& out) override {
    out.alloc();
    if (out.size() == 0) return;
    const array keys = kernels::row_contiguous(in[0]);
    const uint32_t* kp = kernels::ptr<uint32_t>(keys);
    size_t per = 1;
    for (int d : shape_) per *= static_cast<size_t>(d);
    const size_t blocks = out.size() / per;
    // Parameters laid out once (a scalar stays as it is): each block reads its run of them.
    std::vector<array> params(in.begin(), in.end());
    for (size_t i = 1; i < params.size(); ++i) {
      if (params[i].data_size() != 1 || dist_ == Dist::categorical) params[i] = kernels::row_contiguous(params[i]);
    }
    const size_t m = dist_ == Dist::categorical ? params[1].size() / blocks : 0;
    auto one = [&](size_t e) {
      const Key k{kp[2 * e], kp[2 * e + 1]};
      const Block o{static_cast<char*>(out.raw_data()) + e * per * out.itemsize(), per, out.itemsize()};
      run(k, params, e * per, o, m ? params[1].raw_data() : nullptr, m, e);
    };
    // Small blocks run one per task; a large block parallelizes inside its own draw.
    if (blocks == 1 || per >= kernels::kParallelThreshold) {
      for (size_t e = 0; e < blocks; ++e) one(e);
    } else {
      kernels::parallel_for(
          blocks, [&](size_t b, size_t e) { for (size_t i = b; i < e; ++i) one(i); },
          std::max<size_t>(1, kernels::kParallelThreshold / per));
    }
  }
  // The batch of keys (a key shared by every entry, broadcast) leads the output and the parameters.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return ::loom::detail::same_op_batch_first(::loom::detail::all_batch_first(in, axes), outs,
                                               ::loom::detail::vmap_size(in, axes));
  }
  // Gradients stop here: the samples do not depend differentiably on the key, and the parameters'
  // gradients are deliberately not propagated.
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>&, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> out;
    for (int a : argnums) out.push_back(zeros_like(primals[a]));
    return out;
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&) override {
    return {zeros(shape_, dtype_)};
  }
  const char* name() const override { return dist_name(dist_); }
  bool is_differentiable() const override { return false; }

 private:
  // One key's block: the parameters from flat index `off`, the logits' row `e` (m of them).
  void run(const Key& k, const std::vector<array>& in, size_t off, const Block& out, const void* logits, size_t m,
           size_t e) const {
    switch (dist_) {
      case Dist::bits:
        bits_kernel(k, out);
        break;
      case Dist::uniform:
        LOOM_DISPATCH_FLOAT(dtype_, T, uniform_kernel<T>(k, Param<T>(in[1]).from(off), Param<T>(in[2]).from(off), out));
        break;
      case Dist::normal:
        LOOM_DISPATCH_FLOAT(dtype_, T,
                            normal_kernel<T>(k, std::isnan(a_) ? std::nullopt : std::optional<double>(a_),
                                             std::isnan(b_) ? std::nullopt : std::optional<double>(b_), out));
        break;
      case Dist::laplace:
        LOOM_DISPATCH_FLOAT(dtype_, T, laplace_kernel<T>(k, a_, b_, out));
        break;
      case Dist::truncated_normal:
        LOOM_DISPATCH_FLOAT(dtype_, T,
                            truncated_normal_kernel<T>(k, Param<T>(in[1]).from(off), Param<T>(in[2]).from(off), out));
        break;
      case Dist::gumbel:
        LOOM_DISPATCH_FLOAT(dtype_, T, gumbel_kernel<T>(k, out));
        break;
      case Dist::randint:
        LOOM_DISPATCH_REAL(dtype_, T, {
          if constexpr (std::is_integral_v<T>) {
            randint_kernel<T>(k, Param<int64_t>(in[1]).from(off), Param<int64_t>(in[2]).from(off), out);
          }
        });
        break;
      case Dist::bernoulli:
        if (in[1].dtype() == float64) bernoulli_kernel<double>(k, Param<double>(in[1]).from(off), out);
        else bernoulli_kernel<float>(k, Param<float>(in[1]).from(off), out);
        break;
      case Dist::permutation:
        permutation_kernel(k, out);
        break;
      case Dist::categorical:
        if (in[1].dtype() == float64) categorical_kernel<double>(k, static_cast<const double*>(logits) + e * m, m, out);
        else categorical_kernel<float>(k, static_cast<const float*>(logits) + e * m, m, out);
        break;
    }
  }
  Dist dist_;
  Shape shape_;
  Dtype dtype_;
  double a_, b_;
};
// One class under a name per distribution: the distribution saved picks the name back.
std::shared_ptr<Primitive> load_random(::loom::detail::Reader& r) {
  Dist d;
  Shape shape;
  Dtype dtype;
  double a, b;
  r.get(d, shape, dtype, a, b);
  if (d < Dist::bits || d > Dist::categorical) r.fail("not a random distribution");
  return std::make_shared<Random>(d, std::move(shape), dtype, a, b);
}
const bool kRandomLoads = [] {
  for (int d = 0; d <= static_cast<int>(Dist::categorical); ++d) {
    ::loom::detail::register_primitive(dist_name(static_cast<Dist>(d)), load_random);
  }
  return true;
}();

// out[.., j, ..] = x[.., idx[j], ..] along `axis` (a gather), or its inverse
// out[.., idx[j], ..] = x[.., j, ..] (a scatter) when `inverse`; idx is a permutation.
class PermuteAxis : public UnaryPrimitive {
 public:
  PermuteAxis(int axis, bool inverse) : axis_(axis), inverse_(inverse) {}
  void save(::loom::detail::Writer& w) const override { w.put(axis_, inverse_); }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    out.alloc();
    if (out.size() == 0) return;
    array x = kernels::row_contiguous(in[0]);
    array idx = kernels::row_contiguous(in[1]);
    const int32_t* ip = kernels::ptr<int32_t>(idx);
    const Shape& s = x.shape();
    size_t outer = 1, inner = 1;
    for (int d = 0; d < axis_; ++d) outer *= s[d];
    for (size_t d = axis_ + 1; d < s.size(); ++d) inner *= s[d];
    const size_t n = s[axis_];
    // idx is (n), or (K.., n) under vmap with x's leading axes K..: each its own permutation.
    const size_t per = outer / (idx.size() / n);
    const size_t row = inner * x.itemsize();
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    kernels::parallel_for(
        outer * n,
        [&](size_t b, size_t e) {
          for (size_t r = b; r < e; ++r) {
            const size_t o = r / n, j = r % n;
            const int32_t* p = ip + (o / per) * n;
            const size_t from = inverse_ ? j : static_cast<size_t>(p[j]);
            const size_t to = inverse_ ? static_cast<size_t>(p[j]) : j;
            std::memcpy(dst + (o * n + to) * row, src + (o * n + from) * row, row);
          }
        },
        std::max<size_t>(1, kernels::kParallelThreshold / std::max<size_t>(inner, 1)));
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> out;
    for (int a : argnums) {
      if (a == 0) {
        out.push_back(array(p[0].shape(), cot[0].dtype(), std::make_shared<PermuteAxis>(axis_, !inverse_), {cot[0], p[1]}));
      } else {
        out.push_back(zeros_like(p[1]));
      }
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    for (size_t i = 0; i < argnums.size(); ++i) {
      if (argnums[i] == 0) {
        return {array(p[0].shape(), t[i].dtype(), std::make_shared<PermuteAxis>(axis_, inverse_), {t[i], p[1]})};
      }
    }
    return {zeros_like(p[0])};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    // One permutation for every entry: the batch of x stays where it is.
    if (axes[1] < 0 && in[1].ndim() == 1) {
      const int b = axes[0];
      auto prim = std::make_shared<PermuteAxis>(::loom::detail::batched_axis(axis_, b), inverse_);
      return {{array(in[0].shape(), outs[0].dtype(), std::move(prim), {in[0], in[1]})}, {b}};
    }
    // A permutation per entry: the batch leads both x and the permutations.
    std::vector<array> x = ::loom::detail::all_batch_first(in, axes);
    Shape shape = x[0].shape();
    return {{array(std::move(shape), outs[0].dtype(), std::make_shared<PermuteAxis>(axis_ + 1, inverse_), std::move(x))},
            {0}};
  }
  const char* name() const override { return inverse_ ? "PermuteAxisInverse" : "PermuteAxis"; }

 private:
  int axis_;
  bool inverse_;
};
std::shared_ptr<Primitive> load_permute_axis(::loom::detail::Reader& r) {
  int axis;
  bool inverse;
  r.get(axis, inverse);
  return std::make_shared<PermuteAxis>(axis, inverse);
}
const bool kPermuteAxisLoads = ::loom::detail::register_primitive("PermuteAxis", load_permute_axis) &&
                               ::loom::detail::register_primitive("PermuteAxisInverse", load_permute_axis);

// ---- argument checks and helpers ----

void check_shape(const Shape& shape, const char* op) {
  for (int s : shape) {
    if (s < 0) throw std::invalid_argument(msg("[", op, "] negative dimension in shape ", shape_str(shape)));
  }
}

void check_key(const array& k, const char* op) {
  if (k.dtype() != uint32 || k.shape() != Shape{2}) {
    throw std::invalid_argument(msg("[", op, "] a key must be a uint32 array of shape (2), got shape ",
                                    shape_str(k.shape()), " and dtype ", k.dtype()));
  }
}

void check_float(Dtype dtype, const char* op) {
  if (!is_floating_point(dtype)) {
    throw std::invalid_argument(msg("[", op, "] needs a floating dtype, got ", dtype));
  }
}


void check_param_shape(const array& p, const char* what, const Shape& shape, const char* op) {
  if (!loom::detail::broadcasts_to(p.shape(), shape)) {
    throw std::invalid_argument(msg("[", op, "] ", what, " of shape ", shape_str(p.shape()),
                                    " does not broadcast to the requested shape ", shape_str(shape)));
  }
}

// The explicit key, or the next global one. Called after every other check, so a
// call that throws does not advance the global state.
array take_key(const std::optional<array>& key) {
  if (key) return *key;
  return detail::next_key();
}

// `a` in `dtype`: a fresh constant for evaluated scalars (no graph node), astype otherwise.
array cast_param(const array& a, Dtype dtype) {
  if (a.dtype() == dtype) return a;
  if (a.is_evaluated() && a.size() == 1) {
    if (is_floating_point(dtype)) {
      double v = a.item<double>();
      return array(&v, a.shape(), dtype);
    }
    int64_t v = a.item<int64_t>();
    return array(&v, a.shape(), dtype);
  }
  return astype(a, dtype);
}

array make_random(Dist d, const Shape& shape, Dtype dtype, std::vector<array> inputs, double a = 0, double b = 1) {
  return array(shape, dtype, std::make_shared<Random>(d, shape, dtype, a, b), std::move(inputs));
}

struct GlobalKey {
  std::mutex mu;
  Key key{0, 0};
};
GlobalKey& global_key() {
  static GlobalKey g;
  return g;
}

array key_array(const Key& k) {
  const uint32_t v[2] = {k[0], k[1]};
  return array(v, Shape{2}, uint32);
}

// split(key, 2) of an evaluated key, as the primitive computes it: a draw of 4 words, whose pairs
// (0, 2) and (1, 3) come from counters (0, 2) and (1, 3).
std::pair<Key, Key> split2(const Key& k) {
  const auto a = detail::threefry2x32<20>(k, {0u, 2u});
  const auto b = detail::threefry2x32<20>(k, {1u, 3u});
  return {Key{a[0], b[0]}, Key{a[1], b[1]}};
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// keys

namespace {
thread_local detail::KeySource key_source;
}

detail::KeySource detail::set_key_source(KeySource source) {
  std::swap(source, key_source);
  return source;
}

array detail::next_key() {
  if (key_source) return key_source();
  auto& g = global_key();
  std::lock_guard<std::mutex> lock(g.mu);
  const auto [next, used] = split2(g.key);  // split(state): rows 0 and 1
  g.key = next;
  return key_array(used);
}

array key(uint64_t seed) {
  return key_array({static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(seed & 0xffffffffu)});
}

void seed(uint64_t s) {
  auto& g = global_key();
  std::lock_guard<std::mutex> lock(g.mu);
  g.key = {static_cast<uint32_t>(s >> 32), static_cast<uint32_t>(s & 0xffffffffu)};
}

array get_state() {
  auto& g = global_key();
  std::lock_guard<std::mutex> lock(g.mu);
  return key_array(g.key);
}

void set_state(const array& state) {
  check_key(state, "set_state");
  auto v = array(state).to_vector<uint32_t>();
  auto& g = global_key();
  std::lock_guard<std::mutex> lock(g.mu);
  g.key = {v[0], v[1]};
}

array split(const array& key, int num, StreamOrDevice s) {
  OnStream on(s);
  check_key(key, "split");
  if (num < 0) throw std::invalid_argument(msg("[split] needs num >= 0, got ", num));
  return make_random(Dist::bits, {num, 2}, uint32, {key});
}

std::pair<array, array> split(const array& key, StreamOrDevice s) {
  OnStream on(s);
  array ks = random::split(key, 2);
  return {reshape(slice(ks, {0, 0}, {1, 2}), {2}), reshape(slice(ks, {1, 0}, {2, 2}), {2})};
}

// ---------------------------------------------------------------------------------------------
// generators

array bits(const Shape& shape, int width, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  check_shape(shape, "bits");
  if (width != 1 && width != 2 && width != 4 && width != 8) {
    throw std::invalid_argument(msg("[bits] width must be 1, 2, 4 or 8 bytes, got ", width));
  }
  if (key) check_key(*key, "bits");
  Dtype dt = width == 1 ? uint8 : width == 2 ? uint16 : width == 4 ? uint32 : uint64;
  return make_random(Dist::bits, shape, dt, {take_key(key)});
}

array uniform(const array& low, const array& high, const Shape& shape, Dtype dtype, const std::optional<array>& key,
              StreamOrDevice s) {
  OnStream on(s);
  check_shape(shape, "uniform");
  check_float(dtype, "uniform");
  check_param_shape(low, "low", shape, "uniform");
  check_param_shape(high, "high", shape, "uniform");
  if (key) check_key(*key, "uniform");
  array lo = broadcast_to(cast_param(low, dtype), shape);
  array hi = broadcast_to(cast_param(high, dtype), shape);
  return make_random(Dist::uniform, shape, dtype, {take_key(key), lo, hi});
}

array uniform(const Shape& shape, Dtype dtype, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  check_float(dtype, "uniform");
  return uniform(array(0.0, dtype), array(1.0, dtype), shape, dtype, key);
}

array uniform(const Shape& shape, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  return uniform(shape, float32, key);
}

array normal(const Shape& shape, Dtype dtype, std::optional<float> loc, std::optional<float> scale,
             const std::optional<array>& key, StreamOrDevice stream) {
  OnStream on(stream);
  check_shape(shape, "normal");
  check_float(dtype, "normal");
  if (key) check_key(*key, "normal");
  // As MLX's float overload: loc 0 and scale 1 are left out (absent: NaN).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double l = loc && *loc != 0.0f ? *loc : nan;
  const double s = scale && *scale != 1.0f ? *scale : nan;
  return make_random(Dist::normal, shape, dtype, {take_key(key)}, l, s);
}
array normal(const Shape& shape, std::optional<float> loc, std::optional<float> scale,
             const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  return normal(shape, float32, loc, scale, key);
}
array normal(const Shape& shape, Dtype dtype, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  return normal(shape, dtype, std::nullopt, std::nullopt, key);
}
array normal(const Shape& shape, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  return normal(shape, float32, std::nullopt, std::nullopt, key);
}

array multivariate_normal(const array& mean, const array& cov, const Shape& shape, Dtype dtype,
                          const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  const char* op = "[multivariate_normal] ";
  check_shape(shape, "multivariate_normal");
  if (dtype != float32) throw std::invalid_argument(msg(op, "dtype must be float32; got ", dtype));
  if (mean.ndim() < 1) throw std::invalid_argument(msg(op, "mean must have at least one axis; got a scalar"));
  if (cov.ndim() < 2 || cov.shape().back() != cov.shape()[cov.ndim() - 2] ||
      cov.shape().back() != mean.shape().back()) {
    throw std::invalid_argument(msg(op, "cov must be (..., n, n) for mean (..., n); got mean ",
                                    shape_str(mean.shape()), " and cov ", shape_str(cov.shape())));
  }
  if (key) check_key(*key, "multivariate_normal");
  const int n = mean.shape().back();
  Shape out;
  try {
    out = broadcast_shapes(broadcast_shapes(Shape(cov.shape().begin(), cov.shape().end() - 2),
                                            Shape(mean.shape().begin(), mean.shape().end() - 1)),
                           shape);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(msg(op, "the shape ", shape_str(shape), ", mean ", shape_str(mean.shape()),
                                    " and cov ", shape_str(cov.shape()), " do not broadcast together"));
  }
  out.push_back(n);
  const std::vector<array> usv = linalg::svd(astype(cov, float32), true);
  const array std_dev = matmul(usv[0] * expand_dims(sqrt(usv[1]), -2), usv[2]);
  const array z = normal(out, dtype, 0.0f, 1.0f, key);
  return mean + squeeze(matmul(expand_dims(z, -2), std_dev), -2);
}

array truncated_normal(const array& lower, const array& upper, const Shape& shape, Dtype dtype,
                       const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  check_shape(shape, "truncated_normal");
  check_float(dtype, "truncated_normal");
  check_param_shape(lower, "lower", shape, "truncated_normal");
  check_param_shape(upper, "upper", shape, "truncated_normal");
  if (key) check_key(*key, "truncated_normal");
  array lo = broadcast_to(cast_param(lower, dtype), shape);
  array hi = broadcast_to(cast_param(upper, dtype), shape);
  return make_random(Dist::truncated_normal, shape, dtype, {take_key(key), lo, hi});
}

array truncated_normal(const array& lower, const array& upper, Dtype dtype, const std::optional<array>& key,
                       StreamOrDevice stream) {
  OnStream on(stream);
  Shape s;
  try {
    s = broadcast_shapes(lower.shape(), upper.shape());
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(msg("[truncated_normal] lower of shape ", shape_str(lower.shape()),
                                    " and upper of shape ", shape_str(upper.shape()), " do not broadcast together"));
  }
  return truncated_normal(lower, upper, s, dtype, key);
}

array randint(const array& low, const array& high, const Shape& shape, Dtype dtype, const std::optional<array>& key,
              StreamOrDevice s) {
  OnStream on(s);
  check_shape(shape, "randint");
  if (!is_integral(dtype) && dtype != bool_) {
    throw std::invalid_argument(msg("[randint] needs an integer or bool dtype, got ", dtype));
  }
  check_param_shape(low, "low", shape, "randint");
  check_param_shape(high, "high", shape, "randint");
  array lo = cast_param(low, int64), hi = cast_param(high, int64);
  if (lo.is_evaluated() && hi.is_evaluated()) {
    // The dtype's range within int64's (the bounds are int64: uint64 draws stay below 2^63).
    int64_t dmin = 0, dmax = 0;
    LOOM_DISPATCH_REAL(dtype, T, {
      if constexpr (std::is_same_v<T, bool>) {
        dmax = 1;
      } else if constexpr (std::is_integral_v<T>) {
        dmin = static_cast<int64_t>(std::numeric_limits<T>::min());
        dmax = std::numeric_limits<T>::max() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                   ? std::numeric_limits<int64_t>::max()
                   : static_cast<int64_t>(std::numeric_limits<T>::max());
      }
    });
    for (int64_t l : array(lo).to_vector<int64_t>()) {
      if (l < dmin) throw std::invalid_argument(msg("[randint] low ", l, " is below the range of ", dtype));
    }
    for (int64_t h : array(hi).to_vector<int64_t>()) {
      if (h - 1 > dmax) throw std::invalid_argument(msg("[randint] high ", h, " is beyond the range of ", dtype));
    }
  }
  if (key) check_key(*key, "randint");
  return make_random(Dist::randint, shape, dtype,
                     {take_key(key), broadcast_to(lo, shape), broadcast_to(hi, shape)});
}

array bernoulli(const array& p, const Shape& shape, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  check_shape(shape, "bernoulli");
  if (!is_floating_point(p.dtype())) {
    throw std::invalid_argument(msg("[bernoulli] p must have a floating dtype, got ", p.dtype()));
  }
  check_param_shape(p, "p", shape, "bernoulli");
  if (key) check_key(*key, "bernoulli");
  return make_random(Dist::bernoulli, shape, bool_,
                     {take_key(key), broadcast_to(cast_param(p, p.dtype() == float64 ? float64 : float32), shape)});
}
array bernoulli(const array& p, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  return bernoulli(p, p.shape(), key);
}
array bernoulli(double p, const Shape& shape, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  return bernoulli(array(static_cast<float>(p), float32), shape, key);  // MLX: array(p) is float32
}
array bernoulli(StreamOrDevice s) { OnStream on(s); return bernoulli(array(0.5f, float32), Shape{}, std::nullopt); }

array laplace(const Shape& shape, Dtype dtype, float loc, float scale, const std::optional<array>& key,
              StreamOrDevice s) {
  OnStream on(s);
  check_shape(shape, "laplace");
  check_float(dtype, "laplace");
  if (key) check_key(*key, "laplace");
  return make_random(Dist::laplace, shape, dtype, {take_key(key)}, loc, scale);
}

array gumbel(const Shape& shape, Dtype dtype, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  check_shape(shape, "gumbel");
  check_float(dtype, "gumbel");
  if (key) check_key(*key, "gumbel");
  return make_random(Dist::gumbel, shape, dtype, {take_key(key)});
}

namespace {
// argmax(logits + gumbel) with the category axis of the noise at `offset` of `shape`.
array categorical_impl(const array& logits, int axis, const Shape& shape, const std::optional<array>& key) {
  if (logits.shape()[axis] == 0) {
    throw std::invalid_argument(
        msg("[categorical] logits of shape ", shape_str(logits.shape()), " have no categories along axis ", axis));
  }
  if (key) check_key(*key, "categorical");
  const int n = logits.shape()[axis];
  if (logits.size() == static_cast<size_t>(n) && !shape.empty()) {
    // One distribution and a non-empty sample shape: MLX samples it by its inverse CDF.
    check_shape(shape, "categorical");
    array l = reshape(stop_gradient(logits), {n});
    if (l.dtype() != float64) l = astype(l, float32);
    return make_random(Dist::categorical, shape, int32, {take_key(key), l});
  }
  const int offset = axis + static_cast<int>(shape.size()) - static_cast<int>(logits.ndim()) + 1;
  Shape gshape = shape;
  gshape.insert(gshape.begin() + offset, logits.shape()[axis]);
  array g = gumbel(gshape, float32, key);
  return argmax(add(g, stop_gradient(logits)), offset);
}
int categorical_axis(const array& logits, int axis) {
  if (logits.ndim() == 0) throw std::invalid_argument("[categorical] logits must have at least one dimension");
  return ::loom::detail::normalize_axis(axis, static_cast<int>(logits.ndim()), "categorical");
}
}  // namespace

array categorical(const array& logits, int axis, const Shape& shape, const std::optional<array>& key,
                  StreamOrDevice s) {
  OnStream on(s);
  axis = categorical_axis(logits, axis);
  check_shape(shape, "categorical");
  Shape reduced = logits.shape();
  reduced.erase(reduced.begin() + axis);
  if (!loom::detail::broadcasts_to(reduced, shape)) {
    throw std::invalid_argument(msg("[categorical] logits of shape ", shape_str(logits.shape()), " without axis ", axis,
                                    " do not broadcast to the requested shape ", shape_str(shape)));
  }
  return categorical_impl(logits, axis, shape, key);
}

array categorical(const array& logits, int axis, int num_samples, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  axis = categorical_axis(logits, axis);
  if (num_samples < 0) throw std::invalid_argument(msg("[categorical] needs num_samples >= 0, got ", num_samples));
  array l = expand_dims(logits, -1);
  Shape shape = l.shape();
  shape.erase(shape.begin() + axis);
  shape.back() = num_samples;
  return categorical_impl(l, axis, shape, key);
}

array categorical(const array& logits, int axis, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  axis = categorical_axis(logits, axis);
  Shape shape = logits.shape();
  shape.erase(shape.begin() + axis);
  return categorical_impl(logits, axis, shape, key);
}

array permutation(int n, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  if (n < 0) throw std::invalid_argument(msg("[permutation] needs n >= 0, got ", n));
  if (key) check_key(*key, "permutation");
  return make_random(Dist::permutation, {n}, int32, {take_key(key)});
}

array permutation(const array& x, int axis, const std::optional<array>& key, StreamOrDevice s) {
  OnStream on(s);
  if (x.ndim() == 0) throw std::invalid_argument("[permutation] cannot permute a 0-dimensional array");
  const int ax = ::loom::detail::normalize_axis(axis, static_cast<int>(x.ndim()), "permutation");
  if (key) check_key(*key, "permutation");
  array idx = permutation(x.shape()[ax], key);
  return array(x.shape(), x.dtype(), std::make_shared<PermuteAxis>(ax, false), {x, idx});
}

}  // namespace loom::random
