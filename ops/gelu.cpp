// Fused exact GELU: x * Phi(x) and its derivative, one pass each (the composition
// x * (1 + erf(x / sqrt 2)) / 2 makes five forward and about ten backward passes).
#include <cmath>

#include "loom/autograd/reference.h"
#include "loom/core/primitive.h"
#include "loom/ops/fast_math.h"
#include "loom/ops/fused.h"
#include "loom/ops/kernels/elementwise.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)

// Phi(x) and the density phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
template <typename A>
LOOM_SIMD_INLINE void phi(A x, A& cdf, A& pdf) {
  if constexpr (std::is_same_v<A, float>) {
    float e;
    const float erf = detail::erf_vec(x * float(kInvSqrt2), e);
    cdf = 0.5f * (1.0f + erf);
    pdf = float(kInvSqrt2Pi) * e;
  } else {
    cdf = 0.5 * (1.0 + std::erf(x * kInvSqrt2));
    pdf = kInvSqrt2Pi * std::exp(-0.5 * x * x);
  }
}

// The composition, for derivatives of the gradient: g * (Phi(x) + x phi(x)).
array reference_grad(const array& x, const array& g) {
  const Dtype d = x.dtype();
  array cdf = multiply(add(erf(multiply(x, array(kInvSqrt2, d))), array(1.0, d)), array(0.5, d));
  array pdf = multiply(exp(multiply(square(x), array(-0.5, d))), array(kInvSqrt2Pi, d));
  return multiply(g, add(cdf, multiply(x, pdf)));
}

template <typename T, typename F>
void elementwise(const std::vector<array>& in, array& out, F f) {
  // The result goes into an input's buffer when nothing else needs it (the incoming gradient of
  // GeluGrad, typically): no fresh buffer, and one that is already in cache.
  kernels::alloc_donating(out, {&in.back(), &in[0]});
  std::vector<array> c;
  for (const auto& a : in) c.push_back(a.flags().row_contiguous ? a : kernels::row_contiguous(a));
  const size_t n = out.size();
  const T* x = kernels::ptr<T>(c[0]);
  const T* g = c.size() > 1 ? kernels::ptr<T>(c[1]) : nullptr;
  T* y = kernels::ptr<T>(out);
  kernels::parallel_for(n, [&](size_t b, size_t e) { f(x, g, y, b, e); }, 1 << 14);
}

// inputs: x, g -> g * gelu'(x)
class GeluGrad : public UnaryPrimitive {
 public:
  void eval_cpu(const std::vector<array>& in, array& out) override {
    LOOM_DISPATCH_FLOAT(out.dtype(), T, {
      using A = compute_t<T>;
      elementwise<T>(in, out, [](const T* x, const T* g, T* y, size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
          const A xv = static_cast<A>(x[i]);
          A cdf, pdf;
          phi<A>(xv, cdf, pdf);
          y[i] = static_cast<T>(static_cast<A>(g[i]) * (cdf + xv * pdf));
        }
      });
    });
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    auto f = [](const std::vector<array>& x) { return std::vector<array>{reference_grad(x[0], x[1])}; };
    return detail::reference_vjp(f, p, cot, argnums);
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& tan,
                         const std::vector<int>& argnums) override {
    auto f = [](const std::vector<array>& x) { return std::vector<array>{reference_grad(x[0], x[1])}; };
    return detail::reference_jvp(f, p, tan, argnums);
  }
  const char* name() const override { return "GeluGrad"; }
};

array gelu_grad(const array& x, const array& g) {
  return array(x.shape(), x.dtype(), std::make_shared<GeluGrad>(), {x, astype(g, x.dtype())});
}

class Gelu : public UnaryPrimitive {
 public:
  void eval_cpu(const std::vector<array>& in, array& out) override {
    LOOM_DISPATCH_FLOAT(out.dtype(), T, {
      using A = compute_t<T>;
      elementwise<T>(in, out, [](const T* x, const T*, T* y, size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) {
          const A xv = static_cast<A>(x[i]);
          A cdf, pdf;
          phi<A>(xv, cdf, pdf);
          y[i] = static_cast<T>(xv * cdf);
        }
      });
    });
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {gelu_grad(p[0], cot[0])};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& tan, const std::vector<int>&) override {
    return {gelu_grad(p[0], tan[0])};
  }
  const char* name() const override { return "Gelu"; }
};

}  // namespace

array gelu_erf(const array& x) {
  array xf = is_floating_point(x.dtype()) ? x : astype(x, float32);
  return array(xf.shape(), xf.dtype(), std::make_shared<Gelu>(), {xf});
}

}  // namespace loom
