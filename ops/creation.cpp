#include <cmath>
#include <vector>

#include "loom/core/serialize.h"
#include "loom/core/primitive.h"
#include "loom/ops/batching.h"
#include "loom/kernels/elementwise.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

namespace {

// Fills the output with one (0-d) input value.
class Full : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(shape_, dtype_); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (shape_ == p->shape_ && dtype_ == p->dtype_);
  }
  bool supports_complex() const override { return true; }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    out.alloc();
    // The value converted to out's dtype (by the copies' casts), then its bytes repeated.
    alignas(16) unsigned char v[16] = {};
    kernels::copy_strided(in[0], v, out.dtype(), Strides(in[0].ndim(), 0));
    kernels::fill(out.raw_data(), out.size(), out.itemsize(), v);
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {astype(sum(cot[0]), p[0].dtype())};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    return {full(shape_, t[0], dtype_)};
  }
  Full(Shape s, Dtype d) : shape_(std::move(s)), dtype_(d) {}
  // The value, one per batch entry, broadcast over the fill shape.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    const array v = detail::batch_first(in[0], axes[0]);
    Shape ones(shape_.size() + 1, 1), shape = shape_;
    ones[0] = v.shape()[0];
    shape.insert(shape.begin(), v.shape()[0]);
    return {{broadcast_to(astype(reshape(v, ones), dtype_), shape)}, {0}};
  }
  const char* name() const override { return "Full"; }

 private:
  Shape shape_;
  Dtype dtype_;
};
const bool kFullLoads = detail::register_primitive("Full", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  Shape s;
  Dtype d = float32;
  r.get(s, d);
  return std::make_shared<Full>(std::move(s), d);
});

class Arange : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(start_, step_); }
  Arange(double start, double step) : start_(start), step_(step) {}
  void eval_cpu(const std::vector<array>&, array& out) override {
    out.alloc();
    LOOM_DISPATCH_REAL(out.dtype(), T, {
      T* y = kernels::ptr<T>(out);
      if constexpr (std::is_integral_v<T>) {
        // numpy's and MLX's integer arange: the first two values in T, then their difference, so
        // arange(0, 5, 1.5, int32) is 0 1 2 3 (the step truncates to 1) and a step of 0.5 gives zeros.
        const T first = cast_value<T>(start_);
        const T delta = kernels::wrapping_sub(cast_value<T>(start_ + step_), first);
        kernels::parallel_for(out.size(), [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i) y[i] = kernels::wrapping_add(first, kernels::wrapping_mul(static_cast<T>(i), delta));
        });
      } else {
        kernels::parallel_for(out.size(), [&](size_t b, size_t e) {
          for (size_t i = b; i < e; ++i) y[i] = cast_value<T>(start_ + static_cast<double>(i) * step_);
        });
      }
    });
  }
  const char* name() const override { return "Arange"; }
  bool is_differentiable() const override { return false; }

 private:
  double start_, step_;
};
const bool kArangeLoads = detail::register_primitive("Arange", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  double start, step;
  r.get(start, step);
  return std::make_shared<Arange>(start, step);
});

// x as Out: one functor type for AsType's whole-array kernel and its fused blocks, so that both
// call the same span loop.
template <typename In, typename Out>
struct CastTo {
  Out operator()(compute_t<In> x) const { return cast_value<Out>(x); }
};

// Elementwise, so that a cast fuses with its neighbours: the autocast policy's upcast of a bfloat16
// branch into a float32 residual add, or of a bfloat16 cotangent into a float32 gradient, runs in
// the add's loop instead of writing and reading a float32 copy.
class AsType : public UnaryPrimitive {
 public:
  bool is_elementwise() const override { return true; }
  // An input's buffer serves only an output of its item size.
  uint64_t donors(const std::vector<array>& in, int) const override {
    return in[0].itemsize() == size_of(dtype_) ? 1 : 0;
  }
  void eval_block(const Dtype* in_dtypes, const void* const* in, void* out, size_t n) const override {
    LOOM_DISPATCH_ALL(in_dtypes[0], In, {
      LOOM_DISPATCH_ALL(dtype_, Out, { kernels::unary_block<In, Out>(in[0], out, n, CastTo<In, Out>{}); });
    });
  }
  void save(detail::Writer& w) const override { w.put(dtype_); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return same_shape_output(in); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (dtype_ == p->dtype_);
  }
  bool supports_complex() const override { return true; }
  explicit AsType(Dtype d) : dtype_(d) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    LOOM_DISPATCH_ALL(in[0].dtype(), In, {
      LOOM_DISPATCH_ALL(dtype_, Out, {
        kernels::unary<In, Out>(in[0], out, CastTo<In, Out>{});
      });
    });
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {astype(cot[0], p[0].dtype())};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    return {astype(t[0], dtype_)};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return detail::vmap_elementwise(in, axes, outs);
  }
  const char* name() const override { return "AsType"; }

 private:
  Dtype dtype_;
};
const bool kAsTypeLoads = detail::register_primitive("AsType", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<AsType>(r.get<Dtype>());
});

