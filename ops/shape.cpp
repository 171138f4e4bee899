#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <string>

#include "loom/core/serialize.h"
#include "loom/core/primitive.h"
#include "loom/ops/batching.h"
#include "loom/ops/graph.h"
#include "loom/ops/indexing.h"
#include "loom/kernels/elementwise.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;

namespace {

// Sets `out` to view `in` with new strides and an element offset.
void make_view(const array& in, array& out, const Strides& strides, int64_t offset) {
  size_t data_size;
  auto flags = array::layout_flags(out.shape(), strides, &data_size);
  out.copy_shared_buffer(in, strides, flags, data_size, offset);
}

// Strides that show `x`'s elements, in row-major order, in `shape`, when some exist: each run of
// input axes merged or split into output axes must be contiguous among itself (a transposed pair
// cannot be merged; a row-strided matrix can still have its rows split). As numpy's no-copy reshape.
bool view_strides(const array& x, const Shape& shape, Strides& out) {
  Shape od;
  Strides os;
  for (size_t i = 0; i < x.ndim(); ++i) {
    if (x.shape()[i] != 1) {
      od.push_back(x.shape()[i]);
      os.push_back(x.strides()[i]);
    }
  }
  const size_t on = od.size(), nn = shape.size();
  out.assign(nn, 0);
  if (x.size() == 0) return false;
  size_t oi = 0, ni = 0;
  while (oi < on && ni < nn) {
    if (shape[ni] == 1) {
      ++ni;
      continue;
    }
    // The smallest runs od[oi, oj) and shape[ni, nj) with equal products.
    size_t oj = oi + 1, nj = ni + 1;
    int64_t op = od[oi], np = shape[ni];
    while (op != np) {
      if (np < op) {
        np *= shape[nj++];
      } else {
        op *= od[oj++];
      }
    }
    for (size_t k = oi; k + 1 < oj; ++k) {
      if (os[k] != os[k + 1] * od[k + 1]) return false;
    }
    out[nj - 1] = os[oj - 1];
    for (size_t k = nj - 1; k > ni; --k) out[k - 1] = out[k] * shape[k];
    oi = oj;
    ni = nj;
  }
  return true;  // trailing output axes are all 1 (their stride is never used)
}

// A slice bound of the unbatched array as one of the array with its batch first.
Shape with_batch(Shape bound, int batch_value) {
  bound.insert(bound.begin(), batch_value);
  return bound;
}

class Reshape : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(shape_, in_shape_); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (shape_ == p->shape_);
  }
  bool supports_complex() const override { return true; }
  // `in_shape`: the input's shape when built (a shapeless trace), for output_shapes.
  explicit Reshape(Shape s, Shape in_shape = {}) : shape_(std::move(s)), in_shape_(std::move(in_shape)) {}
  // In a shapeless trace the reshape kept the shape as asked (a -1 included) and its input's shape.
  // Matching the traced input's axes to the traced output's in groups of equal size (an axis kept,
  // axes merged, an axis of 1 inserted or removed) tells what each output axis is made of: other
  // input shapes then give theirs (x (2,28,28) -> (2,784) takes (700,28,28) to (700,784)). Groups
  // that split an axis keep their traced sizes, and their input axes must keep theirs.
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    const Shape& x = in.at(0);
    size_t n = 1;
    for (int d : x) n *= static_cast<size_t>(d);
    auto fail = [&]() -> std::vector<Shape> {
      throw std::invalid_argument(msg("[compile] Reshape to ", shape_str(shape_), " cannot take an input of shape ",
                                      shape_str(x)));
    };
    if (!in_shape_.empty() && x.size() == in_shape_.size()) {
      size_t traced = 1;
      for (int d : in_shape_) traced *= static_cast<size_t>(d);
      const Shape out = infer(shape_, traced);
      Shape got;
      bool ok = traced != 0 && !out.empty() == !shape_.empty();
      size_t i = 0, j = 0;
      while (ok && (i < in_shape_.size() || j < out.size())) {
        if (i < in_shape_.size() && j < out.size() && in_shape_[i] == out[j]) {
          got.push_back(x[i++]);
          ++j;
        } else if (j < out.size() && out[j] == 1) {
          got.push_back(1);
          ++j;
        } else if (i < in_shape_.size() && in_shape_[i] == 1) {
          ok = x[i++] == 1;
        } else if (i < in_shape_.size() && j < out.size()) {
          const size_t i0 = i, j0 = j;
          int64_t pi = in_shape_[i++], pj = out[j++];
          while (ok && pi != pj) {
            if (pi < pj && i < in_shape_.size()) pi *= in_shape_[i++];
            else if (pj < pi && j < out.size()) pj *= out[j++];
            else ok = false;
          }
          if (!ok) break;
          if (j - j0 == 1) {  // merged: the new axes' product
            int64_t p = 1;
            for (size_t k = i0; k < i; ++k) p *= x[k];
            got.push_back(static_cast<int>(p));
          } else {  // split: only as traced
            for (size_t k = i0; k < i; ++k) ok = ok && x[k] == in_shape_[k];
            for (size_t k = j0; k < j; ++k) got.push_back(out[k]);
          }
        } else {
          ok = false;
        }
      }
      if (ok) return {got};
    }
    const Shape s = infer(shape_, n);
    if (s.empty() != shape_.empty()) return fail();
    size_t m = 1;
    for (int d : s) m *= static_cast<size_t>(d);
    if (m != n) return fail();
    return {s};
  }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& x = in[0];
    if (x.flags().row_contiguous) {
      make_view(x, out, out.strides(), 0);
      return;
    }
    Strides st;
    if (view_strides(x, out.shape(), st)) {
      make_view(x, out, st, 0);
      return;
    }
    out.alloc();  // row-major in the input's shape is the same memory as row-major in ours
    kernels::copy_strided(x, out.raw_data(), out.dtype(), kernels::row_major_strides(x.shape()));
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {reshape(cot[0], p[0].shape())};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    return {reshape(t[0], shape_)};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    const array x = detail::batch_first(in[0], axes[0]);
    Shape shape = shape_;
    shape.insert(shape.begin(), x.shape()[0]);
    return {{reshape(x, shape)}, {0}};
  }
  const char* name() const override { return "Reshape"; }
  bool forwards_buffer() const override { return true; }

 private:
  // `shape` with its -1 (if any) resolved for `n` elements; empty when it cannot be.
  static Shape infer(Shape shape, size_t n) {
    int at = -1;
    size_t known = 1;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == -1) at = static_cast<int>(i);
      else known *= static_cast<size_t>(shape[i]);
    }
    if (at < 0) return shape;
    if (known == 0 || n % known != 0) return {};
    shape[at] = static_cast<int>(n / known);
    return shape;
  }
  Shape shape_, in_shape_;
};
const bool kReshapeLoads = detail::register_primitive("Reshape", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  Shape s, in;
  r.get(s, in);
  return std::make_shared<Reshape>(std::move(s), std::move(in));
});

