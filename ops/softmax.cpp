// Fused softmax and log_softmax over the last axis: forward and backward each make one pass per row
// (the composition makes one pass per op). The backward reads the forward's output, not its input.
#include <cmath>

#include "loom/autograd/reference.h"
#include "loom/core/primitive.h"
#include "loom/ops/fast_math.h"
#include "loom/ops/fused.h"
#include "loom/ops/kernels/elementwise.h"
#include "loom/ops/kernels/rows.h"
#include "loom/ops/ops.h"

namespace loom {

using kernels::dispatch_real;
using kernels::row_major;

namespace {

array reference(const array& x, bool take_log) { return detail::softmax_composed(x, {-1}, take_log); }

// The gradient of sum(g * y) for the input of y = softmax(x) (or log_softmax), from y.
array reference_backward(const array& y, const array& g, bool take_log) {
  if (take_log) return subtract(g, multiply(exp(y), sum(g, -1, true)));
  return multiply(y, subtract(g, sum(multiply(g, y), -1, true)));
}

template <typename T>
void forward_kernel(const array& x, array& out, bool take_log) {
  const int n = x.shape(-1);
  kernels::map_rows<T>(x, out, [&](const T* xr, T* yr) {
    // The composition's shift: the max (NaNs skipped; they make the sum NaN), 0 when infinite.
    T m = detail::lane_max(xr, n);
    if (std::isinf(m)) m = 0;
    if (take_log) {
      const T ls = std::log(detail::lane_sum<T>(n, [&](int j) { return detail::exp_of(xr[j] - m); }));
      for (int j = 0; j < n; ++j) yr[j] = (xr[j] - m) - ls;
    } else {
      const T s = detail::lane_sum<T>(n, [&](int j) { return yr[j] = detail::exp_of(xr[j] - m); });
      const T inv = T(1) / s;
      for (int j = 0; j < n; ++j) yr[j] *= inv;
    }
  });
}

// softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g).
template <typename T>
void backward_kernel(const array& y, const array& g, array& out, bool take_log) {
  const int n = y.shape(-1);
  const size_t rows = y.size() / n;
  const T* yp = kernels::ptr<T>(y);
  const T* gp = kernels::ptr<T>(g);
  T* dp = kernels::ptr<T>(out);
  kernels::parallel_rows(rows, n, [&](size_t r) {
    const T* yr = yp + r * n;
    const T* gr = gp + r * n;
    T* d = dp + r * n;
    if (take_log) {
      const T s = detail::lane_sum<T>(n, [&](int j) { return gr[j]; });
      for (int j = 0; j < n; ++j) d[j] = gr[j] - detail::exp_of(yr[j]) * s;
    } else {
      const T s = detail::lane_sum<T>(n, [&](int j) { return gr[j] * yr[j]; });
      for (int j = 0; j < n; ++j) d[j] = yr[j] * (gr[j] - s);
    }
  });
}

// inputs: y (the forward's output), g; output: dx.
class SoftmaxGrad : public UnaryPrimitive {
 public:
  explicit SoftmaxGrad(bool take_log) : log_(take_log) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    kernels::alloc_donating(out, {&in[1], &in[0]});  // elements are read before they are written
    array y = row_major(in[0]), g = row_major(in[1]);
    if (out.size() == 0) return;
    dispatch_real(y.dtype(), [&](auto tag) { backward_kernel<decltype(tag)>(y, g, out, log_); });
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    return detail::reference_vjp(fn(), p, cot, argnums);
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& tan,
                         const std::vector<int>& argnums) override {
    return detail::reference_jvp(fn(), p, tan, argnums);
  }
  const char* name() const override { return log_ ? "LogSoftmaxGrad" : "SoftmaxGrad"; }

 private:
  VectorFn fn() const {
    const bool take_log = log_;
    return [=](const std::vector<array>& p) { return std::vector<array>{reference_backward(p[0], p[1], take_log)}; };
  }
  bool log_;
};

// inputs: x
class SoftmaxOp : public UnaryPrimitive {
 public:
  explicit SoftmaxOp(bool take_log) : log_(take_log) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    kernels::alloc_donating(out, {&in[0]});
    array x = row_major(in[0]);
    if (out.size() == 0) return;
    dispatch_real(x.dtype(), [&](auto tag) { forward_kernel<decltype(tag)>(x, out, log_); });
  }
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>& outputs) override {
    const array& y = outputs[0];
    const array g = cot[0].dtype() == y.dtype() ? cot[0] : astype(cot[0], y.dtype());
    return {array(y.shape(), y.dtype(), std::make_shared<SoftmaxGrad>(log_), {y, g})};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& tan,
                         const std::vector<int>& argnums) override {
    const bool take_log = log_;
    auto f = [=](const std::vector<array>& x) { return std::vector<array>{reference(x[0], take_log)}; };
    return detail::reference_jvp(f, p, tan, argnums);
  }
  const char* name() const override { return log_ ? "LogSoftmax" : "Softmax"; }

 private:
  bool log_;
};

}  // namespace

namespace detail {

array softmax_last_axis(const array& x, bool take_log) {
  const Dtype cd = x.dtype() == float64 ? float64 : float32;  // half types compute in float32
  array y(x.shape(), cd, std::make_shared<SoftmaxOp>(take_log), {astype(x, cd)});
  return y.dtype() == x.dtype() ? y : astype(y, x.dtype());
}

}  // namespace detail

}  // namespace loom
