// Fused RMS normalization over the last axis: forward and backward each make one pass per row.
#include <cmath>

#include "loom/core/serialize.h"
#include "loom/fast/custom.h"
#include "loom/fast/fast.h"
#include "loom/ops/autocast.h"
#include "loom/kernels/fast_math.h"
#include "loom/kernels/rows.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::fast {

using loom::detail::msg;
using loom::detail::shape_str;
using kernels::dispatch_real;
using kernels::row_contiguous;

namespace {

// inputs x[, w]: x * rsqrt(mean(x^2) + eps) * w, op by op.
Composition reference(double eps, bool has_w) {
  return [=](const std::vector<array>& in) {
    const array& x = in[0];
    array y = multiply(x, rsqrt(add(mean(square(x), -1, true), array(eps, x.dtype()))));
    if (has_w) y = multiply(y, in[1]);
    return std::vector<array>{y};
  };
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

// inputs: x[, w], g; outputs: dx[, dw].
class RMSNormBackward : public CustomBackward {
 public:
  RMSNormBackward(double eps, bool has_w, const std::vector<int>& wrt)
      : CustomBackward(reference(eps, has_w), 1 + has_w, 1, wrt), eps_(eps), has_w_(has_w), wrt_(wrt) {}
  void save(detail::Writer& w) const override { w.put(eps_, has_w_, wrt_); }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    if (!kernels::alloc_row_grads(outs)) return;
    array x = row_contiguous(in[0]), g = row_contiguous(in.back());
    std::optional<array> w;
    if (has_w_) w = row_contiguous(in[1]);
    dispatch_real(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* dw = has_w_ ? kernels::ptr<T>(outs[1]) : nullptr;
      backward_kernel<T>(x, w ? kernels::ptr<T>(*w) : nullptr, g, kernels::ptr<T>(outs[0]), dw, eps_);
    });
  }
  // dx in the input's or the cotangent's buffer.
  uint64_t donors(const std::vector<array>& in, int o) const override {
    return o == 0 ? row_contiguous_donors(in, {0, static_cast<int>(in.size()) - 1}) : 0;
  }
  const char* name() const override { return "RMSNormBackward"; }

 private:
  double eps_;
  bool has_w_;
  std::vector<int> wrt_;
};
const bool kRMSNormBackwardLoads =
    detail::register_primitive("RMSNormBackward", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      double eps;
      bool has_w;
      std::vector<int> wrt;
      r.get(eps, has_w, wrt);
      return std::make_shared<RMSNormBackward>(eps, has_w, wrt);
    });

// inputs: x[, w]
class RMSNorm : public Custom {
 public:
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return row_op_shapes(in); }
  RMSNorm(double eps, bool has_w) : Custom(reference(eps, has_w)), eps_(eps), has_w_(has_w) {}
  void save(detail::Writer& w) const override { w.put(eps_, has_w_); }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    array& out = outs[0];
    out.alloc();
    array x = row_contiguous(in[0]);
    if (out.size() == 0) return;
    std::optional<array> w;
    if (has_w_) w = row_contiguous(in[1]);
    dispatch_real(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      forward_kernel<T>(x, w ? kernels::ptr<T>(*w) : nullptr, out, eps_);
    });
  }
  uint64_t donors(const std::vector<array>& in, int) const override { return row_contiguous_donors(in, {0}); }
  // Per-example weights need the reference; a batch of rows is more rows.
  Batching batching(const std::vector<int>& axes) const override {
    for (size_t i = 1; i < axes.size(); ++i) {
      if (axes[i] >= 0) return Batching::reference;
    }
    return Batching::rows;
  }
  const char* name() const override { return "RMSNorm"; }

 protected:
  std::vector<array> fused_vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                               const std::vector<array>&) override {
    const std::vector<int> all = every_input(p);
    return pick(backward(std::make_shared<RMSNormBackward>(eps_, has_w_, all), p, {cot[0]}, all), argnums);
  }

 private:
  double eps_;
  bool has_w_;
};
const bool kRMSNormLoads = detail::register_primitive("RMSNorm", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  double eps;
  bool has_w;
  r.get(eps, has_w);
  return std::make_shared<RMSNorm>(eps, has_w);
});

}  // namespace

array rms_norm(const array& x_cast, const std::optional<array>& weight_cast, double eps, StreamOrDevice s) {
  OnStream on(s);
  // In Autocast's float32 list.
  const array x = loom::detail::autocast_float32(x_cast);
  const std::optional<array> weight = loom::detail::autocast_float32(weight_cast);
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
  detail::reject_complex(d, op);
  const Dtype out_dtype = is_floating_point(d) ? d : float32;
  const Dtype cd = d == float64 ? float64 : float32;  // half types compute in float32
  std::vector<array> in{astype(x, cd)};
  if (weight) in.push_back(astype(*weight, cd));
  array y(x.shape(), cd, std::make_shared<RMSNorm>(eps, weight.has_value()), in);
  return y.dtype() == out_dtype ? y : astype(y, out_dtype);
}

}  // namespace loom::fast