class Broadcast : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(shape_); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (shape_ == p->shape_);
  }
  bool supports_complex() const override { return true; }
  explicit Broadcast(Shape s) : shape_(std::move(s)) {}
  // Inputs past the first (a shapeless trace's other operands, detail::broadcast_to_like) give only
  // their shapes: the output is all inputs' broadcast shape.
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    Shape s = in.size() == 1 ? shape_ : Shape{};
    for (const Shape& x : in) s = broadcast_shapes(s, x);
    if (in.size() == 1 && s != shape_) {
      throw std::invalid_argument(msg("[compile] Broadcast to ", shape_str(shape_), " cannot take an input of shape ",
                                      shape_str(in[0])));
    }
    return {s};
  }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& x = in[0];
    int diff = static_cast<int>(out.ndim() - x.ndim());
    Strides st(out.ndim(), 0);
    for (size_t i = 0; i < x.ndim(); ++i) {
      st[i + diff] = x.shape()[i] == 1 ? 0 : x.strides()[i];  // every size-1 input axis: stride 0, as MLX
    }
    make_view(x, out, st, 0);
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    const Shape& in = p[0].shape();
    int diff = static_cast<int>(shape_.size() - in.size());
    std::vector<int> axes;
    for (int i = 0; i < static_cast<int>(shape_.size()); ++i) {
      if (i < diff || (in[i - diff] == 1 && shape_[i] != 1)) axes.push_back(i);
    }
    array g = axes.empty() ? cot[0] : sum(cot[0], axes, true);
    std::vector<array> out;
    for (int a : argnums) out.push_back(a == 0 ? reshape(g, in) : zeros_like(p[a]));  // the others: shapes only
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>& argnums) override {
    for (size_t i = 0; i < argnums.size(); ++i) {
      if (argnums[i] == 0) return {broadcast_to(t[i], shape_)};
    }
    return {zeros(shape_, p[0].dtype())};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    if (axes[0] < 0) return {{broadcast_to(in[0], shape_)}, {-1}};  // batched shape-only inputs change nothing
    const array x = detail::batch_first(in[0], axes[0]);
    Shape aligned = x.shape(), shape = shape_;  // the batch first, then the broadcast's leading ones
    aligned.insert(aligned.begin() + 1, shape_.size() + 1 - x.ndim(), 1);
    shape.insert(shape.begin(), x.shape()[0]);
    return {{broadcast_to(reshape(x, aligned), shape)}, {0}};
  }
  const char* name() const override { return "Broadcast"; }
  bool makes_view() const override { return true; }

 private:
  Shape shape_;
};
const bool kBroadcastLoads = detail::register_primitive("Broadcast", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<Broadcast>(r.get<Shape>());
});

class Transpose : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(axes_); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    Shape s;
    for (int ax : axes_) s.push_back(in.at(0).at(ax));
    return {s};
  }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (axes_ == p->axes_);
  }
  bool supports_complex() const override { return true; }
  explicit Transpose(std::vector<int> axes) : axes_(std::move(axes)) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    Strides st(axes_.size());
    for (size_t i = 0; i < axes_.size(); ++i) st[i] = in[0].strides()[axes_[i]];
    make_view(in[0], out, st, 0);
  }
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    std::vector<int> inv(axes_.size());
    for (size_t i = 0; i < axes_.size(); ++i) inv[axes_[i]] = static_cast<int>(i);
    // (a b)^T = b^T a^T: the gradient of W in x @ W.T arrives as a matmul to be transposed; computing
    // the transposed product directly gives a row-contiguous gradient (OpenBLAS takes the
    // transposed operands as they are) instead of a view the optimizer would have to copy.
    const array& c = cot[0];
    if (axes_ == std::vector<int>{1, 0} && !c.is_evaluated() && c.has_primitive() &&
        std::string(c.primitive().name()) == "Matmul" && c.inputs()[0].ndim() == 2 && c.inputs()[1].ndim() == 2) {
      return {matmul(transpose(c.inputs()[1]), transpose(c.inputs()[0]))};
    }
    return {transpose(c, inv)};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    return {transpose(t[0], axes_)};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    std::vector<int> perm{0};
    for (int a : axes_) perm.push_back(a + 1);
    return {{transpose(detail::batch_first(in[0], axes[0]), perm)}, {0}};
  }
  const char* name() const override { return "Transpose"; }
  bool makes_view() const override { return true; }

 private:
  std::vector<int> axes_;
};
const bool kTransposeLoads = detail::register_primitive("Transpose", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<Transpose>(r.get<std::vector<int>>());
});

class Slice : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(start_, stop_, strides_); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (start_ == p->start_ && stop_ == p->stop_ && strides_ == p->strides_);
  }
  bool supports_complex() const override { return true; }
  Slice(Shape start, Shape stop, Shape strides)
      : start_(std::move(start)), stop_(std::move(stop)), strides_(std::move(strides)) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& x = in[0];
    Strides st(x.ndim());
    int64_t offset = 0;
    for (size_t i = 0; i < x.ndim(); ++i) {
      st[i] = x.strides()[i] * strides_[i];
      if (out.shape()[i] > 0) offset += int64_t(start_[i]) * x.strides()[i];
    }
    if (out.size() == 0) offset = 0;
    make_view(x, out, st, offset);
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {slice_update(zeros_like(p[0]), cot[0], start_, stop_, strides_)};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    return {slice(t[0], start_, stop_, strides_)};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    const array x = detail::batch_first(in[0], axes[0]);
    return {{slice(x, with_batch(start_, 0), with_batch(stop_, x.shape()[0]), with_batch(strides_, 1))}, {0}};
  }
  const char* name() const override { return "Slice"; }
  bool makes_view() const override { return true; }

 private:
  Shape start_, stop_, strides_;
};
const bool kSliceLoads = detail::register_primitive("Slice", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  Shape a, b, c;
  r.get(a, b, c);
  return std::make_shared<Slice>(std::move(a), std::move(b), std::move(c));
});

// slice_update and its combining forms (MLX's SliceUpdate::ReduceType).
enum class SliceMode { none, add, prod, max, min };

template <typename T, SliceMode M>
inline T slice_combine(T y, T x) {
  using C = compute_t<T>;
  const C a = static_cast<C>(y), b = static_cast<C>(x);
  if constexpr (M == SliceMode::add) {
    return static_cast<T>(kernels::wrapping_add(a, b));
  } else if constexpr (M == SliceMode::prod) {
    return static_cast<T>(kernels::wrapping_mul(a, b));
  } else {
    bool keep = M == SliceMode::max ? a > b : a < b;
    if constexpr (std::is_floating_point_v<C>) keep = keep || a != a;  // NaN in, NaN out (as maximum)
    return keep ? y : x;
  }
}

