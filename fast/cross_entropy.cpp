// Fused softmax cross entropy with class-index targets: forward and backward each make one pass per
// row (the op-by-op graph makes about ten).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "loom/core/serialize.h"
#include "loom/fast/custom.h"
#include "loom/fast/fast.h"
#include "loom/ops/autocast.h"
#include "loom/ops/batching.h"
#include "loom/ops/indexing.h"
#include "loom/kernels/elementwise.h"
#include "loom/kernels/fast_math.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::fast {

using loom::detail::msg;
using loom::detail::shape_str;

namespace {

std::string out_of_range_msg(const char* op, int64_t index, int num_classes, const Shape& logits_shape, int axis) {
  return msg("[", op, "] class index ", index, " is out of range for ", num_classes, " classes (axis ", axis,
             " of logits of shape ", shape_str(logits_shape), ")");
}

// The targets as int64 in row-major order, each checked to lie in [0, num_classes).
std::vector<int64_t> load_targets(const array& t, int num_classes, const Shape& logits_shape, int axis) {
  std::vector<int64_t> v(t.size());
  if (v.empty()) return v;
  kernels::copy_strided(t, v.data(), int64, kernels::row_major_strides(t.shape()));
  for (int64_t x : v) {
    if (x < 0 || x >= num_classes) {
      throw std::out_of_range(out_of_range_msg("softmax_cross_entropy", x, num_classes, logits_shape, axis));
    }
  }
  return v;
}

// The shape and strides of every axis but `axis`.
Shape drop_axis(const Shape& s, int axis) {
  Shape out(s);
  out.erase(out.begin() + axis);
  return out;
}
Strides drop_axis(const Strides& s, int axis) {
  Strides out(s);
  out.erase(out.begin() + axis);
  return out;
}

using loom::detail::exp_of;

// shift = the row's max (0 when that is infinite or the row is NaN-only), sum = sum(exp(x - shift)).
// NaNs are skipped by the max and then make the sum NaN. Contiguous rows accumulate in 16 lanes so
// the loops vectorize.
template <typename T, typename A>
inline void row_stats(const T* p, int64_t st, int n, A& shift, A& sum) {
  constexpr int W = 16;
  A m = -std::numeric_limits<A>::infinity();
  A s = 0;
  if (st == 1) {
    A lanes[W];
    for (int l = 0; l < W; ++l) lanes[l] = m;
    int j = 0;
    for (; j + W <= n; j += W) {
      for (int l = 0; l < W; ++l) lanes[l] = std::max(lanes[l], static_cast<A>(p[j + l]));
    }
    for (int l = 0; l < W; ++l) m = std::max(m, lanes[l]);
    for (; j < n; ++j) m = std::max(m, static_cast<A>(p[j]));
    if (!std::isfinite(m)) m = 0;
    for (int l = 0; l < W; ++l) lanes[l] = 0;
    j = 0;
    for (; j + W <= n; j += W) {
      for (int l = 0; l < W; ++l) lanes[l] += exp_of<A>(static_cast<A>(p[j + l]) - m);
    }
    for (int l = 0; l < W; ++l) s += lanes[l];
    for (; j < n; ++j) s += exp_of<A>(static_cast<A>(p[j]) - m);
  } else {
    for (int j = 0; j < n; ++j) m = std::max(m, static_cast<A>(p[int64_t(j) * st]));
    if (!std::isfinite(m)) m = 0;
    for (int j = 0; j < n; ++j) s += exp_of<A>(static_cast<A>(p[int64_t(j) * st]) - m);
  }
  shift = m;
  sum = s;
}

template <typename T, typename A>
inline A row_sum(const T* p, int64_t st, int n) {
  A s = 0;
  for (int j = 0; j < n; ++j) s += static_cast<A>(p[int64_t(j) * st]);
  return s;
}

// Rows are every position of the non-class axes; a chunk of rows runs per thread.
inline size_t row_threshold(int n) { return std::max<size_t>(1, kernels::kParallelThreshold / std::max(n, 1)); }

template <typename T>
void forward_kernel(const array& x, const std::vector<int64_t>& tgt, array& out, int axis, double ls) {
  using A = compute_t<T>;
  const int n = x.shape()[axis];
  const int64_t xs = x.strides()[axis];
  const Shape outer = drop_axis(x.shape(), axis);
  const std::array<Strides, 1> st{drop_axis(x.strides(), axis)};
  const T* xp = kernels::ptr<T>(x);
  T* y = kernels::ptr<T>(out);
  const A keep = static_cast<A>(1.0 - ls), spread = static_cast<A>(ls / n);
  kernels::parallel_for(
      out.size(),
      [&](size_t b, size_t e) {
        kernels::Walker<1> w(outer, st, static_cast<int64_t>(b));
        for (size_t r = b; r < e; ++r, w.next()) {
          const T* p = xp + w.off[0];
          A shift, sum;
          row_stats<T, A>(p, xs, n, shift, sum);
          A loss = shift + std::log(sum) - keep * static_cast<A>(p[tgt[r] * xs]);
          if (ls > 0) loss -= spread * row_sum<T, A>(p, xs, n);
          y[r] = static_cast<T>(loss);
        }
      },
      row_threshold(n));
}

template <typename T>
void backward_kernel(const array& x, const std::vector<int64_t>& tgt, const array& g, array& out, int axis,
                     double ls) {
  using A = compute_t<T>;
  const int n = x.shape()[axis];
  const int64_t xs = x.strides()[axis], os = out.strides()[axis];
  const Shape outer = drop_axis(x.shape(), axis);
  const std::array<Strides, 3> strides{drop_axis(x.strides(), axis), g.strides(), drop_axis(out.strides(), axis)};
  const T* xp = kernels::ptr<T>(x);
  const T* gp = kernels::ptr<T>(g);
  T* y = kernels::ptr<T>(out);
  const A keep = static_cast<A>(1.0 - ls), spread = static_cast<A>(ls / n);
  const int64_t rows = static_cast<int64_t>(g.size());
  kernels::parallel_for(
      static_cast<size_t>(rows),
      [&](size_t b, size_t e) {
        kernels::Walker<3> w(outer, strides, static_cast<int64_t>(b));
        for (size_t r = b; r < e; ++r, w.next()) {
          const T* p = xp + w.off[0];
          T* o = y + w.off[2];
          const A gv = static_cast<A>(gp[w.off[1]]);
          A shift, sum;
          row_stats<T, A>(p, xs, n, shift, sum);
          const A inv = A(1) / sum;
          if (xs == 1 && os == 1) {
            for (int j = 0; j < n; ++j) o[j] = static_cast<T>((exp_of<A>(static_cast<A>(p[j]) - shift) * inv - spread) * gv);
          } else {
            for (int j = 0; j < n; ++j) {
              o[j * os] = static_cast<T>((exp_of<A>(static_cast<A>(p[j * xs]) - shift) * inv - spread) * gv);
            }
          }
          const int64_t t = tgt[r];
          o[t * os] = static_cast<T>((exp_of<A>(static_cast<A>(p[t * xs]) - shift) * inv - spread - keep) * gv);
        }
      },
      row_threshold(n));
}

// inputs logits (floating point), targets: logsumexp(x) - (1 - ls) x[t] - ls mean(x) along the
// class axis, op by op.
Composition reference(int axis, double ls) {
  return [axis, ls](const std::vector<array>& in) {
    const array &x = in[0], &t = in[1];
    const Dtype d = x.dtype();
    array picked = squeeze(take_along_axis(x, expand_dims(t, axis), axis), axis);
    array loss = subtract(logsumexp(x, axis), multiply(picked, array(1.0 - ls, d)));
    if (ls > 0) loss = subtract(loss, multiply(mean(x, axis), array(ls, d)));
    return std::vector<array>{loss};
  };
}

// The batching rule of both cross-entropy kernels: every input with the batch first (so the class axis
// moves up one), the same kernel on one more leading axis.
template <typename Kernel>
std::pair<std::vector<array>, std::vector<int>> vmap_rows_at(const std::vector<array>& in, const std::vector<int>& axes,
                                                             const std::vector<array>& outs, int axis, double ls) {
  std::vector<array> x = loom::detail::all_batch_first(in, axes);
  const int n = x[0].shape()[0];
  return {{array(loom::detail::insert_axis(outs[0].shape(), 0, n), outs[0].dtype(), std::make_shared<Kernel>(axis + 1, ls),
                 std::move(x))},
          {0}};
}

// d/dx of softmax_cross_entropy, scaled by the cotangent g: (softmax(x) - q) * g with
// q = (1 - ls) * onehot(t) + ls / C. Inputs: x, t, g (g has the shape of the loss).
// A shapeless call's loss shape: the logits' without the class axis, which the targets must have.
Shape entropy_shapes(const Shape& logits, const Shape& targets, int axis, const char* who) {
  Shape loss = logits;
  loss.erase(loss.begin() + axis);
  if (targets != loss) {
    throw std::invalid_argument(msg("[compile] ", who, " of logits ", shape_str(logits), " cannot take targets of shape ",
                                    shape_str(targets)));
  }
  return loss;
}

class SoftmaxCrossEntropyBackward : public CustomBackward {
 public:
  SoftmaxCrossEntropyBackward(int axis, double ls) : CustomBackward(reference(axis, ls), 2, 1, {0}), axis_(axis), ls_(ls) {}
  void save(detail::Writer& w) const override { w.put(axis_, ls_); }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    const array &x = in[0], &g = in[2];
    array& out = outs[0];
    auto tgt = load_targets(in[1], x.shape()[axis_], x.shape(), axis_);
    out.alloc();
    if (out.size() == 0) return;
    LOOM_DISPATCH_FLOAT(x.dtype(), T, backward_kernel<T>(x, tgt, g, out, axis_, ls_));
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return vmap_rows_at<SoftmaxCrossEntropyBackward>(in, axes, outs, axis_, ls_);
  }
  // A shapeless call: the logits' gradient has the logits' shape (targets and cotangent as the forward's).
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    const Shape loss = entropy_shapes(in.at(0), in.at(1), axis_, name());
    if (in.at(2) != loss) {
      throw std::invalid_argument(msg("[compile] ", name(), " of logits ", shape_str(in[0]), " cannot take a cotangent of shape ",
                                      shape_str(in[2])));
    }
    return {in[0]};
  }
  const char* name() const override { return "SoftmaxCrossEntropyBackward"; }

 private:
  int axis_;
  double ls_;
};
const bool kSoftmaxCrossEntropyBackwardLoads =
    detail::register_primitive("SoftmaxCrossEntropyBackward", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      int axis;
      double ls;
      r.get(axis, ls);
      return std::make_shared<SoftmaxCrossEntropyBackward>(axis, ls);
    });

