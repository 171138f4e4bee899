// Fused exact GELU: x * Phi(x) and its derivative, one pass each (the composition
// x * (1 + erf(x / sqrt 2)) / 2 makes five forward and about ten backward passes).
#include <algorithm>
#include <cmath>

#include "loom/core/serialize.h"
#include "loom/fast/custom.h"
#include "loom/fast/fast.h"
#include "loom/core/copy.h"
#include "loom/kernels/elementwise.h"
#include "loom/kernels/fast_math.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::fast {

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)

// x Phi(x), op by op.
std::vector<array> reference(const std::vector<array>& in) {
  const array& x = in[0];
  const Dtype d = x.dtype();
  return {multiply(multiply(x, add(erf(multiply(x, array(kInvSqrt2, d))), array(1.0, d))), array(0.5, d))};
}

// out = f(in...) elementwise, split over threads. f(p, r, b, e) computes r[b:e] from p[k][b:e] in
// compute_t<T>, on pointers of its choice: T itself for float32 and float64; for the half types,
// float blocks that the inputs are widened into and the result is narrowed from (mixed 16- and
// 32-bit lanes vectorize poorly: bfloat16 GELU ran slower than float32's on half the bytes).
template <typename T, typename F>
void elementwise(const std::vector<const array*>& in, array& out, F f) {
  std::vector<array> c;
  std::vector<const T*> p;
  for (const array* a : in) {
    c.push_back(kernels::row_contiguous(*a));
    p.push_back(kernels::ptr<T>(c.back()));
  }
  T* r = kernels::ptr<T>(out);
  kernels::parallel_for(out.size(), [&](size_t b, size_t e) {
    if constexpr (is_half_v<T>) {
      constexpr size_t kBlock = 512;
      alignas(64) float buf[4][kBlock];  // up to three inputs, then the result
      const float* fp[3];
      for (size_t o = b; o < e; o += kBlock) {
        const size_t m = std::min(kBlock, e - o);
        for (size_t k = 0; k < p.size(); ++k) kernels::widen(p[k] + o, buf[k], m), fp[k] = buf[k];
        f(fp, buf[3], size_t(0), m);
        kernels::narrow(buf[3], r + o, m);
      }
    } else {
      f(p.data(), r, b, e);
    }
  }, 1 << 14);
}

// The derivative from GELU's own output y = x Phi(x): Phi(x) = y / x (within 2 ulp of Phi; 1/2 where
// |x| is too small to divide by), so only phi's exponential is left to compute: about half the work
// of evaluating erf again.
template <typename A>
LOOM_SIMD_INLINE A derivative_from_output(A x, A y) {
  // Branch-free, so that the loop vectorizes: GCC 12 turned a select of y / x into a branch around
  // the division (which may trap) and left the whole loop scalar, 8x slower than the forward.
  // t is 1 where x is too small to divide by: then the division is by about 1 and cdf is 1/2.
  const A t = std::abs(x) > A(1e-20) ? A(0) : A(1);
  const A q = y / (x + t);
  const A cdf = q + t * (A(0.5) - q);
  return cdf + x * (A(kInvSqrt2Pi) * detail::exp_of<A>(A(-0.5) * x * x));
}

// inputs: x, g, y = gelu(x); output: g * gelu'(x).
class GeluBackward : public CustomBackward {
 public:
  GeluBackward() : CustomBackward(reference, 1, 1, {0}) {}
  void save(detail::Writer&) const override {}
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    array& out = outs[0];
    out.alloc();
    LOOM_DISPATCH_FLOAT(out.dtype(), T, {
      using A = compute_t<T>;
      elementwise<T>({&in[0], &in[2], &in[1]}, out, [](const auto* p, auto* r, size_t b, size_t e) {
        const auto *x = p[0], *y = p[1], *g = p[2];
        using R = std::remove_pointer_t<decltype(r)>;
        for (size_t i = b; i < e; ++i) {
          const A xv = static_cast<A>(x[i]);
          r[i] = static_cast<R>(static_cast<A>(g[i]) * derivative_from_output<A>(xv, static_cast<A>(y[i])));
        }
      });
    });
  }
  // Into x's, g's or y's buffer: each element is read before it is written.
  uint64_t donors(const std::vector<array>& in, int) const override { return row_contiguous_donors(in, {0, 1, 2}); }
  Batching batching(const std::vector<int>&) const override { return Batching::same_shape; }
  const char* name() const override { return "GeluBackward"; }
};
const bool kGeluBackwardLoads =
    detail::register_primitive("GeluBackward", [](detail::Reader&) -> std::shared_ptr<Primitive> {
      return std::make_shared<GeluBackward>();
    });

class Gelu : public Custom {
 public:
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return {in.at(0)}; }
  Gelu() : Custom(reference) {}
  void save(detail::Writer&) const override {}
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    array& out = outs[0];
    out.alloc();
    LOOM_DISPATCH_FLOAT(out.dtype(), T, {
      using A = compute_t<T>;
      elementwise<T>({&in[0]}, out, [](const auto* p, auto* y, size_t b, size_t e) {
        const auto* x = p[0];
        using R = std::remove_pointer_t<decltype(y)>;
        for (size_t i = b; i < e; ++i) {
          const A xv = static_cast<A>(x[i]);
          A cdf;
          if constexpr (std::is_same_v<A, float>) {
            float ex;
            cdf = 0.5f * (1.0f + detail::erf_vec(xv * float(kInvSqrt2), ex));
          } else {
            cdf = 0.5 * (1.0 + std::erf(xv * kInvSqrt2));
          }
          y[i] = static_cast<R>(xv * cdf);
        }
      });
    });
  }
  uint64_t donors(const std::vector<array>& in, int) const override { return row_contiguous_donors(in, {0}); }
  Batching batching(const std::vector<int>&) const override { return Batching::same_shape; }
  const char* name() const override { return "Gelu"; }

 protected:
  std::vector<array> fused_vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                               const std::vector<array>& outputs) override {
    return backward(std::make_shared<GeluBackward>(), p, {astype(cot[0], p[0].dtype())}, {0}, {outputs[0]});
  }
};
const bool kGeluLoads = detail::register_primitive("Gelu", [](detail::Reader&) -> std::shared_ptr<Primitive> {
  return std::make_shared<Gelu>();
});

}  // namespace

array gelu(const array& x, StreamOrDevice s) {
  OnStream on(s);
  detail::reject_complex(x.dtype(), "gelu");
  array xf = is_floating_point(x.dtype()) ? x : astype(x, float32);
  return array(xf.shape(), xf.dtype(), std::make_shared<Gelu>(), {xf});
}

}  // namespace loom::fast