// out's window (strides `st` from element `offset`) gets op(window, upd), elementwise.
template <typename T, SliceMode M>
void slice_combine_kernel(array& out, const array& upd, const Strides& st, int64_t offset) {
  Shape shape = upd.shape();
  std::array<Strides, 2> strides{st, upd.strides()};
  if (shape.empty()) {
    shape = Shape{1};
    strides = {Strides{0}, Strides{0}};
  }
  T* o = kernels::ptr<T>(out) + offset;
  const T* u = kernels::ptr<T>(upd);
  kernels::for_each_row<2>(shape, strides, [&](const std::array<int64_t, 2>& off, int n, const std::array<int64_t, 2>& s) {
    T* op = o + off[0];
    const T* up = u + off[1];
    for (int i = 0; i < n; ++i) op[i * s[0]] = slice_combine<T, M>(op[i * s[0]], up[i * s[1]]);
  });
}


class SliceUpdate : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(start_, stop_, strides_, mode_); }
  SliceUpdate(Shape start, Shape stop, Shape strides, SliceMode mode = SliceMode::none)
      : start_(std::move(start)), stop_(std::move(stop)), strides_(std::move(strides)), mode_(mode) {}
  bool supports_complex() const override { return mode_ == SliceMode::none || mode_ == SliceMode::add; }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& src = in[0];
    const array& upd = in[1];
    out.alloc();  // src's own buffer when nothing else reads it: the update is then written in place
    kernels::copy_into(src, out);
    Strides st(out.ndim());
    int64_t offset = 0;
    for (size_t i = 0; i < out.ndim(); ++i) {
      st[i] = out.strides()[i] * strides_[i];
      offset += int64_t(start_[i]) * out.strides()[i];
    }
    if (upd.size() == 0) return;
    switch (mode_) {
      case SliceMode::none: {
        char* base = static_cast<char*>(out.raw_data()) + offset * int64_t(out.itemsize());
        kernels::copy_strided(upd, base, out.dtype(), st);
        break;
      }
      case SliceMode::add: LOOM_DISPATCH_ALL(out.dtype(), T, slice_combine_kernel<T, SliceMode::add>(out, upd, st, offset)); break;
      case SliceMode::prod: LOOM_DISPATCH_REAL(out.dtype(), T, slice_combine_kernel<T, SliceMode::prod>(out, upd, st, offset)); break;
      case SliceMode::max: LOOM_DISPATCH_REAL(out.dtype(), T, slice_combine_kernel<T, SliceMode::max>(out, upd, st, offset)); break;
      case SliceMode::min: LOOM_DISPATCH_REAL(out.dtype(), T, slice_combine_kernel<T, SliceMode::min>(out, upd, st, offset)); break;
    }
  }
  // As MLX's SliceUpdate::vjp.
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>& outputs) override {
    const array& c = cot[0];
    std::vector<array> out;
    for (int arg : argnums) {
      if (arg == 0) {
        switch (mode_) {
          case SliceMode::none: out.push_back(slice_update(c, zeros_like(p[1]), start_, stop_, strides_)); break;
          case SliceMode::add: out.push_back(c); break;
          case SliceMode::prod: out.push_back(mode_node(c, p[1], SliceMode::prod)); break;
          default: out.push_back(where(equal(outputs[0], p[0]), c, zeros_like(c))); break;
        }
      } else {
        array g = slice(c, start_, stop_, strides_);
        if (mode_ == SliceMode::prod) {
          g = multiply(g, slice(p[0], start_, stop_, strides_));
        } else if (mode_ == SliceMode::max || mode_ == SliceMode::min) {
          g = where(equal(slice(outputs[0], start_, stop_, strides_), p[1]), g, zeros_like(g));
        }
        out.push_back(g);
      }
    }
    return out;
  }
  // MLX has jvps for none and add only; those of prod, max and min here are their vjps' transposes.
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    auto tt = tangents_or_zeros(p, t, argnums);
    switch (mode_) {
      case SliceMode::none: return {slice_update(tt[0], tt[1], start_, stop_, strides_)};
      case SliceMode::add: return {mode_node(tt[0], tt[1], SliceMode::add)};
      case SliceMode::prod:
        return {mode_node(mode_node(tt[0], p[1], SliceMode::prod), multiply(slice(p[0], start_, stop_, strides_), tt[1]),
                          SliceMode::add)};
      default: {
        array res = mode_node(p[0], p[1], mode_);
        array from_src = where(equal(res, p[0]), tt[0], zeros_like(tt[0]));
        array hit = equal(slice(res, start_, stop_, strides_), p[1]);
        return {mode_node(from_src, where(hit, tt[1], zeros_like(tt[1])), SliceMode::add)};
      }
    }
  }
  // The updates are written over a copy of the input: its own buffer when nothing else reads it.
  uint64_t donors(const std::vector<array>& in, int) const override {
    return listed_once(in, 0) ? row_contiguous_donors(in, {0}) : 0;
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    std::vector<array> x = detail::all_batch_first(in, axes);
    const int n = x[0].shape()[0];
    auto prim = std::make_shared<SliceUpdate>(with_batch(start_, 0), with_batch(stop_, n), with_batch(strides_, 1), mode_);
    return {{array(x[0].shape(), x[0].dtype(), std::move(prim), {x[0], x[1]})}, {0}};
  }
  const char* name() const override {
    switch (mode_) {
      case SliceMode::none: return "SliceUpdate";
      case SliceMode::add: return "SliceUpdateAdd";
      case SliceMode::prod: return "SliceUpdateProd";
      case SliceMode::max: return "SliceUpdateMax";
      default: return "SliceUpdateMin";
    }
  }

 private:
  // The same slice with another mode (start, stop and strides are normalized already: a fixed point).
  array mode_node(const array& a, const array& u, SliceMode m) const {
    return array(a.shape(), a.dtype(), std::make_shared<SliceUpdate>(start_, stop_, strides_, m), {a, u});
  }
  Shape start_, stop_, strides_;
  SliceMode mode_;
};
const detail::PrimitiveLoader kSliceUpdateLoad = [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  Shape a, b, c;
  SliceMode m;
  r.get(a, b, c, m);
  return std::make_shared<SliceUpdate>(std::move(a), std::move(b), std::move(c), m);
};
// Registered under each name the class goes by.
const bool kSliceUpdateLoads = detail::register_primitive("SliceUpdate", kSliceUpdateLoad) &&
                               detail::register_primitive("SliceUpdateAdd", kSliceUpdateLoad) &&
                               detail::register_primitive("SliceUpdateProd", kSliceUpdateLoad) &&
                               detail::register_primitive("SliceUpdateMax", kSliceUpdateLoad) &&
                               detail::register_primitive("SliceUpdateMin", kSliceUpdateLoad);

