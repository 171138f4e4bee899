// hadamard_transform: one primitive whose kernel does the O(n log n) butterflies row by row, then
// (for n = m * 2^k with m > 1) mixes the m blocks of 2^k with the m x m matrix. H is symmetric and
// the transform linear: the jvp is the same transform of the tangent and the vjp the transposed
// transform of the cotangent. H_12 is symmetric but H_20 and H_28 are not, so the vjp mixes the
// blocks with the transpose of H_m (MLX's vjp applies H itself, a wrong gradient for m = 20, 28).
#include "loom/ops/hadamard.h"

#include <cmath>
#include <string>
#include <vector>

#include "loom/core/copy.h"
#include "loom/core/primitive.h"
#include "loom/core/serialize.h"
#include "loom/ops/batching.h"
#include "loom/kernels/rows.h"
#include "loom/ops/ops.h"

namespace loom {

namespace {

// The Hadamard matrices of orders 12, 20 and 28 from N. J. A. Sloane's library
// (http://neilsloane.com/hadamard/), the ones MLX's backends use: '+' is 1, '-' is -1, row-major.
const char* kH12 =
    "+-++++++++++" "--+-+-+-+-+-" "+++-++----++" "+---+--+-++-" "+++++-++----" "+-+---+--+-+"
    "++--+++-++--" "+--++---+--+" "++----+++-++" "+--+-++---+-" "++++----+++-" "+-+--+-++---";
const char* kH20 =
    "+----+----++--++-++-" "-+----+---+++---+-++" "--+----+---+++-+-+-+" "---+----+---+++++-+-"
    "----+----++--++-++-+" "-+++++-----+--+++--+" "+-+++-+---+-+--+++--" "++-++--+---+-+--+++-"
    "+++-+---+---+-+--+++" "++++-----++--+-+--++" "--++-+-++-+-----++++" "---++-+-++-+---+-+++"
    "+---++-+-+--+--++-++" "++---++-+----+-+++-+" "-++---++-+----+++++-" "-+--+--++-+----+----"
    "+-+-----++-+----+---" "-+-+-+---+--+----+--" "--+-+++------+----+-" "+--+--++------+----+";
const char* kH28 =
    "+------++----++-+--+-+--++--" "-+-----+++-----+-+--+-+--++-" "--+-----+++---+-+-+----+--++"
    "---+-----+++---+-+-+-+--+--+" "----+-----+++---+-+-+++--+--" "-----+-----++++--+-+--++--+-"
    "------++----++-+--+-+--++--+" "--++++-+-------++--+++-+--+-" "---++++-+-----+-++--+-+-+--+"
    "+---+++--+----++-++--+-+-+--" "++---++---+----++-++--+-+-+-" "+++---+----+----++-++--+-+-+"
    "++++--------+-+--++-++--+-+-" "-++++--------+++--++--+--+-+" "-+-++-++--++--+--------++++-"
    "+-+-++--+--++--+--------++++" "-+-+-++--+--++--+----+---+++" "+-+-+-++--+--+---+---++---++"
    "++-+-+-++--+------+--+++---+" "-++-+-+-++--+------+-++++---" "+-++-+---++--+------+-++++--"
    "-++--++-+-++-+++----++------" "+-++--++-+-++-+++-----+-----" "++-++---+-+-++-+++-----+----"
    "-++-++-+-+-+-+--+++-----+---" "--++-++++-+-+----+++-----+--" "+--++-+-++-+-+----+++-----+-"
    "++--++-+-++-+-+----++------+";

const char* matrix_of(int m) { return m == 12 ? kH12 : m == 20 ? kH20 : kH28; }

bool is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// n = m * 2^k: returns m (1, 12, 20 or 28) or 0 when n has no such form with k <= 26.
int odd_factor(int n) {
  for (int m : {1, 12, 20, 28}) {
    if (n % m == 0 && is_power_of_two(n / m) && n / m <= (1 << 26)) return m;
  }
  return 0;
}

// Transforms `rows` rows of n = m * p values in place, C being the compute type.
template <typename T, typename C>
void hadamard_rows(const T* x, T* y, size_t rows, int n, int m, C scale, bool transposed) {
  const int p = n / m;
  std::vector<signed char> hm;
  if (m > 1) {
    const char* s = matrix_of(m);
    for (int j = 0; j < m; ++j) {
      for (int k = 0; k < m; ++k) hm.push_back(s[transposed ? k * m + j : j * m + k] == '+' ? 1 : -1);
    }
  }
  kernels::parallel_for(
      rows,
      [&](size_t r0, size_t r1) {
        std::vector<C> buf(n), mix(m);
        for (size_t r = r0; r < r1; ++r) {
          const T* xr = x + r * n;
          for (int i = 0; i < n; ++i) buf[i] = static_cast<C>(xr[i]);
          // Sylvester butterflies on each block of p: pairs (j, j + h) become (a + b, a - b).
          for (int b = 0; b < m; ++b) {
            C* v = buf.data() + size_t(b) * p;
            for (int h = 1; h < p; h <<= 1) {
              for (int j0 = 0; j0 < p; j0 += 2 * h) {
                for (int j = j0; j < j0 + h; ++j) {
                  const C a = v[j], c = v[j + h];
                  v[j] = a + c;
                  v[j + h] = a - c;
                }
              }
            }
          }
          // kron(H_m, H_p): element i of block k of the output mixes element i of every block.
          if (m > 1) {
            for (int i = 0; i < p; ++i) {
              for (int j = 0; j < m; ++j) {
                C acc = 0;
                for (int k = 0; k < m; ++k) acc += hm[j * m + k] * buf[size_t(k) * p + i];
                mix[j] = acc;
              }
              for (int j = 0; j < m; ++j) buf[size_t(j) * p + i] = mix[j];
            }
          }
          T* yr = y + r * n;  // may be xr (a donated buffer): the row was read whole above
          for (int i = 0; i < n; ++i) yr[i] = static_cast<T>(buf[i] * scale);
        }
      },
      kernels::rows_threshold(n));
}

// inputs: x (floating point), n = x.shape(-1) > 1 of a supported form.
class Hadamard : public UnaryPrimitive {
 public:
  Hadamard(float scale, bool transposed) : scale_(scale), transposed_(transposed) {}
  void save(detail::Writer& w) const override { w.put(scale_, transposed_); }
  array make(const array& x, Dtype dtype, bool transposed) const {
    return array(x.shape(), dtype, std::make_shared<Hadamard>(scale_, transposed), {astype(x, dtype)});
  }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array x = kernels::row_major(in[0]);
    out.alloc();
    const int n = x.shape(-1);
    const int m = odd_factor(n);
    const size_t rows = x.size() / n;
    auto run = [&](auto t, auto c) {  // t: the element type, c: the compute type
      using T = decltype(t);
      hadamard_rows<T, decltype(c)>(kernels::ptr<T>(x), kernels::ptr<T>(out), rows, n, m, scale_, transposed_);
    };
    switch (x.dtype().val) {
      case Dtype::Val::float64:
        return run(double(), double());
      case Dtype::Val::float32:
        return run(float(), float());
      case Dtype::Val::float16:
        return run(float16_t(), float());
      case Dtype::Val::bfloat16:
        return run(bfloat16_t(), float());
      default:
        throw std::logic_error("[hadamard_transform] unexpected dtype in the kernel");
    }
  }
  // The vjp applies (scale H)^T, the jvp scale H.
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>& outputs) override {
    return {make(cot[0], outputs[0].dtype(), !transposed_)};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& tan, const std::vector<int>&) override {
    return {make(tan[0], p[0].dtype(), transposed_)};
  }
  // The kernel transforms rows along the last axis and takes any leading axes: the batch only has to
  // stay off the last axis.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const int last = static_cast<int>(in[0].ndim()) - 1;
    const int b = axes[0] == last ? 0 : axes[0];
    const array x = axes[0] == last ? moveaxis(in[0], last, 0) : in[0];
    return {{array(x.shape(), outs[0].dtype(), outs[0].primitive_ptr(), {x})}, {b}};
  }
  uint64_t donors(const std::vector<array>& in, int) const override { return row_contiguous_donors(in, {0}); }
  const char* name() const override { return "Hadamard"; }

 private:
  float scale_;
  bool transposed_;  // applies H^T (the vjp's)
};
const bool kHadamardLoads = detail::register_primitive("Hadamard", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  float scale;
  bool transposed;
  r.get(scale, transposed);
  return std::make_shared<Hadamard>(scale, transposed);
});

}  // namespace

array hadamard_transform(const array& a, std::optional<float> scale, StreamOrDevice stream) {
  OnStream on(stream);
  if (a.size() == 0) {
    throw std::invalid_argument("[hadamard_transform] does not support empty arrays (got shape " +
                                detail::shape_str(a.shape()) + ")");
  }
  const int n = a.ndim() > 0 ? a.shape(-1) : 1;
  const float s = scale.has_value() ? *scale : 1.0f / std::sqrt(n);
  const Dtype dtype = issubdtype(a.dtype(), Dtype::Category::floating) ? a.dtype() : float32;
  if (n == 1) {
    if (s == 1) return a;  // as MLX: even an integer input comes back unchanged
    return multiply(a, array(s, dtype));
  }
  if (odd_factor(n) == 0) {
    throw std::invalid_argument("[hadamard_transform] the last axis of shape " + detail::shape_str(a.shape()) +
                                " has size " + std::to_string(n) +
                                ": only sizes m * 2^k with m in {1, 12, 20, 28} and k <= 26 are supported");
  }
  return array(a.shape(), dtype, std::make_shared<Hadamard>(s, false), {astype(a, dtype)});
}

}  // namespace loom
