#include "loom/ops/random.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "loom/core/eval.h"
#include "loom/core/primitive.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/kernels/elementwise.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::random {

using ::loom::detail::msg;
using ::loom::detail::shape_str;
using Key = std::array<uint32_t, 2>;

namespace {

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kInvSqrt2 = 0.7071067811865476;

// ---------------------------------------------------------------------------------------------
// Turning stream words into numbers. 32-bit words serve results of at most 32 bits, 64-bit words
// (one block) the rest.

// u in [0, 1) on the grid of 2^-24 (32-bit words) or 2^-53 (64-bit words): exact in double.
inline double unit_co(uint32_t w) { return static_cast<double>(w >> 8) * 0x1p-24; }
inline double unit_co(uint64_t w) { return static_cast<double>(w >> 11) * 0x1p-53; }
// u in (0, 1): the midpoints (k + 1/2) 2^-b, symmetric about 1/2.
inline double unit_oo(uint32_t w) { return (static_cast<double>(w >> 8) + 0.5) * 0x1p-24; }
inline double unit_oo(uint64_t w) { return (static_cast<double>(w >> 12) + 0.5) * 0x1p-52; }
// u in (-1, 1): (2k + 1) 2^-b - 1, symmetric about 0 (never +-1).
inline double sym_oo(uint32_t w) { return (2.0 * static_cast<double>(w >> 8) + 1.0 - 0x1p24) * 0x1p-24; }
inline double sym_oo(uint64_t w) { return (2.0 * static_cast<double>(w >> 12) + 1.0 - 0x1p52) * 0x1p-52; }

// Calls f(i, word) for i in [0, n), split across threads; word i is 32-bit word i of the stream
// (Wide = false) or block i as a 64-bit word (Wide = true). Each element depends only on (key, i).
template <bool Wide, typename F>
void draw(const Key& k, size_t n, F f) {
  kernels::parallel_for(
      n,
      [&](size_t b, size_t e) {
        if constexpr (Wide) {
          for (size_t i = b; i < e; ++i) {
            auto w = detail::block(k, i);
            f(i, static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32));
          }
        } else {
          size_t i = b;
          if (i < e && (i & 1)) {
            f(i, detail::block(k, i >> 1)[1]);
            ++i;
          }
          for (; i + 1 < e; i += 2) {
            auto w = detail::block(k, i >> 1);
            f(i, w[0]);
            f(i + 1, w[1]);
          }
          if (i < e) f(i, detail::block(k, i >> 1)[0]);
        }
      },
      // Each element costs a Threefry half-block or more: parallelize sooner than plain copies.
      size_t(1) << 13);
}

// The largest value of T below h (h not NaN and above -inf).
template <typename T>
T prev_below(T h) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::nextafter(h, -std::numeric_limits<T>::infinity());
  } else {  // float16 / bfloat16: sign-magnitude 16-bit patterns
    T r;
    if ((h.bits & 0x7fff) == 0) r.bits = 0x8001;  // +-0 -> the negative subnormal closest to 0
    else if (h.bits & 0x8000) r.bits = static_cast<uint16_t>(h.bits + 1);
    else r.bits = static_cast<uint16_t>(h.bits - 1);
    return r;
  }
}

// erfinv at the accuracy a result of type T needs (y strictly inside (-1, 1)).
template <typename T>
inline double erfinv_for(double y) {
  if constexpr (sizeof(T) == 8) return ::loom::detail::erfinv_d(y);
  else return ::loom::detail::erfinv_approx(y);  // enough for 32-bit results
}

// erfc^{-1}(q) for q in (0, 2): through erfinv where that is accurate, otherwise Newton on
// log(erfc(x)) = log(q), which keeps full relative accuracy deep in the tail.
double erfcinv(double q) {
  if (q > 0.0625 && q < 1.9375) return ::loom::detail::erfinv_d(1.0 - q);
  if (q >= 1.9375) return -erfcinv(2.0 - q);
  if (q <= 0.0) return std::numeric_limits<double>::infinity();
  const double lq = std::log(q);
  double x = std::sqrt(-lq);  // erfc(x) ~ exp(-x^2) / (x sqrt(pi))
  x = std::sqrt(std::max(-lq - std::log(x * 1.7724538509055159), 0.25));
  for (int it = 0; it < 8; ++it) {
    double c = std::erfc(x);
    if (!(c > 0.0)) break;
    double step = (std::log(c) - lq) * c / (1.1283791670955126 * std::exp(-x * x));
    x += step;  // d/dx log erfc(x) = -2 exp(-x^2) / (sqrt(pi) erfc(x))
    if (std::abs(step) <= 1e-15 * x) break;
  }
  return x;
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
};

