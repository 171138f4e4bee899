// Fused RMS normalization over the last axis: forward and backward each make one pass per row
// (the composition makes one pass per op).
#include <cmath>

#include "loom/autograd/reference.h"
#include "loom/core/primitive.h"
#include "loom/ops/fast_math.h"
#include "loom/ops/fused.h"
#include "loom/ops/kernels/elementwise.h"
#include "loom/ops/kernels/rows.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;
using kernels::dispatch_real;
using kernels::row_major;

namespace {

// x * rsqrt(mean(x^2) + eps) * w, op by op.
array reference(const array& x, const std::optional<array>& w, double eps) {
  array y = multiply(x, rsqrt(add(mean(square(x), -1, true), array(eps, x.dtype()))));
  if (w) y = multiply(y, *w);
  return y;
}

// 1 / sqrt(mean(x^2) + eps) of one row.
template <typename T>
inline T row_rstd(const T* x, int n, double eps) {
  const T s = detail::lane_sum<T>(n, [&](int j) { return x[j] * x[j]; });
  return T(1) / std::sqrt(s / n + static_cast<T>(eps));
}

template <typename T>
void forward_kernel(const array& x, const T* w, array& out, double eps) {
  const int n = x.shape(-1);
  kernels::map_rows<T>(x, out, [&](const T* xr, T* yr) {
    const T rstd = row_rstd(xr, n, eps);
    if (w) {
      for (int j = 0; j < n; ++j) yr[j] = xr[j] * rstd * w[j];
    } else {
      for (int j = 0; j < n; ++j) yr[j] = xr[j] * rstd;
    }
  });
}

// dx, and the per-feature sum dw = sum(g * x * rstd) when dw is given, of sum(g * rms_norm(x)).
template <typename T>
void backward_kernel(const array& x, const T* w, const array& g, T* dx, T* dw, double eps) {
  const int n = x.shape(-1);
  const size_t rows = x.size() / n;
  const T* xp = kernels::ptr<T>(x);
  const T* gp = kernels::ptr<T>(g);
  const std::vector<T> sw = kernels::parallel_rows_summing<T>(
      rows, n, dw ? size_t(n) : 0, [&](size_t r0, size_t r1, T* acc) {
        T* pw = dw ? acc : nullptr;
        std::vector<T> gw(n);
        for (size_t r = r0; r < r1; ++r) {
          const T* xr = xp + r * n;
          const T* gr = gp + r * n;
          const T rstd = row_rstd(xr, n, eps);
          if (pw) {
            for (int j = 0; j < n; ++j) pw[j] += gr[j] * xr[j] * rstd;
          }
          if (w) {
            for (int j = 0; j < n; ++j) gw[j] = gr[j] * w[j];
          } else {
            for (int j = 0; j < n; ++j) gw[j] = gr[j];
          }
          const T c = detail::lane_sum<T>(n, [&](int j) { return gw[j] * xr[j]; }) / n * rstd * rstd;
          T* d = dx + r * n;
          for (int j = 0; j < n; ++j) d[j] = rstd * (gw[j] - xr[j] * c);
        }
      });
  if (dw) std::copy(sw.begin(), sw.end(), dw);
}

// The gradients of sum(g * reference(x, w)) for x[, w], as the backward primitive outputs them.
std::vector<array> reference_backward(const array& x, const std::optional<array>& w, const array& g, double eps) {
  std::vector<array> primals{x};
  if (w) primals.push_back(*w);
  auto f = [&](const std::vector<array>& p) {
    return std::vector<array>{reference(p[0], w ? std::optional<array>(p[1]) : std::nullopt, eps)};
  };
  return vjp(f, primals, {g}).second;
}

// inputs: x[, w], g; outputs: dx[, dw].
class RMSNormGrad : public Primitive {
 public:
  RMSNormGrad(double eps, bool has_w) : eps_(eps), has_w_(has_w) {}
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    kernels::alloc_donating(outs[0], {&in.back(), &in[0]});  // a row is read before it is written
    for (size_t i = 1; i < outs.size(); ++i) outs[i].alloc();
    array x = row_major(in[0]), g = row_major(in.back());
    std::optional<array> w;
    if (has_w_) w = row_major(in[1]);
    if (outs[0].size() == 0) {
      for (size_t i = 1; i < outs.size(); ++i) std::fill_n(static_cast<char*>(outs[i].raw_data()), outs[i].nbytes(), 0);
      return;
    }
    dispatch_real(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* dw = has_w_ ? kernels::ptr<T>(outs[1]) : nullptr;
      backward_kernel<T>(x, w ? kernels::ptr<T>(*w) : nullptr, g, kernels::ptr<T>(outs[0]), dw, eps_);
    });
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    return detail::reference_vjp(fn(), p, cot, argnums);
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& tan,
                         const std::vector<int>& argnums) override {
    return detail::reference_jvp(fn(), p, tan, argnums);
  }
  const char* name() const override { return "RMSNormGrad"; }

 private:
  VectorFn fn() const {
    const double eps = eps_;
    const bool hw = has_w_;
    return [=](const std::vector<array>& p) {
      return reference_backward(p[0], hw ? std::optional<array>(p[1]) : std::nullopt, p.back(), eps);
    };
  }
  double eps_;
  bool has_w_;
};