class Concatenate : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(axis_); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    Shape s = in.at(0);
    s.at(axis_) = 0;
    for (const Shape& x : in) {
      Shape a = x, b = s;
      a.at(axis_) = b.at(axis_) = 0;
      if (a != b) throw std::invalid_argument(msg("[compile] Concatenate along axis ", axis_, " of shapes ", shape_str(in[0]), " and ", shape_str(x)));
      s.at(axis_) += x.at(axis_);
    }
    return {s};
  }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (axis_ == p->axis_);
  }
  bool supports_complex() const override { return true; }
  explicit Concatenate(int axis) : axis_(axis) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    if (adjacent_views(in, out)) {  // the parts already lie in one buffer as the result would
      out.copy_shared_buffer(in[0], out.strides(), array::layout_flags(out.shape(), out.strides()), out.size());
      return;
    }
    out.alloc();
    const bool parts_contiguous = contiguous_parts(out);
    int64_t offset = 0;
    for (const array& x : in) {
      char* base = static_cast<char*>(out.raw_data()) + offset * int64_t(out.itemsize());
      // A producer that eval placed in our buffer has already written its part.
      const bool in_place =
          parts_contiguous && x.raw_data() == base && x.dtype() == out.dtype() && x.flags().row_contiguous;
      if (!in_place) kernels::copy_strided(x, base, out.dtype(), out.strides());
      offset += int64_t(x.shape()[axis_]) * out.strides()[axis_];
    }
  }
  bool input_offsets(const std::vector<array>& in, const array& out, std::vector<int64_t>& offsets) const override {
    if (!contiguous_parts(out)) return false;
    consecutive_offsets(in, offsets);
    return true;
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<int> starts;
    int s = 0;
    for (auto& x : p) {
      starts.push_back(s);
      s += x.shape()[axis_];
    }
    std::vector<array> out;
    for (int arg : argnums) {
      Shape start(cot[0].ndim(), 0), stop = cot[0].shape();
      start[axis_] = starts[arg];
      stop[axis_] = starts[arg] + p[arg].shape()[axis_];
      out.push_back(slice(cot[0], start, stop));
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    return {concatenate(tangents_or_zeros(p, t, argnums), axis_)};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    return {{concatenate(detail::all_batch_first(in, axes), axis_ + 1)}, {0}};
  }
  const char* name() const override { return "Concatenate"; }

 private:
  // Whether the inputs are views of one buffer, each where the row-major result would hold it (as
  // attention's dq, dk and dv are in the qkv projection's gradient).
  bool adjacent_views(const std::vector<array>& in, const array& out) const {
    if (out.is_placed() || out.size() == 0 || !in[0].data_shared_ptr()) return false;
    const char* base = static_cast<const char*>(in[0].raw_data());
    const size_t isz = out.itemsize();
    int64_t offset = 0;
    for (const array& x : in) {
      if (x.dtype() != out.dtype() || !kernels::is_view_at(x, in[0], base + offset * int64_t(isz), out.strides())) {
        return false;
      }
      offset += int64_t(x.shape()[axis_]) * out.strides()[axis_];
    }
    return true;
  }

  // Each input is one run of the output when every axis before the concatenation axis has extent 1.
  bool contiguous_parts(const array& out) const {
    for (int d = 0; d < axis_; ++d) {
      if (out.shape(d) != 1) return false;
    }
    return true;
  }
  int axis_;
};
const bool kConcatenateLoads = detail::register_primitive("Concatenate", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<Concatenate>(r.get<int>());
});

// Every part of a split that tiles its axis, as views of the input: one node however many parts.
// With `shapes`, the input is 1-D and part k is shown in shapes[k] (split_flat).
class Split : public Primitive {
 public:
  void save(detail::Writer& w) const override { w.put(axis_, starts_, shapes_); }
  bool supports_complex() const override { return true; }
  Split(int axis, std::vector<int> starts, std::vector<Shape> shapes = {})
      : axis_(axis), starts_(std::move(starts)), shapes_(std::move(shapes)) {}
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    const array& x = in[0];
    const int64_t step = x.strides()[axis_];
    for (size_t k = 0; k < outs.size(); ++k) {
      const int64_t offset = outs[k].size() == 0 ? 0 : int64_t(starts_[k]) * step;
      if (shapes_.empty()) {
        make_view(x, outs[k], x.strides(), offset);
        continue;
      }
      Strides st = kernels::row_major_strides(outs[k].shape());
      for (auto& v : st) v *= step;
      make_view(x, outs[k], st, offset);
    }
  }
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    if (shapes_.empty()) return {concatenate(cot, axis_)};
    std::vector<array> flat;
    flat.reserve(cot.size());
    for (const array& c : cot) flat.push_back(reshape(c, {static_cast<int>(c.size())}));
    return {concatenate(flat, 0)};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    if (shapes_.empty()) return split(t[0], std::vector<int>(starts_.begin() + 1, starts_.end()), axis_);
    return split_flat(t[0], shapes_);
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    const array x = detail::batch_first(in[0], axes[0]);
    std::vector<array> parts = split(x, std::vector<int>(starts_.begin() + 1, starts_.end()), axis_ + 1);
    for (size_t k = 0; k < parts.size() && !shapes_.empty(); ++k) {  // split_flat: each part in its shape
      Shape shape = shapes_[k];
      shape.insert(shape.begin(), x.shape()[0]);
      parts[k] = reshape(parts[k], shape);
    }
    return {parts, std::vector<int>(parts.size(), 0)};
  }
  const char* name() const override { return "Split"; }
  bool makes_view() const override { return true; }

 private:
  int axis_;
  std::vector<int> starts_;  // where each part begins along axis_
  std::vector<Shape> shapes_;  // split_flat's part shapes; empty for split
};
const bool kSplitLoads = detail::register_primitive("Split", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  int axis;
  std::vector<int> starts;
  std::vector<Shape> shapes;
  r.get(axis, starts, shapes);
  return std::make_shared<Split>(axis, std::move(starts), std::move(shapes));
});