enum class Dist { bits, uniform, normal, truncated_normal, randint, bernoulli, gumbel, permutation };

const char* dist_name(Dist d) {
  switch (d) {
    case Dist::bits: return "RandomBits";
    case Dist::uniform: return "RandomUniform";
    case Dist::normal: return "RandomNormal";
    case Dist::truncated_normal: return "RandomTruncatedNormal";
    case Dist::randint: return "RandomInt";
    case Dist::bernoulli: return "RandomBernoulli";
    case Dist::gumbel: return "RandomGumbel";
    case Dist::permutation: return "RandomPermutation";
  }
  return "Random";
}

Key read_key(const array& k) {
  const int32_t* p = kernels::ptr<int32_t>(k);
  return {static_cast<uint32_t>(p[0]), static_cast<uint32_t>(p[k.strides()[0]])};
}

// ---- kernels ----

template <int Width, typename O>
void bits_kernel(const Key& k, O* y, size_t n) {
  constexpr size_t per = 8 / Width;  // elements per block
  constexpr uint64_t mask = Width == 8 ? ~uint64_t(0) : ((uint64_t(1) << (8 * Width)) - 1);
  kernels::parallel_for(
      n,
      [&](size_t b, size_t e) {
        size_t i = b;
        while (i < e) {
          const uint64_t j = i / per;
          const auto w = detail::block(k, j);
          const uint64_t blk = static_cast<uint64_t>(w[0]) | (static_cast<uint64_t>(w[1]) << 32);
          const size_t stop = std::min<size_t>(e, (j + 1) * per);
          for (; i < stop; ++i) {
            const uint64_t v = (blk >> (8 * Width * (i % per))) & mask;
            if constexpr (std::is_same_v<O, int32_t>) y[i] = static_cast<int32_t>(static_cast<uint32_t>(v));
            else y[i] = static_cast<O>(v);
          }
        }
      },
      size_t(1) << 13);
}

void bits_kernel(const Key& k, int width, array& out) {
  const size_t n = out.size();
  switch (width) {
    case 1: bits_kernel<1>(k, kernels::ptr<uint8_t>(out), n); break;
    case 2: bits_kernel<2>(k, kernels::ptr<uint16_t>(out), n); break;
    case 4:
      if (out.dtype() == int32) bits_kernel<4>(k, kernels::ptr<int32_t>(out), n);  // keys: raw patterns
      else bits_kernel<4>(k, kernels::ptr<uint32_t>(out), n);
      break;
    default: bits_kernel<8>(k, kernels::ptr<uint64_t>(out), n); break;
  }
}

template <typename T>
void uniform_kernel(const Key& k, const array& lo_a, const array& hi_a, array& out) {
  Param<T> lo(lo_a), hi(hi_a);
  T* y = kernels::ptr<T>(out);
  draw<sizeof(T) == 8>(k, out.size(), [&](size_t i, auto w) {
    const T ht = hi[i];
    const double l = static_cast<double>(lo[i]), h = static_cast<double>(ht);
    T v = cast_value<T>(l + (h - l) * unit_co(w));
    if (l < h && !(static_cast<double>(v) < h)) v = prev_below(ht);
    y[i] = v;
  });
}

template <typename T>
void normal_kernel(const Key& k, double loc, double scale, array& out) {
  T* y = kernels::ptr<T>(out);
  draw<sizeof(T) == 8>(k, out.size(), [&](size_t i, auto w) {
    y[i] = cast_value<T>(loc + scale * (kSqrt2 * erfinv_for<T>(sym_oo(w))));
  });
}

