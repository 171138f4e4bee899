// Fused exact GELU: x * Phi(x) and its derivative, one pass each (the composition
// x * (1 + erf(x / sqrt 2)) / 2 makes five forward and about ten backward passes).
#include <cmath>
#include <optional>

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
  std::vector<const T*> p;
  for (const auto& a : in) {
    c.push_back(a.flags().row_contiguous ? a : kernels::row_contiguous(a));
    p.push_back(kernels::ptr<T>(c.back()));
  }
  T* r = kernels::ptr<T>(out);
  kernels::parallel_for(out.size(), [&](size_t b, size_t e) { f(p.data(), r, b, e); }, 1 << 14);
}

// The derivative from GELU's own output y = x Phi(x): Phi(x) = y / x (within 2 ulp of Phi; 1/2 where
// |x| is too small to divide by), so only phi's exponential is left to compute: about half the work
// of evaluating erf again.
template <typename A>
LOOM_SIMD_INLINE A derivative_from_output(A x, A y) {
  const A cdf = std::abs(x) > A(1e-20) ? y / x : A(0.5);
  return cdf + x * (A(kInvSqrt2Pi) * detail::exp_of<A>(A(-0.5) * x * x));
}

// inputs: x, g -> g * gelu'(x); or x, y = gelu(x), g -> the same, computed from y. y is taken to be
// gelu(x) (only Gelu's vjp passes it), so derivatives go through x alone.
class GeluGrad : public UnaryPrimitive {
 public:
  void eval_cpu(const std::vector<array>& in, array& out) override {
    LOOM_DISPATCH_FLOAT(out.dtype(), T, {
      using A = compute_t<T>;
      if (in.size() == 3) {
        elementwise<T>(in, out, [](const T* const* p, T* r, size_t b, size_t e) {
          const T *x = p[0], *y = p[1], *g = p[2];
          for (size_t i = b; i < e; ++i) {
            const A xv = static_cast<A>(x[i]);
            r[i] = static_cast<T>(static_cast<A>(g[i]) * derivative_from_output<A>(xv, static_cast<A>(y[i])));
          }
        });
        return;
      }
      elementwise<T>(in, out, [](const T* const* p, T* r, size_t b, size_t e) {
        const T *x = p[0], *g = p[1];
        for (size_t i = b; i < e; ++i) {
          const A xv = static_cast<A>(x[i]);
          A cdf, pdf;
          phi<A>(xv, cdf, pdf);
          r[i] = static_cast<T>(static_cast<A>(g[i]) * (cdf + xv * pdf));
        }
      });
    });
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    auto f = [](const std::vector<array>& x) { return std::vector<array>{reference_grad(x[0], x.back())}; };
    return detail::reference_vjp(f, p, cot, argnums);
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& tan,
                         const std::vector<int>& argnums) override {
    auto f = [](const std::vector<array>& x) { return std::vector<array>{reference_grad(x[0], x.back())}; };
    return detail::reference_jvp(f, p, tan, argnums);
  }
  const char* name() const override { return "GeluGrad"; }
};

array gelu_grad(const array& x, const array& g, const std::optional<array>& y = std::nullopt) {
  if (y) return array(x.shape(), x.dtype(), std::make_shared<GeluGrad>(), {x, *y, astype(g, x.dtype())});
  return array(x.shape(), x.dtype(), std::make_shared<GeluGrad>(), {x, astype(g, x.dtype())});
}

class Gelu : public UnaryPrimitive {
 public:
  void eval_cpu(const std::vector<array>& in, array& out) override {
    LOOM_DISPATCH_FLOAT(out.dtype(), T, {
      using A = compute_t<T>;
      elementwise<T>(in, out, [](const T* const* p, T* y, size_t b, size_t e) {
        const T* x = p[0];
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
                         const std::vector<array>& outputs) override {
    return {gelu_grad(p[0], cot[0], outputs[0])};
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