class SoftmaxCrossEntropy : public Custom {
 public:
  SoftmaxCrossEntropy(int axis, double ls) : Custom(reference(axis, ls)), axis_(axis), ls_(ls) {}
  void save(detail::Writer& w) const override { w.put(axis_, ls_); }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    const array& x = in[0];
    array& out = outs[0];
    auto tgt = load_targets(in[1], x.shape()[axis_], x.shape(), axis_);
    out.alloc();
    if (out.size() == 0) return;
    LOOM_DISPATCH_FLOAT(x.dtype(), T, forward_kernel<T>(x, tgt, out, axis_, ls_));
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return vmap_rows_at<SoftmaxCrossEntropy>(in, axes, outs, axis_, ls_);
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    return {entropy_shapes(in.at(0), in.at(1), axis_, name())};
  }
  const char* name() const override { return "SoftmaxCrossEntropy"; }

 protected:
  // The logits' gradient from one fused kernel; the class indices have none.
  std::vector<array> fused_vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                               const std::vector<array>&) override {
    std::vector<array> out;
    for (int a : argnums) {
      out.push_back(a == 0 ? backward(std::make_shared<SoftmaxCrossEntropyBackward>(axis_, ls_), p,
                                      {astype(cot[0], p[0].dtype())}, {0})[0]
                           : zeros_like(p[1]));
    }
    return out;
  }

 private:
  int axis_;
  double ls_;
};
const bool kSoftmaxCrossEntropyLoads =
    detail::register_primitive("SoftmaxCrossEntropy", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      int axis;
      double ls;
      r.get(axis, ls);
      return std::make_shared<SoftmaxCrossEntropy>(axis, ls);
    });

}  // namespace