// One draw between standard-normal bounds lo < hi given v in (0, 1), for a result of type T.
template <typename T>
struct TruncNormal {
  double lo, hi, a, b;
  int mode;  // 0: erf(lo) .. erf(hi); 1: erfc(lo) .. erfc(hi) (both bounds >= 0); 2: mirrored (both <= 0)
  TruncNormal(double l, double h) : lo(l), hi(h) {
    if (l >= 0) {
      mode = 1;
      a = std::erfc(l * kInvSqrt2);
      b = std::erfc(h * kInvSqrt2);
    } else if (h <= 0) {
      mode = 2;
      a = std::erfc(-h * kInvSqrt2);
      b = std::erfc(-l * kInvSqrt2);
    } else {
      mode = 0;
      a = std::erf(l * kInvSqrt2);
      b = std::erf(h * kInvSqrt2);
    }
  }
  double operator()(double v) const {
    double z;
    if (mode == 0) z = kSqrt2 * erfinv_for<T>(a + (b - a) * v);
    else if (mode == 1) z = kSqrt2 * erfcinv(b + (a - b) * v);
    else z = -kSqrt2 * erfcinv(b + (a - b) * v);
    return std::min(std::max(z, lo), hi);
  }
};

template <typename T>
void truncated_normal_kernel(const Key& k, const array& lo_a, const array& hi_a, array& out) {
  Param<T> lo(lo_a), hi(hi_a);
  T* y = kernels::ptr<T>(out);
  if (lo.scalar && hi.scalar) {
    const double l = static_cast<double>(lo[0]), h = static_cast<double>(hi[0]);
    if (!(l < h)) {
      const T v = cast_value<T>(std::isnan(l) || std::isnan(h) ? std::numeric_limits<double>::quiet_NaN() : l);
      std::fill(y, y + out.size(), v);
      return;
    }
    const TruncNormal<T> tn(l, h);
    draw<sizeof(T) == 8>(k, out.size(), [&](size_t i, auto w) { y[i] = cast_value<T>(tn(unit_oo(w))); });
    return;
  }
  draw<sizeof(T) == 8>(k, out.size(), [&](size_t i, auto w) {
    const double l = static_cast<double>(lo[i]), h = static_cast<double>(hi[i]);
    if (!(l < h)) {
      y[i] = cast_value<T>(std::isnan(l) || std::isnan(h) ? std::numeric_limits<double>::quiet_NaN() : l);
      return;
    }
    y[i] = cast_value<T>(TruncNormal<T>(l, h)(unit_oo(w)));
  });
}

template <typename T>
void gumbel_kernel(const Key& k, array& out) {
  T* y = kernels::ptr<T>(out);
  draw<sizeof(T) == 8>(k, out.size(), [&](size_t i, auto w) { y[i] = cast_value<T>(-std::log(-std::log(unit_oo(w)))); });
}

template <typename T>
void randint_kernel(const Key& k, const array& lo_a, const array& hi_a, array& out) {
  Param<int64_t> lo(lo_a), hi(hi_a);
  T* y = kernels::ptr<T>(out);
  draw<true>(k, out.size(), [&](size_t i, uint64_t w) {
    const int64_t l = lo[i], h = hi[i];
    int64_t v = l;
    if (l < h) {
      const uint64_t range = static_cast<uint64_t>(h) - static_cast<uint64_t>(l);
      const uint64_t off = static_cast<uint64_t>((static_cast<unsigned __int128>(w) * range) >> 64);
      v = static_cast<int64_t>(static_cast<uint64_t>(l) + off);
    }
    y[i] = static_cast<T>(v);
  });
}

void bernoulli_kernel(const Key& k, const array& p_a, array& out) {
  Param<double> p(p_a);
  bool* y = kernels::ptr<bool>(out);
  draw<false>(k, out.size(), [&](size_t i, uint32_t w) { y[i] = static_cast<double>(w) * 0x1p-32 < p[i]; });
}

void permutation_kernel(const Key& k, array& out) {
  const size_t n = out.size();
  std::vector<std::pair<uint64_t, int32_t>> keys(n);
  draw<true>(k, n, [&](size_t i, uint64_t w) { keys[i] = {w, static_cast<int32_t>(i)}; });
  std::sort(keys.begin(), keys.end());  // ties (probability ~n^2 / 2^65) break by index
  int32_t* y = kernels::ptr<int32_t>(out);
  for (size_t i = 0; i < n; ++i) y[i] = keys[i].second;
}

// ---- primitives ----

class Random : public UnaryPrimitive {
 public:
  Random(Dist d, Shape shape, Dtype dtype, int width = 0, double a = 0, double b = 1)
      : dist_(d), shape_(std::move(shape)), dtype_(dtype), width_(width), a_(a), b_(b) {}

