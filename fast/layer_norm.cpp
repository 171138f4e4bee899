// Fused layer normalization over the last axis: forward and backward each make one pass per row
// (the composition makes about ten passes forward and twenty backward).
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

// inputs x[, w][, b]: (x - mean) / sqrt(var + eps) * w + b, op by op.
Composition reference(double eps, bool has_w, bool has_b) {
  return [=](const std::vector<array>& in) {
    const array& x = in[0];
    array c = subtract(x, mean(x, -1, true));
    array y = multiply(c, rsqrt(add(mean(square(c), -1, true), array(eps, x.dtype()))));
    if (has_w) y = multiply(y, in[1]);
    if (has_b) y = add(y, in.back());
    return std::vector<array>{y};
  };
}

template <typename T>
inline void row_stats(const T* x, int n, double eps, T& mu, T& rstd) {
  mu = detail::lane_sum<T>(n, [&](int j) { return x[j]; }) / n;
  const T m = mu;
  const T v = detail::lane_sum<T>(n, [&](int j) { return (x[j] - m) * (x[j] - m); });
  rstd = T(1) / std::sqrt(v / n + static_cast<T>(eps));
}

template <typename T>
void forward_kernel(const array& x, const T* w, const T* b, array& out, double eps) {
  const int n = x.shape(-1);
  kernels::map_rows<T>(x, out, [&](const T* xr, T* yr) {
    T mu, rstd;
    row_stats(xr, n, eps, mu, rstd);
    if (w && b) {
      for (int j = 0; j < n; ++j) yr[j] = (xr[j] - mu) * rstd * w[j] + b[j];
    } else {
      for (int j = 0; j < n; ++j) {
        T y = (xr[j] - mu) * rstd;
        if (w) y *= w[j];
        if (b) y += b[j];
        yr[j] = y;
      }
    }
  });
}

// dx, and the per-feature sums dw = sum(g * xhat), db = sum(g), of sum(g * layer_norm(x)).
template <typename T>
void backward_kernel(const array& x, const T* w, const array& g, T* dx, T* dw, T* db, double eps) {
  const int n = x.shape(-1);
  const size_t rows = x.size() / n;
  const T* xp = kernels::ptr<T>(x);
  const T* gp = kernels::ptr<T>(g);
  // Sums of dw (first n) and db (last n).
  const std::vector<T> sums = kernels::parallel_rows_summing<T>(
      rows, n, 2 * size_t(n), [&](size_t r0, size_t r1, T* acc) {
        T* pw = acc;
        T* pb = acc + n;
        std::vector<T> xh(n), gw(n);
        for (size_t r = r0; r < r1; ++r) {
          const T* xr = xp + r * n;
          const T* gr = gp + r * n;
          T mu, rstd;
          row_stats(xr, n, eps, mu, rstd);
          for (int j = 0; j < n; ++j) {
            xh[j] = (xr[j] - mu) * rstd;
            pw[j] += gr[j] * xh[j];
            pb[j] += gr[j];
          }
          if (w) {
            for (int j = 0; j < n; ++j) gw[j] = gr[j] * w[j];
          } else {
            for (int j = 0; j < n; ++j) gw[j] = gr[j];
          }
          const T a = detail::lane_sum<T>(n, [&](int j) { return gw[j]; }) / n;
          const T c = detail::lane_sum<T>(n, [&](int j) { return gw[j] * xh[j]; }) / n;
          T* d = dx + r * n;
          for (int j = 0; j < n; ++j) d[j] = rstd * (gw[j] - a - xh[j] * c);
        }
      });
  if (dw) std::copy(sums.begin(), sums.begin() + n, dw);
  if (db) std::copy(sums.begin() + n, sums.end(), db);
}