class Pad : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(axes_, low_, high_); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (axes_ == p->axes_ && low_ == p->low_ && high_ == p->high_);
  }
  bool supports_complex() const override { return true; }
  Pad(std::vector<int> axes, Shape low, Shape high) : axes_(std::move(axes)), low_(std::move(low)), high_(std::move(high)) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& x = in[0];
    out.alloc();
    kernels::fill(out.raw_data(), out.size(), out.itemsize(), in[1].raw_data());
    int64_t offset = 0;
    for (size_t i = 0; i < axes_.size(); ++i) offset += int64_t(low_[i]) * out.strides()[axes_[i]];
    char* base = static_cast<char*>(out.raw_data()) + offset * int64_t(out.itemsize());
    kernels::copy_strided(x, base, out.dtype(), out.strides());
  }
  // A shapeless call: the same widths around the call's sizes (in[1] is the one-element pad value).
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    Shape out = in.at(0);
    for (size_t i = 0; i < axes_.size(); ++i) out[axes_[i]] += low_[i] + high_[i];
    return {out};
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    array inner = interior(cot[0], p[0].shape());
    std::vector<array> out;
    for (int arg : argnums) {
      if (arg == 0) out.push_back(inner);
      else out.push_back(subtract(sum(cot[0]), sum(inner)));
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    auto tt = tangents_or_zeros(p, t, argnums);
    return {pad(tt[0], axes_, low_, high_, tt[1])};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    const array x = detail::batch_first_broadcast(in[0], axes[0], detail::vmap_size(in, axes));
    const std::vector<int> ax = detail::shift_axes(axes_, static_cast<int>(x.ndim()) - 1);
    if (axes[1] < 0) return {{pad(x, ax, low_, high_, in[1])}, {0}};
    // One pad value per batch entry: pad with anything, then put each entry's value outside the input.
    array inside = pad(ones(x.shape(), bool_), ax, low_, high_, array(false));
    Shape ones_shape(x.ndim(), 1);
    ones_shape[0] = x.shape()[0];
    return {{where(inside, pad(x, ax, low_, high_, array(0, x.dtype())), reshape(in[1], ones_shape))}, {0}};
  }
  const char* name() const override { return "Pad"; }

 private:
  array interior(const array& a, const Shape& in_shape) const {
    Shape start(a.ndim(), 0), stop = in_shape;
    for (size_t i = 0; i < axes_.size(); ++i) {
      start[axes_[i]] = low_[i];
      stop[axes_[i]] = low_[i] + in_shape[axes_[i]];
    }
    return slice(a, start, stop);
  }
  std::vector<int> axes_;
  Shape low_, high_;
};
const bool kPadLoads = detail::register_primitive("Pad", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  std::vector<int> axes;
  Shape lo, hi;
  r.get(axes, lo, hi);
  return std::make_shared<Pad>(std::move(axes), std::move(lo), std::move(hi));
});

// Normalizes numpy-style slice bounds in place; returns the output shape.
Shape normalize_slice(const Shape& shape, Shape& start, Shape& stop, const Shape& strides, const char* op) {
  if (start.size() != shape.size() || stop.size() != shape.size() || strides.size() != shape.size()) {
    throw std::invalid_argument(msg("[", op, "] start, stop and strides need one entry per dimension of ",
                                    shape_str(shape), "; got ", start.size(), ", ", stop.size(), ", ",
                                    strides.size()));
  }
  Shape out(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    int n = shape[i], st = strides[i];
    if (st == 0) throw std::invalid_argument(msg("[", op, "] slice step of axis ", i, " is zero"));
    auto fix = [&](int v) {
      if (v < 0) v += n;
      return st > 0 ? std::clamp(v, 0, n) : std::clamp(v, -1, n - 1);
    };
    start[i] = fix(start[i]);
    stop[i] = fix(stop[i]);
    const int64_t step = st;  // int64: -INT_MIN overflows int
    int64_t count = step > 0 ? (int64_t(stop[i]) - start[i] + step - 1) / step : (int64_t(start[i]) - stop[i] - step - 1) / -step;
    out[i] = static_cast<int>(std::max<int64_t>(count, 0));
    // Keep normalized bounds a fixed point: with a negative step, a stop of -1 (before the first
    // element) would be read as "the last element" when a vjp or jvp normalizes it again.
    if (st < 0 && stop[i] < 0) stop[i] = -n - 1;
    // An empty range is 0:0, which every step reads as empty again (a negative step's start of -1,
    // before the first element, would read as the last).
    if (out[i] == 0) start[i] = stop[i] = 0;
  }
  return out;
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      throw std::invalid_argument(msg("[broadcast_shapes] shapes ", shape_str(a), " and ", shape_str(b),
                                      " cannot be broadcast together"));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

array reshape(const array& a, Shape shape, StreamOrDevice stream) {
  OnStream on(stream);
  const Shape asked = shape;
  int infer = -1;
  size_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw std::invalid_argument(msg("[reshape] more than one -1 in shape ", shape_str(shape)));
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw std::invalid_argument(msg("[reshape] negative dimension in shape ", shape_str(shape)));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || a.size() % known != 0) {
      throw std::invalid_argument(msg("[reshape] cannot infer the -1 of ", shape_str(shape), " for an array of ",
                                      a.size(), " elements ", shape_str(a.shape())));
    }
    shape[infer] = static_cast<int>(a.size() / known);
    known *= shape[infer];
  }
  if (known != a.size()) {
    throw std::invalid_argument(msg("[reshape] cannot reshape an array of shape ", shape_str(a.shape()), " (",
                                    a.size(), " elements) to ", shape_str(shape)));
  }
  if (detail::shapeless_tracing()) {
    // Kept for a shapeless call on other shapes: the -1 as asked, and the traced input's shape.
    return array(std::move(shape), a.dtype(), std::make_shared<Reshape>(asked, a.shape()), {a});
  }
  if (shape == a.shape()) return a;
  Shape s = shape;
  return array(std::move(shape), a.dtype(), std::make_shared<Reshape>(std::move(s)), {a});
}

array flatten(const array& a, int start_axis, int end_axis, StreamOrDevice stream) {
  OnStream on(stream);
  const int nd = static_cast<int>(a.ndim());
  if (nd == 0) return reshape(a, {1});
  // MLX's rule: negative axes count from the end, then the range is clamped to the array's axes;
  // only a range that is empty after clamping, or lies wholly outside, is an error.
  const int s = std::max(0, start_axis + (start_axis < 0 ? nd : 0));
  const int e = std::min(nd - 1, end_axis + (end_axis < 0 ? nd : 0));
  if (s >= nd) throw std::invalid_argument(msg("[flatten] start_axis ", start_axis, " is out of range for ", nd, " dimensions"));
  if (e < 0) throw std::invalid_argument(msg("[flatten] end_axis ", end_axis, " is out of range for ", nd, " dimensions"));
  if (s > e) throw std::invalid_argument(msg("[flatten] start_axis ", start_axis, " is after end_axis ", end_axis));
  Shape shape(a.shape().begin(), a.shape().begin() + s);
  int m = 1;
  for (int i = s; i <= e; ++i) m *= a.shape()[i];
  shape.push_back(m);
  shape.insert(shape.end(), a.shape().begin() + e + 1, a.shape().end());
  return reshape(a, shape);
}
array flatten(const array& a, StreamOrDevice s) {
  OnStream on(s);
  return flatten(a, 0, -1);
}