  void eval_cpu(const std::vector<array>& in, array& out) override {
    out.alloc();
    if (out.size() == 0) return;
    const Key k = read_key(in[0]);
    switch (dist_) {
      case Dist::bits:
        bits_kernel(k, width_, out);
        break;
      case Dist::uniform:
        LOOM_DISPATCH_FLOAT(out.dtype(), T, uniform_kernel<T>(k, in[1], in[2], out));
        break;
      case Dist::normal:
        LOOM_DISPATCH_FLOAT(out.dtype(), T, normal_kernel<T>(k, a_, b_, out));
        break;
      case Dist::truncated_normal:
        LOOM_DISPATCH_FLOAT(out.dtype(), T, truncated_normal_kernel<T>(k, in[1], in[2], out));
        break;
      case Dist::gumbel:
        LOOM_DISPATCH_FLOAT(out.dtype(), T, gumbel_kernel<T>(k, out));
        break;
      case Dist::randint:
        LOOM_DISPATCH_ALL(out.dtype(), T, {
          if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) randint_kernel<T>(k, in[1], in[2], out);
        });
        break;
      case Dist::bernoulli:
        bernoulli_kernel(k, in[1], out);
        break;
      case Dist::permutation:
        permutation_kernel(k, out);
        break;
    }
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
  Dist dist_;
  Shape shape_;
  Dtype dtype_;
  int width_;
  double a_, b_;
};