// inputs: x[, w]
class RMSNormOp : public UnaryPrimitive {
 public:
  RMSNormOp(double eps, bool has_w) : eps_(eps), has_w_(has_w) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    kernels::alloc_donating(out, {&in[0]});
    array x = row_major(in[0]);
    if (out.size() == 0) return;
    std::optional<array> w;
    if (has_w_) w = row_major(in[1]);
    dispatch_real(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      forward_kernel<T>(x, w ? kernels::ptr<T>(*w) : nullptr, out, eps_);
    });
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> in{p[0]};
    std::vector<Shape> shapes{p[0].shape()};
    if (has_w_) in.push_back(p[1]), shapes.push_back(p[1].shape());
    in.push_back(cot[0]);
    std::vector<Dtype> dtypes(shapes.size(), p[0].dtype());
    auto grads = array::make_arrays(shapes, dtypes, std::make_shared<RMSNormGrad>(eps_, has_w_), in);
    std::vector<array> out;
    for (int a : argnums) out.push_back(grads[a]);  // input i's gradient is output i
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& tan,
                         const std::vector<int>& argnums) override {
    const double eps = eps_;
    const bool hw = has_w_;
    auto f = [=](const std::vector<array>& x) {
      return std::vector<array>{reference(x[0], hw ? std::optional<array>(x[1]) : std::nullopt, eps)};
    };
    return detail::reference_jvp(f, p, tan, argnums);
  }
  const char* name() const override { return "RMSNorm"; }

 private:
  double eps_;
  bool has_w_;
};

}  // namespace

array rms_norm(const array& x, const std::optional<array>& weight, double eps) {
  const char* op = "rms_norm";
  if (x.ndim() == 0) throw std::invalid_argument(msg("[", op, "] needs an array with at least one axis, got a 0-d array"));
  const int n = x.shape(-1);
  if (weight && weight->shape() != Shape{n}) {
    throw std::invalid_argument(msg("[", op, "] weight must have shape (", n, ") to match the last axis of x ",
                                    shape_str(x.shape()), ", got ", shape_str(weight->shape())));
  }
  if (!(eps >= 0)) throw std::invalid_argument(msg("[", op, "] eps must be >= 0, got ", eps));
  Dtype d = x.dtype();
  if (weight) d = promote_types(d, weight->dtype());
  const Dtype out_dtype = is_floating_point(d) ? d : float32;
  const Dtype cd = d == float64 ? float64 : float32;  // half types compute in float32
  std::vector<array> in{astype(x, cd)};
  if (weight) in.push_back(astype(*weight, cd));
  array y(x.shape(), cd, std::make_shared<RMSNormOp>(eps, weight.has_value()), in);
  return y.dtype() == out_dtype ? y : astype(y, out_dtype);
}

}  // namespace loom