array transpose(const array& a, std::vector<int> axes, StreamOrDevice s) {
  OnStream on(s);
  int nd = static_cast<int>(a.ndim());
  if (static_cast<int>(axes.size()) != nd) {
    throw std::invalid_argument(msg("[transpose] ", axes.size(), " axes given for an array of ", nd, " dimensions"));
  }
  std::vector<bool> seen(nd, false);
  for (auto& ax : axes) {
    ax = detail::normalize_axis(ax, nd, "transpose");
    if (seen[ax]) throw std::invalid_argument(msg("[transpose] axis ", ax, " is repeated"));
    seen[ax] = true;
  }
  bool identity = true;
  for (int i = 0; i < nd; ++i) identity &= axes[i] == i;
  if (identity) return a;
  Shape shape(nd);
  for (int i = 0; i < nd; ++i) shape[i] = a.shape()[axes[i]];
  return array(std::move(shape), a.dtype(), std::make_shared<Transpose>(std::move(axes)), {a});
}

array transpose(const array& a, StreamOrDevice s) {
  OnStream on(s);
  std::vector<int> axes(a.ndim());
  std::iota(axes.rbegin(), axes.rend(), 0);
  return transpose(a, axes);
}

array swapaxes(const array& a, int axis1, int axis2, StreamOrDevice s) {
  OnStream on(s);
  int nd = static_cast<int>(a.ndim());
  int a1 = detail::normalize_axis(axis1, nd, "swapaxes"), a2 = detail::normalize_axis(axis2, nd, "swapaxes");
  std::vector<int> axes(nd);
  std::iota(axes.begin(), axes.end(), 0);
  std::swap(axes[a1], axes[a2]);
  return transpose(a, axes);
}

array moveaxis(const array& a, int source, int destination, StreamOrDevice stream) {
  OnStream on(stream);
  int nd = static_cast<int>(a.ndim());
  int s = detail::normalize_axis(source, nd, "moveaxis"), d = detail::normalize_axis(destination, nd, "moveaxis");
  std::vector<int> axes;
  for (int i = 0; i < nd; ++i) {
    if (i != s) axes.push_back(i);
  }
  axes.insert(axes.begin() + d, s);
  return transpose(a, axes);
}

array squeeze(const array& a, const std::vector<int>& axes, StreamOrDevice s) {
  OnStream on(s);
  auto ax = detail::normalize_axes(axes, static_cast<int>(a.ndim()), "squeeze");
  Shape shape;
  size_t k = 0;
  for (int i = 0; i < static_cast<int>(a.ndim()); ++i) {
    if (k < ax.size() && ax[k] == i) {
      if (a.shape()[i] != 1) {
        throw std::invalid_argument(msg("[squeeze] axis ", i, " of shape ", shape_str(a.shape()), " has size ",
                                        a.shape()[i], ", not 1"));
      }
      ++k;
    } else {
      shape.push_back(a.shape()[i]);
    }
  }
  return reshape(a, shape);
}
array squeeze(const array& a, int axis, StreamOrDevice s) { OnStream on(s); return squeeze(a, std::vector<int>{axis}); }
array squeeze(const array& a, StreamOrDevice stream) {
  OnStream on(stream);
  Shape shape;
  for (int s : a.shape()) {
    if (s != 1) shape.push_back(s);
  }
  return reshape(a, shape);
}

array expand_dims(const array& a, const std::vector<int>& axes, StreamOrDevice s) {
  OnStream on(s);
  int out_nd = static_cast<int>(a.ndim() + axes.size());
  auto ax = detail::normalize_axes(axes, out_nd, "expand_dims");
  Shape shape;
  size_t k = 0, j = 0;
  for (int i = 0; i < out_nd; ++i) {
    if (k < ax.size() && ax[k] == i) {
      shape.push_back(1);
      ++k;
    } else {
      shape.push_back(a.shape()[j++]);
    }
  }
  return reshape(a, shape);
}
array expand_dims(const array& a, int axis, StreamOrDevice s) {
  OnStream on(s);
  return expand_dims(a, std::vector<int>{axis});
}

array broadcast_to(const array& a, const Shape& shape, StreamOrDevice s) {
  OnStream on(s);
  if (a.shape() == shape) return a;
  Shape b;
  try {
    b = broadcast_shapes(a.shape(), shape);
  } catch (const std::invalid_argument&) {
    b.clear();
  }
  if (b != shape) {
    throw std::invalid_argument(msg("[broadcast_to] cannot broadcast shape ", shape_str(a.shape()), " to ",
                                    shape_str(shape)));
  }
  return array(shape, a.dtype(), std::make_shared<Broadcast>(shape), {a});
}

array detail::broadcast_to_like(const array& a, const Shape& shape, const std::vector<array>& others) {
  if (!detail::shapeless_tracing() || others.empty() || a.shape() == shape) return broadcast_to(a, shape);
  broadcast_to(a, shape);  // validates
  std::vector<array> inputs{a};
  inputs.insert(inputs.end(), others.begin(), others.end());
  return array(shape, a.dtype(), std::make_shared<Broadcast>(shape), std::move(inputs));
}

std::vector<array> broadcast_arrays(const std::vector<array>& inputs, StreamOrDevice s) {
  OnStream on(s);
  Shape shape;
  for (auto& x : inputs) shape = broadcast_shapes(shape, x.shape());
  std::vector<array> out;
  for (auto& x : inputs) out.push_back(broadcast_to(x, shape));
  return out;
}

array slice(const array& a, Shape start, Shape stop, Shape strides, StreamOrDevice stream) {
  OnStream on(stream);
  Shape shape = normalize_slice(a.shape(), start, stop, strides, "slice");
  if (shape == a.shape() && std::all_of(strides.begin(), strides.end(), [](int s) { return s == 1; })) return a;
  return array(std::move(shape), a.dtype(), std::make_shared<Slice>(std::move(start), std::move(stop), std::move(strides)),
               {a});
}
array slice(const array& a, Shape start, Shape stop, StreamOrDevice s) {
  OnStream on(s);
  return slice(a, std::move(start), std::move(stop), Shape(a.ndim(), 1));
}

namespace {
array slice_update_mode(const array& src, const array& update, Shape start, Shape stop, Shape strides, SliceMode mode) {
  static const char* names[] = {"slice_update", "slice_update_add", "slice_update_prod", "slice_update_max",
                                "slice_update_min"};
  const char* op = names[static_cast<int>(mode)];
  Shape shape = normalize_slice(src.shape(), start, stop, strides, op);
  array upd = astype(update, src.dtype());
  try {
    upd = broadcast_to(upd, shape);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(msg("[", op, "] update of shape ", shape_str(update.shape()),
                                    " does not broadcast to the slice shape ", shape_str(shape)));
  }
  return array(src.shape(), src.dtype(),
               std::make_shared<SliceUpdate>(std::move(start), std::move(stop), std::move(strides), mode), {src, upd});
}
}  // namespace