// out[.., j, ..] = x[.., idx[j], ..] along `axis` (a gather), or its inverse
// out[.., idx[j], ..] = x[.., j, ..] (a scatter) when `inverse`; idx is a permutation.
class PermuteAxis : public UnaryPrimitive {
 public:
  PermuteAxis(int axis, bool inverse) : axis_(axis), inverse_(inverse) {}
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
    const size_t row = inner * x.itemsize();
    const char* src = static_cast<const char*>(x.raw_data());
    char* dst = static_cast<char*>(out.raw_data());
    kernels::parallel_for(
        outer * n,
        [&](size_t b, size_t e) {
          for (size_t r = b; r < e; ++r) {
            const size_t o = r / n, j = r % n;
            const size_t from = inverse_ ? j : static_cast<size_t>(ip[j]);
            const size_t to = inverse_ ? static_cast<size_t>(ip[j]) : j;
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
  const char* name() const override { return inverse_ ? "PermuteAxisInverse" : "PermuteAxis"; }

 private:
  int axis_;
  bool inverse_;
};

// ---- argument checks and helpers ----

void check_shape(const Shape& shape, const char* op) {
  for (int s : shape) {
    if (s < 0) throw std::invalid_argument(msg("[", op, "] negative dimension in shape ", shape_str(shape)));
  }
}

void check_key(const array& k, const char* op) {
  if (k.dtype() != int32 || k.shape() != Shape{2}) {
    throw std::invalid_argument(msg("[", op, "] a key must be an int32 array of shape (2), got shape ",
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

// The first pair (lo, hi) of evaluated, mutually broadcast bounds with !(lo < hi), if any.
template <typename V>
std::optional<std::pair<V, V>> bad_bounds(const array& lo, const array& hi) {
  if (!lo.is_evaluated() || !hi.is_evaluated()) return std::nullopt;
  Shape s = broadcast_shapes(lo.shape(), hi.shape());
  auto l = broadcast_to(lo, s).to_vector<V>();
  auto h = broadcast_to(hi, s).to_vector<V>();
  for (size_t i = 0; i < l.size(); ++i) {
    if (!(l[i] < h[i])) return std::make_pair(l[i], h[i]);
  }
  return std::nullopt;
}

array make_random(Dist d, const Shape& shape, Dtype dtype, std::vector<array> inputs, int width = 0, double a = 0,
                  double b = 1) {
  return array(shape, dtype, std::make_shared<Random>(d, shape, dtype, width, a, b), std::move(inputs));
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
  const int32_t v[2] = {static_cast<int32_t>(k[0]), static_cast<int32_t>(k[1])};
  return array(v, Shape{2}, int32);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// keys

array detail::next_key() {
  auto& g = global_key();
  std::lock_guard<std::mutex> lock(g.mu);
  const Key used = detail::block(g.key, 1);  // split(state) row 1
  g.key = detail::block(g.key, 0);           // split(state) row 0
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
  auto v = array(state).to_vector<int32_t>();
  auto& g = global_key();
  std::lock_guard<std::mutex> lock(g.mu);
  g.key = {static_cast<uint32_t>(v[0]), static_cast<uint32_t>(v[1])};
}

array split(const array& key, int num) {
  check_key(key, "split");
  if (num < 0) throw std::invalid_argument(msg("[split] needs num >= 0, got ", num));
  return make_random(Dist::bits, {num, 2}, int32, {key}, 4);
}

std::pair<array, array> split(const array& key) {
  array ks = random::split(key, 2);
  return {reshape(slice(ks, {0, 0}, {1, 2}), {2}), reshape(slice(ks, {1, 0}, {2, 2}), {2})};
}

// ---------------------------------------------------------------------------------------------
// generators

array bits(const Shape& shape, int width, const std::optional<array>& key) {
  check_shape(shape, "bits");
  if (width != 1 && width != 2 && width != 4 && width != 8) {
    throw std::invalid_argument(msg("[bits] width must be 1, 2, 4 or 8 bytes, got ", width));
  }
  if (key) check_key(*key, "bits");
  Dtype dt = width == 1 ? uint8 : width == 2 ? uint16 : width == 4 ? uint32 : uint64;
  return make_random(Dist::bits, shape, dt, {take_key(key)}, width);
}

array uniform(const array& low, const array& high, const Shape& shape, Dtype dtype, const std::optional<array>& key) {
  check_shape(shape, "uniform");
  check_float(dtype, "uniform");
  check_param_shape(low, "low", shape, "uniform");
  check_param_shape(high, "high", shape, "uniform");
  if (auto bad = bad_bounds<double>(low, high)) {
    throw std::invalid_argument(msg("[uniform] needs low < high, got low ", bad->first, " and high ", bad->second));
  }
  if (key) check_key(*key, "uniform");
  array lo = broadcast_to(cast_param(low, dtype), shape);
  array hi = broadcast_to(cast_param(high, dtype), shape);
  return make_random(Dist::uniform, shape, dtype, {take_key(key), lo, hi});
}

array uniform(const Shape& shape, Dtype dtype, const std::optional<array>& key) {
  check_float(dtype, "uniform");
  return uniform(array(0.0, dtype), array(1.0, dtype), shape, dtype, key);
}

array uniform(const Shape& shape, const std::optional<array>& key) { return uniform(shape, float32, key); }

array normal(const Shape& shape, Dtype dtype, std::optional<float> loc, std::optional<float> scale,
             const std::optional<array>& key) {
  check_shape(shape, "normal");
  check_float(dtype, "normal");
  if (key) check_key(*key, "normal");
  return make_random(Dist::normal, shape, dtype, {take_key(key)}, 0, loc.value_or(0.0f),
                     scale.value_or(1.0f));
}
array normal(const Shape& shape, std::optional<float> loc, std::optional<float> scale,
             const std::optional<array>& key) {
  return normal(shape, float32, loc, scale, key);
}
array normal(const Shape& shape, Dtype dtype, const std::optional<array>& key) {
  return normal(shape, dtype, std::nullopt, std::nullopt, key);
}
array normal(const Shape& shape, const std::optional<array>& key) {
  return normal(shape, float32, std::nullopt, std::nullopt, key);
}

array truncated_normal(const array& lower, const array& upper, const Shape& shape, Dtype dtype,
                       const std::optional<array>& key) {
  check_shape(shape, "truncated_normal");
  check_float(dtype, "truncated_normal");
  check_param_shape(lower, "lower", shape, "truncated_normal");
  check_param_shape(upper, "upper", shape, "truncated_normal");
  if (auto bad = bad_bounds<double>(lower, upper)) {
    throw std::invalid_argument(
        msg("[truncated_normal] needs lower < upper, got lower ", bad->first, " and upper ", bad->second));
  }
  if (key) check_key(*key, "truncated_normal");
  array lo = broadcast_to(cast_param(lower, dtype), shape);
  array hi = broadcast_to(cast_param(upper, dtype), shape);
  return make_random(Dist::truncated_normal, shape, dtype, {take_key(key), lo, hi});
}

array truncated_normal(const array& lower, const array& upper, Dtype dtype, const std::optional<array>& key) {
  Shape s;
  try {
    s = broadcast_shapes(lower.shape(), upper.shape());
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(msg("[truncated_normal] lower of shape ", shape_str(lower.shape()),
                                    " and upper of shape ", shape_str(upper.shape()), " do not broadcast together"));
  }
  return truncated_normal(lower, upper, s, dtype, key);
}

array randint(const array& low, const array& high, const Shape& shape, Dtype dtype, const std::optional<array>& key) {
  check_shape(shape, "randint");
  if (!is_integral(dtype)) {
    throw std::invalid_argument(msg("[randint] needs an integer dtype, got ", dtype));
  }
  check_param_shape(low, "low", shape, "randint");
  check_param_shape(high, "high", shape, "randint");
  array lo = cast_param(low, int64), hi = cast_param(high, int64);
  if (auto bad = bad_bounds<int64_t>(lo, hi)) {
    throw std::invalid_argument(msg("[randint] needs low < high, got low ", bad->first, " and high ", bad->second));
  }
  if (lo.is_evaluated() && hi.is_evaluated()) {
    // The dtype's range within int64's (the bounds are int64: uint64 draws stay below 2^63).
    int64_t dmin = 0, dmax = 0;
    LOOM_DISPATCH_ALL(dtype, T, {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
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

array bernoulli(const array& p, const Shape& shape, const std::optional<array>& key) {
  check_shape(shape, "bernoulli");
  if (!is_floating_point(p.dtype())) {
    throw std::invalid_argument(msg("[bernoulli] p must have a floating dtype, got ", p.dtype()));
  }
  check_param_shape(p, "p", shape, "bernoulli");
  if (p.is_evaluated()) {
    for (double v : array(p).to_vector<double>()) {
      if (!(v >= 0.0 && v <= 1.0)) throw std::invalid_argument(msg("[bernoulli] p must be in [0, 1], got ", v));
    }
  }
  if (key) check_key(*key, "bernoulli");
  return make_random(Dist::bernoulli, shape, bool_,
                     {take_key(key), broadcast_to(cast_param(p, float64), shape)});
}
array bernoulli(const array& p, const std::optional<array>& key) { return bernoulli(p, p.shape(), key); }
array bernoulli(double p, const Shape& shape, const std::optional<array>& key) {
  return bernoulli(array(p, float64), shape, key);
}
array bernoulli() { return bernoulli(array(0.5, float64), Shape{}, std::nullopt); }

array gumbel(const Shape& shape, Dtype dtype, const std::optional<array>& key) {
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
  const int offset = axis + static_cast<int>(shape.size()) - static_cast<int>(logits.ndim()) + 1;
  Shape gshape = shape;
  gshape.insert(gshape.begin() + offset, logits.shape()[axis]);
  const Dtype gd = logits.dtype() == float64 ? float64 : float32;
  array g = gumbel(gshape, gd, key);
  return argmax(add(stop_gradient(logits), g), offset);
}
int categorical_axis(const array& logits, int axis) {
  if (logits.ndim() == 0) throw std::invalid_argument("[categorical] logits must have at least one dimension");
  return ::loom::detail::normalize_axis(axis, static_cast<int>(logits.ndim()), "categorical");
}
}  // namespace

array categorical(const array& logits, int axis, const Shape& shape, const std::optional<array>& key) {
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

array categorical(const array& logits, int axis, int num_samples, const std::optional<array>& key) {
  axis = categorical_axis(logits, axis);
  if (num_samples < 0) throw std::invalid_argument(msg("[categorical] needs num_samples >= 0, got ", num_samples));
  array l = expand_dims(logits, -1);
  Shape shape = l.shape();
  shape.erase(shape.begin() + axis);
  shape.back() = num_samples;
  return categorical_impl(l, axis, shape, key);
}

array categorical(const array& logits, int axis, const std::optional<array>& key) {
  axis = categorical_axis(logits, axis);
  Shape shape = logits.shape();
  shape.erase(shape.begin() + axis);
  return categorical_impl(logits, axis, shape, key);
}

array permutation(int n, const std::optional<array>& key) {
  if (n < 0) throw std::invalid_argument(msg("[permutation] needs n >= 0, got ", n));
  if (key) check_key(*key, "permutation");
  return make_random(Dist::permutation, {n}, int32, {take_key(key)});
}

array permutation(const array& x, int axis, const std::optional<array>& key) {
  if (x.ndim() == 0) throw std::invalid_argument("[permutation] cannot permute a 0-dimensional array");
  const int ax = ::loom::detail::normalize_axis(axis, static_cast<int>(x.ndim()), "permutation");
  if (key) check_key(*key, "permutation");
  array idx = permutation(x.shape()[ax], key);
  return array(x.shape(), x.dtype(), std::make_shared<PermuteAxis>(ax, false), {x, idx});
}

}  // namespace loom::random