// Shares the input's buffer: the result is a new array with the same values.
class Copy : public UnaryPrimitive {
 public:
  void save(detail::Writer&) const override {}
  bool is_noop() const override { return true; }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return same_shape_output(in); }
  bool is_equivalent(const Primitive& other) const override { return detail::same_primitive(this, other); }
  bool supports_complex() const override { return true; }
  void eval_cpu(const std::vector<array>& in, array& out) override { out.copy_shared_buffer(in[0]); }
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {cot[0]};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    return {t[0]};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return detail::vmap_elementwise(in, axes, outs);
  }
  const char* name() const override { return "Copy"; }
  bool forwards_buffer() const override { return true; }
};
const bool kCopyLoads = detail::register_primitive("Copy", [](detail::Reader&) -> std::shared_ptr<Primitive> {
  return std::make_shared<Copy>();
});

class StopGradient : public UnaryPrimitive {
 public:
  void save(detail::Writer&) const override {}
  bool is_noop() const override { return true; }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return same_shape_output(in); }
  bool is_equivalent(const Primitive& other) const override { return detail::same_primitive(this, other); }
  bool supports_complex() const override { return true; }
  void eval_cpu(const std::vector<array>& in, array& out) override { out.copy_shared_buffer(in[0]); }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>&, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {zeros_like(p[0])};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>&, const std::vector<int>&) override {
    return {zeros_like(p[0])};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return detail::vmap_elementwise(in, axes, outs);
  }
  const char* name() const override { return "StopGradient"; }
  bool is_differentiable() const override { return false; }
  bool forwards_buffer() const override { return true; }
};
const bool kStopGradientLoads = detail::register_primitive("StopGradient", [](detail::Reader&) -> std::shared_ptr<Primitive> {
  return std::make_shared<StopGradient>();
});

void check_shape(const Shape& shape, const char* op) {
  for (int s : shape) {
    if (s < 0) throw std::invalid_argument(detail::msg("[", op, "] negative dimension in shape ", detail::shape_str(shape)));
  }
}

}  // namespace

array full(const Shape& shape, const array& value, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  check_shape(shape, "full");
  if (value.size() != 1) {
    array v = astype(value, dtype);
    bool ok = true;
    try {
      ok = broadcast_shapes(v.shape(), shape) == shape;
    } catch (const std::invalid_argument&) {
      ok = false;
    }
    if (!ok) {
      throw std::invalid_argument(detail::msg("[full] value of shape ", detail::shape_str(value.shape()),
                                              " does not broadcast to ", detail::shape_str(shape)));
    }
    return copy(broadcast_to(v, shape));
  }
  array v = value.ndim() == 0 ? value : reshape(value, {});
  return array(shape, dtype, std::make_shared<Full>(shape, dtype), {v});
}
array full(const Shape& shape, const array& value, StreamOrDevice s) {
  OnStream on(s);
  return full(shape, value, value.dtype());
}
array zeros(const Shape& shape, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  return full(shape, array(0, dtype), dtype);
}
array ones(const Shape& shape, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  return full(shape, array(1, dtype), dtype);
}
namespace {
// An array of a's shape filled with `value`. In a shapeless trace (autograd/compile.h) it follows
// a's shape from call to call, as a broadcast that takes `a` as a shape-only input: a vjp's zeros (a
// maximum's unchosen side, say) then fit any batch.
array filled_like(const array& a, int value, Dtype dtype) {
  if (detail::shapeless_tracing() && a.size() > 0) return detail::broadcast_to_like(array(value, dtype), a.shape(), {a});
  return full(a.shape(), array(value, dtype), dtype);
}
}  // namespace
array zeros_like(const array& a, StreamOrDevice s) { OnStream on(s); return filled_like(a, 0, a.dtype()); }
array ones_like(const array& a, StreamOrDevice s) { OnStream on(s); return filled_like(a, 1, a.dtype()); }
array zeros_like(const array& a, Dtype dtype, StreamOrDevice s) { OnStream on(s); return filled_like(a, 0, dtype); }
array ones_like(const array& a, Dtype dtype, StreamOrDevice s) { OnStream on(s); return filled_like(a, 1, dtype); }