array slice_update(const array& src, const array& update, Shape start, Shape stop, Shape strides, StreamOrDevice s) {
  OnStream on(s);
  return slice_update_mode(src, update, std::move(start), std::move(stop), std::move(strides), SliceMode::none);
}
array slice_update(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s) {
  OnStream on(s);
  return slice_update(src, update, std::move(start), std::move(stop), Shape(src.ndim(), 1));
}
#define LOOM_SLICE_UPDATE_MODE(NAME, MODE)                                                                    \
  array NAME(const array& src, const array& update, Shape start, Shape stop, Shape strides, StreamOrDevice s) { \
    OnStream on(s);                                                                                           \
    return slice_update_mode(src, update, std::move(start), std::move(stop), std::move(strides), MODE);       \
  }                                                                                                           \
  array NAME(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s) {              \
    OnStream on(s);                                                                                           \
    return NAME(src, update, std::move(start), std::move(stop), Shape(src.ndim(), 1));                        \
  }
LOOM_SLICE_UPDATE_MODE(slice_update_add, SliceMode::add)
LOOM_SLICE_UPDATE_MODE(slice_update_prod, SliceMode::prod)
LOOM_SLICE_UPDATE_MODE(slice_update_max, SliceMode::max)
LOOM_SLICE_UPDATE_MODE(slice_update_min, SliceMode::min)
#undef LOOM_SLICE_UPDATE_MODE

array concatenate(const std::vector<array>& arrays, int axis, StreamOrDevice stream) {
  OnStream on(stream);
  if (arrays.empty()) throw std::invalid_argument("[concatenate] needs at least one array");
  int nd = static_cast<int>(arrays[0].ndim());
  if (nd == 0) throw std::invalid_argument("[concatenate] cannot concatenate 0-d arrays");
  int ax = detail::normalize_axis(axis, nd, "concatenate");
  Shape shape = arrays[0].shape();
  Dtype d = arrays[0].dtype();
  for (size_t i = 1; i < arrays.size(); ++i) {
    const Shape& s = arrays[i].shape();
    bool ok = static_cast<int>(s.size()) == nd;
    for (int j = 0; ok && j < nd; ++j) ok = j == ax || s[j] == shape[j];
    if (!ok) {
      throw std::invalid_argument(msg("[concatenate] array ", i, " has shape ", shape_str(s),
                                      ", which does not match ", shape_str(arrays[0].shape()),
                                      " outside axis ", ax));
    }
    shape[ax] = detail::axis_length(int64_t(shape[ax]) + s[ax], "concatenate", ax);
    d = promote_types(d, arrays[i].dtype());
  }
  if (arrays.size() == 1) return arrays[0];
  std::vector<array> ins;
  for (auto& x : arrays) ins.push_back(astype(x, d));
  return array(std::move(shape), d, std::make_shared<Concatenate>(ax), std::move(ins));
}

array stack(const std::vector<array>& arrays, int axis, StreamOrDevice s) {
  OnStream on(s);
  if (arrays.empty()) throw std::invalid_argument("[stack] needs at least one array");
  int ax = detail::normalize_axis(axis, static_cast<int>(arrays[0].ndim()) + 1, "stack");
  std::vector<array> ex;
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].shape() != arrays[0].shape()) {
      throw std::invalid_argument(msg("[stack] array ", i, " has shape ", shape_str(arrays[i].shape()),
                                      " but array 0 has ", shape_str(arrays[0].shape())));
    }
    ex.push_back(expand_dims(arrays[i], ax));
  }
  if (ex.size() == 1) return ex[0];
  return concatenate(ex, ax);
}

std::vector<array> split(const array& a, const std::vector<int>& indices, int axis, StreamOrDevice s) {
  OnStream on(s);
  int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "split");
  int n = a.shape()[ax];
  // numpy: part i is a[indices[i-1]:indices[i]], empty when the indices decrease
  std::vector<int> bounds = {0};
  for (int i : indices) bounds.push_back(std::clamp(i < 0 ? i + n : i, 0, n));
  bounds.push_back(n);
  if (std::is_sorted(bounds.begin(), bounds.end())) {  // the parts tile the axis: one Split node
    std::vector<Shape> shapes;
    shapes.reserve(bounds.size() - 1);
    for (size_t i = 0; i + 1 < bounds.size(); ++i) {
      shapes.push_back(a.shape());
      shapes.back()[ax] = bounds[i + 1] - bounds[i];
    }
    bounds.pop_back();
    std::vector<Dtype> dtypes(shapes.size(), a.dtype());
    return array::make_arrays(std::move(shapes), dtypes, std::make_shared<Split>(ax, std::move(bounds)), {a});
  }
  std::vector<array> out;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    Shape start(a.ndim(), 0), stop = a.shape();
    start[ax] = bounds[i];
    stop[ax] = bounds[i + 1];
    out.push_back(slice(a, start, stop));
  }
  return out;
}

std::vector<array> split_flat(const array& a, const std::vector<Shape>& shapes) {
  std::vector<int> starts;
  starts.reserve(shapes.size());
  int64_t total = 0;
  for (const Shape& s : shapes) {
    starts.push_back(static_cast<int>(std::min<int64_t>(total, std::numeric_limits<int>::max())));
    total += std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<int64_t>());
  }
  if (a.ndim() != 1 || total != static_cast<int64_t>(a.size())) {
    std::string parts;
    for (size_t k = 0; k < shapes.size() && k < 8; ++k) parts += (k ? ", " : "") + shape_str(shapes[k]);
    if (shapes.size() > 8) parts += ", ...";
    throw std::invalid_argument(msg("[split_flat] expected a 1-D array of ", total, " elements for ", shapes.size(),
                                    " parts (", parts, "); got shape ", shape_str(a.shape())));
  }
  if (shapes.empty()) return {};
  std::vector<Dtype> dtypes(shapes.size(), a.dtype());
  return array::make_arrays(shapes, dtypes, std::make_shared<Split>(0, std::move(starts), shapes), {a});
}

std::vector<array> split(const array& a, int num_splits, int axis, StreamOrDevice s) {
  OnStream on(s);
  int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "split");
  if (num_splits <= 0 || a.shape()[ax] % num_splits != 0) {
    throw std::invalid_argument(msg("[split] cannot split axis ", ax, " of size ", a.shape()[ax], " into ",
                                    num_splits, " equal parts"));
  }
  std::vector<int> idx;
  int step = a.shape()[ax] / num_splits;
  for (int i = 1; i < num_splits; ++i) idx.push_back(i * step);
  return split(a, idx, ax);
}