void check_class_indices(const array& targets, int num_classes, const Shape& logits_shape, int axis, const char* op) {
  if (!targets.is_evaluated() || targets.size() == 0) return;
  std::vector<int64_t> v(targets.size());
  kernels::copy_strided(targets, v.data(), int64, kernels::row_major_strides(targets.shape()));
  for (int64_t x : v) {
    if (x < 0 || x >= num_classes) throw std::out_of_range(out_of_range_msg(op, x, num_classes, logits_shape, axis));
  }
}

array softmax_cross_entropy(const array& logits_cast, const array& targets, int axis, double label_smoothing,
                            StreamOrDevice s) {
  OnStream on(s);
  const array logits = loom::detail::autocast_float32(logits_cast);  // in Autocast's float32 list
  const char* op = "softmax_cross_entropy";
  if (logits.ndim() == 0) {
    throw std::invalid_argument(msg("[", op, "] logits must have at least one axis (the classes); got a 0-d array"));
  }
  const int ax = loom::detail::normalize_axis(axis, static_cast<int>(logits.ndim()), op);
  if (!is_integral(targets.dtype())) {
    throw std::invalid_argument(msg("[", op, "] class-index targets must have an integer dtype; got ", targets.dtype(),
                                    " targets of shape ", shape_str(targets.shape())));
  }
  const Shape loss_shape = drop_axis(logits.shape(), ax);
  if (targets.shape() != loss_shape) {
    throw std::invalid_argument(msg("[", op, "] targets of shape ", shape_str(targets.shape()),
                                    " do not match logits of shape ", shape_str(logits.shape()),
                                    " without the class axis ", ax, ": expected ", shape_str(loss_shape)));
  }
  if (!(label_smoothing >= 0.0 && label_smoothing < 1.0)) {
    throw std::invalid_argument(msg("[", op, "] label_smoothing must be in [0, 1); got ", label_smoothing));
  }
  const int n = logits.shape()[ax];
  if (n == 0 && targets.size() > 0) {
    throw std::invalid_argument(msg("[", op, "] logits of shape ", shape_str(logits.shape()), " have no classes along axis ", ax));
  }
  check_class_indices(targets, n, logits.shape(), ax, op);
  detail::reject_complex(logits.dtype(), op);
  array x = is_floating_point(logits.dtype()) ? logits : astype(logits, float32);
  return array(loss_shape, x.dtype(), std::make_shared<SoftmaxCrossEntropy>(ax, label_smoothing), {x, targets});
}

}  // namespace loom::fast