array arange(double start, double stop, double step, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  if (step == 0 || std::isnan(start) || std::isnan(stop) || std::isnan(step)) {
    throw std::invalid_argument(detail::msg("[arange] needs a finite, non-zero step; got start ", start, ", stop ",
                                            stop, ", step ", step));
  }
  if (dtype == bool_) throw std::invalid_argument("[arange] cannot produce bool arrays");
  double n = std::ceil((stop - start) / step);
  if (n > 2147483647.0) throw std::invalid_argument(detail::msg("[arange] ", n, " elements is too many"));
  int count = n > 0 ? static_cast<int>(n) : 0;
  return array({count}, dtype, std::make_shared<Arange>(start, step), {});
}
array arange(double stop, Dtype dtype, StreamOrDevice s) { OnStream on(s); return arange(0.0, stop, 1.0, dtype); }
array arange(int start, int stop, int step, StreamOrDevice s) {
  OnStream on(s);
  return arange(double(start), double(stop), double(step), int32);
}
array arange(int stop, StreamOrDevice s) { OnStream on(s); return arange(0, stop, 1); }

array linspace(double start, double stop, int num, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  if (num < 0) throw std::invalid_argument(detail::msg("[linspace] num must be >= 0, got ", num));
  if (num == 1) return full({1}, array(start, float64), dtype);
  double step = num > 1 ? (stop - start) / (num - 1) : 0.0;
  array t = arange(0.0, double(num), 1.0, float64);
  array v = add(multiply(t, array(step, float64)), array(start, float64));
  // The last value is exactly `stop`.
  if (num > 1) v = slice_update(v, array({stop}, float64), {num - 1}, {num});
  return astype(v, dtype);
}

array eye(int n, int m, int k, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  if (n < 0 || m < 0) throw std::invalid_argument(detail::msg("[eye] n and m must be >= 0, got ", n, ", ", m));
  array rows = reshape(arange(0, n), {n, 1});
  array cols = reshape(arange(0, m), {1, m});
  return astype(equal(add(rows, array(k)), cols), dtype);
}
array identity(int n, Dtype dtype, StreamOrDevice s) { OnStream on(s); return eye(n, n, 0, dtype); }

std::shared_ptr<Primitive> detail::astype_primitive(Dtype d) { return std::make_shared<AsType>(d); }

array astype(const array& a, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  if (a.dtype() == dtype) return a;
  return array(a.shape(), dtype, std::make_shared<AsType>(dtype), {a});
}
array copy(const array& a, StreamOrDevice s) {
  OnStream on(s);
  return array(a.shape(), a.dtype(), std::make_shared<Copy>(), {a});
}
array stop_gradient(const array& a, StreamOrDevice s) {
  OnStream on(s);
  return array(a.shape(), a.dtype(), std::make_shared<StopGradient>(), {a});
}

// ---- window functions (numpy's definitions, computed in double and rounded once to float32) ----
namespace {
template <typename F>
array window(int M, F f) {
  if (M < 1) return zeros({0}, float32);
  if (M == 1) return ones({1}, float32);
  std::vector<float> w(static_cast<size_t>(M));
  for (int n = 0; n < M; ++n) w[static_cast<size_t>(n)] = static_cast<float>(f(double(n), double(M - 1)));
  return array(w, Shape{M}, float32);
}
constexpr double kPi = 3.14159265358979323846;
}  // namespace

array hanning(int M, StreamOrDevice s) {
  OnStream on(s);
  return window(M, [](double n, double m) { return 0.5 - 0.5 * std::cos(2.0 * kPi * n / m); });
}
array hamming(int M, StreamOrDevice s) {
  OnStream on(s);
  return window(M, [](double n, double m) { return 0.54 - 0.46 * std::cos(2.0 * kPi * n / m); });
}
array blackman(int M, StreamOrDevice s) {
  OnStream on(s);
  return window(M, [](double n, double m) {
    return 0.42 - 0.5 * std::cos(2.0 * kPi * n / m) + 0.08 * std::cos(4.0 * kPi * n / m);
  });
}
array bartlett(int M, StreamOrDevice s) {
  OnStream on(s);
  // numpy: with k = 2n - (M - 1), 1 + k/(M - 1) for k <= 0 and 1 - k/(M - 1) after.
  return window(M, [](double n, double m) {
    const double k = 2.0 * n - m;
    return k <= 0 ? 1.0 + k / m : 1.0 - k / m;
  });
}

}  // namespace loom