namespace {
// The source index of each of the n_out = low + n + high positions of a padded axis of length n, for
// the modes that copy values of `a` (numpy's np.pad and MLX's): "edge" repeats the end values;
// "reflect" mirrors about them without repeating them (period 2(n - 1)); "symmetric" mirrors
// repeating them (period 2n).
std::vector<int> pad_source_index(const std::string& mode, int n, int low, int n_out) {
  const bool edge = mode == "edge" || n == 1, reflect = mode == "reflect";
  // The mirror's period: 2(n - 1) without repeating the end values, 2n repeating them.
  const int64_t p = reflect ? 2 * (int64_t(n) - 1) : 2 * int64_t(n);
  std::vector<int> idx(static_cast<size_t>(n_out));
  for (int i = 0; i < n_out; ++i) {
    const int64_t j = int64_t(i) - low;
    int64_t k;
    if (edge) {
      k = std::clamp<int64_t>(j, 0, n - 1);
    } else {
      const int64_t m = ((j % p) + p) % p;
      k = m < n ? m : (reflect ? p - m : p - 1 - m);
    }
    idx[static_cast<size_t>(i)] = static_cast<int>(k);
  }
  return idx;
}
}  // namespace

array pad(const array& a, const std::vector<int>& axes, const Shape& low, const Shape& high, const array& value,
          const std::string& mode, StreamOrDevice s) {
  OnStream on(s);
  if (axes.size() != low.size() || axes.size() != high.size()) {
    throw std::invalid_argument(msg("[pad] axes, low and high need the same length; got ", axes.size(), ", ",
                                    low.size(), ", ", high.size()));
  }
  if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "symmetric") {
    throw std::invalid_argument(
        msg("[pad] mode must be \"constant\", \"edge\", \"reflect\" or \"symmetric\"; got \"", mode, "\""));
  }
  if (value.size() != 1) {
    throw std::invalid_argument(msg("[pad] the pad value must be a scalar; got shape ", shape_str(value.shape())));
  }
  Shape shape = a.shape();
  std::vector<int> ax;
  for (size_t i = 0; i < axes.size(); ++i) {
    int k = detail::normalize_axis(axes[i], static_cast<int>(a.ndim()), "pad");
    if (std::find(ax.begin(), ax.end(), k) != ax.end()) {
      throw std::invalid_argument(msg("[pad] axis ", k, " is repeated"));
    }
    if (low[i] < 0 || high[i] < 0) {
      throw std::invalid_argument(msg("[pad] negative padding (", low[i], ", ", high[i], ") on axis ", k));
    }
    if (mode != "constant" && a.shape()[k] == 0 && low[i] + int64_t(high[i]) > 0) {
      throw std::invalid_argument(msg("[pad] mode \"", mode, "\" cannot pad axis ", k, ", which is empty"));
    }
    shape[k] = detail::axis_length(int64_t(shape[k]) + low[i] + high[i], "pad", k);
    ax.push_back(k);
  }
  if (mode != "constant") {
    // A gather along each padded axis: the gradient (a scatter-add) sums what each element fed.
    array out = a;
    for (size_t i = 0; i < ax.size(); ++i) {
      if (low[i] == 0 && high[i] == 0) continue;
      std::vector<int> idx = pad_source_index(mode, a.shape()[ax[i]], low[i], shape[ax[i]]);
      out = take(out, array(idx.data(), Shape{shape[ax[i]]}, int32), ax[i]);
    }
    return out;
  }
  array v = astype(reshape(value, {}), a.dtype());
  return array(std::move(shape), a.dtype(), std::make_shared<Pad>(ax, low, high), {a, v});
}

array pad(const array& a, const std::vector<std::pair<int, int>>& pad_width, const array& value,
          const std::string& mode, StreamOrDevice s) {
  OnStream on(s);
  std::vector<int> axes;
  Shape low, high;
  std::vector<std::pair<int, int>> pw = pad_width;
  if (pw.size() == 1) pw.assign(a.ndim(), pad_width[0]);
  if (pw.size() != a.ndim()) {
    throw std::invalid_argument(msg("[pad] ", pad_width.size(), " (before, after) pairs for an array of ", a.ndim(),
                                    " dimensions"));
  }
  for (size_t i = 0; i < pw.size(); ++i) {
    axes.push_back(static_cast<int>(i));
    low.push_back(pw[i].first);
    high.push_back(pw[i].second);
  }
  return pad(a, axes, low, high, value, mode);
}
array pad(const array& a, const std::pair<int, int>& pad_width, const array& value, const std::string& mode,
          StreamOrDevice s) {
  OnStream on(s);
  return pad(a, std::vector<std::pair<int, int>>(a.ndim(), pad_width), value, mode);
}
array pad(const array& a, int pad_width, const array& value, const std::string& mode, StreamOrDevice s) {
  OnStream on(s);
  return pad(a, {{pad_width, pad_width}}, value, mode);
}

array tile(const array& a, std::vector<int> reps, StreamOrDevice s) {
  OnStream on(s);
  for (int r : reps) {
    if (r < 0) throw std::invalid_argument(msg("[tile] negative repetition ", r));
  }
  size_t nd = std::max(a.ndim(), reps.size());
  Shape ashape = a.shape();
  ashape.insert(ashape.begin(), nd - ashape.size(), 1);
  reps.insert(reps.begin(), nd - reps.size(), 1);
  // Broadcast each axis to (reps, size) then merge.
  Shape expanded, bshape, final_shape;
  for (size_t i = 0; i < nd; ++i) {
    expanded.push_back(1);
    expanded.push_back(ashape[i]);
    bshape.push_back(reps[i]);
    bshape.push_back(ashape[i]);
    final_shape.push_back(detail::axis_length(int64_t(reps[i]) * ashape[i], "tile", static_cast<int>(i)));
  }
  return reshape(broadcast_to(reshape(a, expanded), bshape), final_shape);
}

array repeat(const array& a, int repeats, int axis, StreamOrDevice s) {
  OnStream on(s);
  if (repeats < 0) throw std::invalid_argument(msg("[repeat] negative repeats ", repeats));
  int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "repeat");
  Shape ex = a.shape();
  ex.insert(ex.begin() + ax + 1, 1);
  Shape b = ex;
  b[ax + 1] = repeats;
  Shape out = a.shape();
  out[ax] = detail::axis_length(int64_t(out[ax]) * repeats, "repeat", ax);
  return reshape(broadcast_to(reshape(a, ex), b), out);
}
array repeat(const array& a, int repeats, StreamOrDevice s) { OnStream on(s); return repeat(flatten(a), repeats, 0); }

}  // namespace loom