// inputs: x[, w][, b], g; outputs: dx[, dw][, db].
class LayerNormBackward : public CustomBackward {
 public:
  LayerNormBackward(double eps, bool has_w, bool has_b, const std::vector<int>& wrt)
      : CustomBackward(reference(eps, has_w, has_b), 1 + has_w + has_b, 1, wrt),
        eps_(eps),
        has_w_(has_w),
        has_b_(has_b),
        wrt_(wrt) {}
  void save(detail::Writer& w) const override { w.put(eps_, has_w_, has_b_, wrt_); }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    const array& gin = in[1 + has_w_ + has_b_];
    if (!kernels::alloc_row_grads(outs)) return;
    array x = row_contiguous(in[0]), g = row_contiguous(gin);
    std::optional<array> w;
    if (has_w_) w = row_contiguous(in[1]);
    dispatch_real(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T* dw = has_w_ ? kernels::ptr<T>(outs[1]) : nullptr;
      T* db = has_b_ ? kernels::ptr<T>(outs.back()) : nullptr;
      backward_kernel<T>(x, w ? kernels::ptr<T>(*w) : nullptr, g, kernels::ptr<T>(outs[0]), dw, db, eps_);
    });
  }
  // dx in the input's or the cotangent's buffer.
  uint64_t donors(const std::vector<array>& in, int o) const override {
    return o == 0 ? row_contiguous_donors(in, {0, 1 + has_w_ + has_b_}) : 0;
  }
  const char* name() const override { return "LayerNormBackward"; }

 private:
  double eps_;
  bool has_w_, has_b_;
  std::vector<int> wrt_;
};
const bool kLayerNormBackwardLoads =
    detail::register_primitive("LayerNormBackward", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      double eps;
      bool has_w, has_b;
      std::vector<int> wrt;
      r.get(eps, has_w, has_b, wrt);
      return std::make_shared<LayerNormBackward>(eps, has_w, has_b, wrt);
    });

// inputs: x[, w][, b]
class LayerNorm : public Custom {
 public:
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return row_op_shapes(in); }
  LayerNorm(double eps, bool has_w, bool has_b) : Custom(reference(eps, has_w, has_b)), eps_(eps), has_w_(has_w), has_b_(has_b) {}
  void save(detail::Writer& w) const override { w.put(eps_, has_w_, has_b_); }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    array& out = outs[0];
    out.alloc();
    array x = row_contiguous(in[0]);
    if (out.size() == 0) return;
    std::optional<array> w, b;
    if (has_w_) w = row_contiguous(in[1]);
    if (has_b_) b = row_contiguous(in.back());
    dispatch_real(x.dtype(), [&](auto tag) {
      using T = decltype(tag);
      forward_kernel<T>(x, w ? kernels::ptr<T>(*w) : nullptr, b ? kernels::ptr<T>(*b) : nullptr, out, eps_);
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
  const char* name() const override { return "LayerNorm"; }

 protected:
  // One kernel computes every input's gradient (the per-feature sums cost little beside dx).
  std::vector<array> fused_vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                               const std::vector<array>&) override {
    const std::vector<int> all = every_input(p);
    return pick(backward(std::make_shared<LayerNormBackward>(eps_, has_w_, has_b_, all), p, {cot[0]}, all), argnums);
  }

 private:
  double eps_;
  bool has_w_, has_b_;
};
const bool kLayerNormLoads =
    detail::register_primitive("LayerNorm", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      double eps;
      bool has_w, has_b;
      r.get(eps, has_w, has_b);
      return std::make_shared<LayerNorm>(eps, has_w, has_b);
    });

}  // namespace

array layer_norm(const array& x_cast, const std::optional<array>& weight_cast, const std::optional<array>& bias_cast,
                 double eps, StreamOrDevice s) {
  OnStream on(s);
  // In Autocast's float32 list.
  using loom::detail::autocast_float32;
  const array x = autocast_float32(x_cast);
  const std::optional<array> weight = autocast_float32(weight_cast), bias = autocast_float32(bias_cast);
  const char* op = "layer_norm";
  if (x.ndim() == 0) throw std::invalid_argument(msg("[", op, "] needs an array with at least one axis, got a 0-d array"));
  const int n = x.shape(-1);
  for (const auto* p : {&weight, &bias}) {
    if (*p && (*p)->shape() != Shape{n}) {
      throw std::invalid_argument(msg("[", op, "] ", p == &weight ? "weight" : "bias", " must have shape (", n,
                                      ") to match the last axis of x ", shape_str(x.shape()), ", got ",
                                      shape_str((*p)->shape())));
    }
  }
  if (!(eps >= 0)) throw std::invalid_argument(msg("[", op, "] eps must be >= 0, got ", eps));
  Dtype d = x.dtype();
  if (weight) d = promote_types(d, weight->dtype());
  if (bias) d = promote_types(d, bias->dtype());
  detail::reject_complex(d, op);
  const Dtype out_dtype = is_floating_point(d) ? d : float32;
  const Dtype cd = d == float64 ? float64 : float32;  // half types compute in float32
  std::vector<array> in{astype(x, cd)};
  if (weight) in.push_back(astype(*weight, cd));
  if (bias) in.push_back(astype(*bias, cd));
  array y(x.shape(), cd, std::make_shared<LayerNorm>(eps, weight.has_value(), bias.has_value()), in);
  return y.dtype() == out_dtype ? y : astype(y, out_dtype);
}

}  // namespace loom::fast
