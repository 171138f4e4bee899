// Sorting along an axis: sort, argsort, topk, partition and argpartition. NaNs order after every
// other value (numpy); index results are int32.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include "loom/core/primitive.h"
#include "loom/core/serialize.h"
#include "loom/ops/batching.h"
#include "loom/ops/indexing.h"
#include "loom/ops/indexing_utils.h"
#include "loom/kernels/elementwise.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;

namespace {

// complex64 orders lexicographically (real part, then imaginary part), as MLX and numpy; a NaN in
// either part makes it a NaN, which sorts last.
template <typename C>
inline bool is_nan(C v) {
  if constexpr (std::is_floating_point_v<C>) {
    return std::isnan(v);
  } else if constexpr (is_complex_v<C>) {
    return std::isnan(v.real()) || std::isnan(v.imag());
  } else {
    return false;
  }
}

// Calls tile(state, in_offset, out_offset, count, in_step, out_step) over every 1-d row along `axis`
// of `in` (input strides) and `out` (row-major). A tile is `count` rows that follow each other along
// the innermost other dimension (row b starts at offset + b * step), so when the sorted axis is not the
// innermost one in memory a tile reads and writes whole cache lines instead of one element per line.
// Tiles are split across threads when the work is large; `make_state` builds per-thread scratch.
template <typename MakeState, typename Tile>
void for_each_axis_tile(const array& in, const array& out, int axis, MakeState make_state, Tile tile) {
  Shape shape;
  std::array<Strides, 2> st;
  for (int d = 0; d < static_cast<int>(in.ndim()); ++d) {
    if (d == axis) continue;
    shape.push_back(in.shape()[d]);
    st[0].push_back(in.strides()[d]);
    st[1].push_back(out.strides()[d]);
  }
  if (shape.empty()) {  // one row
    shape.push_back(1);
    st[0].push_back(0);
    st[1].push_back(0);
  }
  const int64_t n = std::max(in.shape()[axis], 1);
  // Rows of the innermost other dimension, grouped in tiles of B.
  const int64_t inner = shape.back(), in_step = st[0].back(), out_step = st[1].back();
  const int64_t B = (std::abs(in.strides()[axis]) == 1 || inner == 1) ? 1 : 16;
  const int64_t tiles_per_line = (inner + B - 1) / B;
  shape.pop_back();
  st[0].pop_back();
  st[1].pop_back();
  const int64_t lines = detail::prod(shape, 0, shape.size());
  const int64_t tiles = lines * tiles_per_line;
  kernels::parallel_for(
      static_cast<size_t>(tiles),
      [&](size_t b, size_t e) {
        auto state = make_state(B);
        int64_t line = static_cast<int64_t>(b) / tiles_per_line, t = static_cast<int64_t>(b) % tiles_per_line;
        detail::Walker<2> w(shape, st, line);
        for (size_t r = b; r < e; ++r) {
          const int64_t first = t * B;
          tile(state, w.off[0] + first * in_step, w.off[1] + first * out_step, std::min(B, inner - first), in_step,
               out_step);
          if (++t == tiles_per_line) {
            t = 0;
            w.next();
          }
        }
      },
      std::max<size_t>(1, kernels::kParallelThreshold / (n * B)));
}

enum class SortKind { sort, argsort, topk, argtopk, argpartition };

// The values of one row (v[0..n)) sorted, or the k largest ascending, into res[0..total); NaNs last,
// in their original order (total = n for a sort, k for topk: the last k of the full order).
template <typename C, SortKind kind>
void sort_values_row(C* v, int n, int k, C* res) {
  const int total = kind == SortKind::topk ? k : n;
  int nans = 0;
  if constexpr (std::is_floating_point_v<C> || is_complex_v<C>) {
    for (int i = 0; i < n; ++i) nans += is_nan(v[i]);
  }
  // Compact the others to the front of v; the NaN numbered j sits at n - nans + j of the full order.
  int m = 0;
  for (int i = 0, j = 0; i < n; ++i) {
    if (!is_nan(v[i])) {
      v[m++] = v[i];
    } else {
      const int at = n - nans + j++ - (n - total);
      if (at >= 0) res[at] = v[i];
    }
  }
  const int from_buf = std::max(total - nans, 0), lo = m - from_buf;
  if constexpr (kind == SortKind::topk) {
    std::nth_element(v, v + lo, v + m);
    std::sort(v + lo, v + m);
  } else {
    std::sort(v, v + m);
  }
  for (int j = 0; j < from_buf; ++j) res[j] = v[lo + j];
}

// The indices of one row. The row is loaded as (value, index) pairs with the non-NaN ones first (in
// index order) and the NaNs after them (in index order); ordering pairs lexicographically then gives
// a strict total order that is the stable ascending order with NaNs last.
template <typename C, SortKind kind>
void sort_indices_row(const C* v, int n, int k, std::vector<std::pair<C, int32_t>>& buf, int32_t* res) {
  int m = 0;
  for (int i = 0; i < n; ++i) {
    if (!is_nan(v[i])) buf[m++] = {v[i], i};
  }
  for (int i = 0, j = m; j < n; ++i) {
    if (is_nan(v[i])) buf[j++] = {v[i], i};
  }
  int lo = 0, total = n;
  if constexpr (kind == SortKind::argsort) {
    std::sort(buf.begin(), buf.begin() + m);
  } else if constexpr (kind == SortKind::argtopk) {
    lo = n - k;  // the last k of the total order
    total = k;
    if (lo < m) {
      std::nth_element(buf.begin(), buf.begin() + lo, buf.begin() + m);
      std::sort(buf.begin() + lo, buf.begin() + m);
    }
  } else {  // argpartition: position k lands in sorted place
    if (k < m) std::nth_element(buf.begin(), buf.begin() + k, buf.begin() + m);
  }
  for (int j = 0; j < total; ++j) res[j] = buf[lo + j].second;
}

template <typename T, SortKind kind>
void sort_kernel(const array& in, array& out, int axis, int k) {
  // The type rows are sorted in: float for the half types, int64 for bool and the integers narrower
  // than int32 (it holds their values in order, and one sort of int64 serves them all: compile time),
  // else T.
  using C = std::conditional_t<std::is_integral_v<T> && (sizeof(T) < 4 || std::is_same_v<T, uint32_t>), int64_t,
                               compute_t<T>>;
  constexpr bool values = kind == SortKind::sort || kind == SortKind::topk;
  using R = std::conditional_t<values, C, int32_t>;  // one result element
  using OutT = std::conditional_t<values, T, int32_t>;
  const int n = in.shape()[axis];
  const int total = out.shape()[axis];
  const int64_t si = in.strides()[axis], so = out.strides()[axis];
  const T* x = kernels::ptr<T>(in);
  OutT* y = kernels::ptr<OutT>(out);
  struct State {
    std::vector<C> vals;
    std::vector<R> res;
    std::vector<std::pair<C, int32_t>> pairs;
  };
  for_each_axis_tile(
      in, out, axis,
      [&](int64_t B) {
        State s;
        s.vals.resize(B * n);
        s.res.resize(B * std::max(total, 1));
        if constexpr (!values) s.pairs.resize(n);
        return s;
      },
      [&](State& s, int64_t oi, int64_t oo, int64_t count, int64_t in_step, int64_t out_step) {
        C* v = s.vals.data();
        R* res = s.res.data();
        if (count == 1) {
          const T* xp = x + oi;
          if (si == 1) {
            for (int i = 0; i < n; ++i) v[i] = static_cast<C>(xp[i]);
          } else {
            for (int i = 0; i < n; ++i) v[i] = static_cast<C>(xp[i * si]);
          }
        } else {
          for (int i = 0; i < n; ++i) {
            const T* xp = x + oi + i * si;
            for (int64_t b = 0; b < count; ++b) v[b * n + i] = static_cast<C>(xp[b * in_step]);
          }
        }
        for (int64_t b = 0; b < count; ++b) {
          if constexpr (values) {
            sort_values_row<C, kind>(v + b * n, n, k, res + b * total);
          } else {
            sort_indices_row<C, kind>(v + b * n, n, k, s.pairs, res + b * total);
          }
        }
        if (count == 1) {
          OutT* yp = y + oo;
          for (int j = 0; j < total; ++j) yp[j * so] = static_cast<OutT>(res[j]);
        } else {
          for (int j = 0; j < total; ++j) {
            OutT* yp = y + oo + j * so;
            for (int64_t b = 0; b < count; ++b) yp[b * out_step] = static_cast<OutT>(res[b * total + j]);
          }
        }
      });
}

template <SortKind kind>
void run_sort(const array& in, array& out, int axis, int k) {
  out.alloc();
  if (out.size() == 0 || in.size() == 0) return;
  LOOM_DISPATCH_ALL(in.dtype(), T, sort_kernel<T, kind>(in, out, axis, k));
}

class Sort : public UnaryPrimitive {
 public:
  explicit Sort(int axis) : axis_(axis) {}
  void save(detail::Writer& w) const override { w.put(axis_); }
  void eval_cpu(const std::vector<array>& in, array& out) override { run_sort<SortKind::sort>(in[0], out, axis_, 0); }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    // sorted[j] = a[idx[j]]: send each cotangent back to where its value came from.
    return {scatter_add_axis(zeros_like(p[0]), argsort(p[0], axis_), cot[0], axis_)};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    return {take_along_axis(t[0], argsort(p[0], axis_), axis_)};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const int b = axes[0];
    auto prim = std::make_shared<Sort>(detail::batched_axis(axis_, b));
    return {{array(in[0].shape(), outs[0].dtype(), std::move(prim), {in[0]})}, {b}};
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return {in.at(0)}; }
  const char* name() const override { return "Sort"; }
  bool supports_complex() const override { return true; }

 private:
  int axis_;
};
const bool kSortLoads = detail::register_primitive("Sort", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<Sort>(r.get<int>());
});

class ArgSort : public UnaryPrimitive {
 public:
  explicit ArgSort(int axis) : axis_(axis) {}
  void save(detail::Writer& w) const override { w.put(axis_); }
  void eval_cpu(const std::vector<array>& in, array& out) override { run_sort<SortKind::argsort>(in[0], out, axis_, 0); }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    const int b = axes[0];
    auto prim = std::make_shared<ArgSort>(detail::batched_axis(axis_, b));
    return {{array(in[0].shape(), int32, std::move(prim), {in[0]})}, {b}};
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return {in.at(0)}; }
  const char* name() const override { return "ArgSort"; }
  bool supports_complex() const override { return true; }
  bool is_differentiable() const override { return false; }

 private:
  int axis_;
};
const bool kArgSortLoads = detail::register_primitive("ArgSort", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<ArgSort>(r.get<int>());
});

Shape with_axis(Shape s, int axis, int size) {
  s[axis] = size;
  return s;
}

// A shapeless call's top-k shape: k of the axis, which must still have k entries.
Shape topk_shape(const Shape& in, int axis, int k, const char* who) {
  if (in[axis] < k) {
    throw std::invalid_argument(msg("[compile] ", who, " of k=", k, " along axis ", axis, " cannot take an input of shape ",
                                    shape_str(in)));
  }
  return with_axis(in, axis, k);
}

// The indices of the k largest (the last k of argsort), ascending; used by TopK's gradients.
class ArgTopK : public UnaryPrimitive {
 public:
  ArgTopK(int k, int axis) : k_(k), axis_(axis) {}
  void save(detail::Writer& w) const override { w.put(k_, axis_); }
  void eval_cpu(const std::vector<array>& in, array& out) override { run_sort<SortKind::argtopk>(in[0], out, axis_, k_); }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    const int b = axes[0], ax = detail::batched_axis(axis_, b);
    return {{array(with_axis(in[0].shape(), ax, k_), int32, std::make_shared<ArgTopK>(k_, ax), {in[0]})}, {b}};
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    return {topk_shape(in.at(0), axis_, k_, name())};
  }
  const char* name() const override { return "ArgTopK"; }
  bool supports_complex() const override { return true; }
  bool is_differentiable() const override { return false; }

 private:
  int k_, axis_;
};
const bool kArgTopKLoads = detail::register_primitive("ArgTopK", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  int k, axis;
  r.get(k, axis);
  return std::make_shared<ArgTopK>(k, axis);
});

class TopK : public UnaryPrimitive {
 public:
  TopK(int k, int axis) : k_(k), axis_(axis) {}
  void save(detail::Writer& w) const override { w.put(k_, axis_); }
  void eval_cpu(const std::vector<array>& in, array& out) override { run_sort<SortKind::topk>(in[0], out, axis_, k_); }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {scatter_add_axis(zeros_like(p[0]), indices(p[0]), cot[0], axis_)};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    return {take_along_axis(t[0], indices(p[0]), axis_)};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const int b = axes[0], ax = detail::batched_axis(axis_, b);
    return {{array(with_axis(in[0].shape(), ax, k_), outs[0].dtype(), std::make_shared<TopK>(k_, ax), {in[0]})}, {b}};
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    return {topk_shape(in.at(0), axis_, k_, name())};
  }
  const char* name() const override { return "TopK"; }
  bool supports_complex() const override { return true; }

 private:
  array indices(const array& a) const {
    return array(with_axis(a.shape(), axis_, k_), int32, std::make_shared<ArgTopK>(k_, axis_), {a});
  }
  int k_, axis_;
};
const bool kTopKLoads = detail::register_primitive("TopK", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  int k, axis;
  r.get(k, axis);
  return std::make_shared<TopK>(k, axis);
});

class ArgPartition : public UnaryPrimitive {
 public:
  ArgPartition(int kth, int axis) : kth_(kth), axis_(axis) {}
  void save(detail::Writer& w) const override { w.put(kth_, axis_); }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    run_sort<SortKind::argpartition>(in[0], out, axis_, kth_);
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    const int b = axes[0];
    auto prim = std::make_shared<ArgPartition>(kth_, detail::batched_axis(axis_, b));
    return {{array(in[0].shape(), int32, std::move(prim), {in[0]})}, {b}};
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    if (kth_ >= in.at(0)[axis_]) {
      throw std::invalid_argument(msg("[compile] ArgPartition at kth=", kth_, " along axis ", axis_,
                                      " cannot take an input of shape ", shape_str(in[0])));
    }
    return {in[0]};
  }
  const char* name() const override { return "ArgPartition"; }
  bool supports_complex() const override { return true; }
  bool is_differentiable() const override { return false; }

 private:
  int kth_, axis_;
};
const bool kArgPartitionLoads =
    detail::register_primitive("ArgPartition", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      int kth, axis;
      r.get(kth, axis);
      return std::make_shared<ArgPartition>(kth, axis);
    });

// For each value, its insertion index into a sorted sequence (inputs 0 and 1, of one dtype): the
// first index whose element is not less than the value ("left") or greater than it ("right"). NaN
// orders after every other value, as sort puts it (numpy). The sequence runs along input 0's last
// axis; its leading axes, if any (vmap's batches), match the values' leading axes, and each value
// is searched in the sequence at its own position along them.
class SearchSorted : public UnaryPrimitive {
 public:
  explicit SearchSorted(bool right) : right_(right) {}
  void save(detail::Writer& w) const override { w.put(right_); }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& seq = in[0];
    const array& vals = in[1];
    out.alloc();
    if (out.size() == 0) return;
    const int lead = static_cast<int>(seq.ndim()) - 1;
    const int64_t n = seq.shape()[lead];
    const int64_t ss = seq.strides()[lead];
    Shape shape = vals.shape();
    // The third operand walks the start of each value's sequence (stride 0 past the leading axes).
    Strides seq_st(shape.size(), 0);
    for (int d = 0; d < lead; ++d) seq_st[d] = seq.strides()[d];
    std::array<Strides, 3> st{vals.strides(), out.strides(), seq_st};
    kernels::collapse(shape, st);
    int32_t* y0 = kernels::ptr<int32_t>(out);
    LOOM_DISPATCH_REAL(vals.dtype(), T, {
      using C = compute_t<T>;
      const T* s0 = kernels::ptr<T>(seq);
      const T* v0 = kernels::ptr<T>(vals);
      // a < b with NaN last.
      auto less = [](C a, C b) { return is_nan(b) ? !is_nan(a) : a < b; };
      kernels::for_each_row<3>(shape, st, [&](const std::array<int64_t, 3>& o, int cnt, const std::array<int64_t, 3>& s) {
        for (int j = 0; j < cnt; ++j) {
          const C v = static_cast<C>(v0[o[0] + j * s[0]]);
          // (An empty sequence has no data to point into: every value goes at 0.)
          const T* sp = n > 0 ? s0 + o[2] + j * s[2] : nullptr;
          int64_t lo = 0, hi = n;  // the answer is in [lo, hi]
          while (lo < hi) {
            const int64_t mid = lo + (hi - lo) / 2;
            const C e = static_cast<C>(sp[mid * ss]);
            if (right_ ? !less(v, e) : less(e, v)) lo = mid + 1;
            else hi = mid;
          }
          y0[o[1] + j * s[1]] = static_cast<int32_t>(lo);
        }
      });
    });
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    // One shared 1-d sequence: the values keep their batch where it is.
    if (axes[0] < 0 && in[0].ndim() == 1) {
      return {{array(in[1].shape(), int32, std::make_shared<SearchSorted>(right_), {in[0], in[1]})}, {axes[1]}};
    }
    // Otherwise the batch becomes a leading axis of both (a view where an input is unbatched).
    const int size = detail::vmap_size(in, axes);
    array seq = detail::batch_first_broadcast(in[0], axes[0], size);
    array vals = detail::batch_first_broadcast(in[1], axes[1], size);
    return {{array(vals.shape(), int32, std::make_shared<SearchSorted>(right_), {seq, vals})}, {0}};
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return {in.at(1)}; }
  const char* name() const override { return "SearchSorted"; }
  bool is_differentiable() const override { return false; }

 private:
  bool right_;
};
const bool kSearchSortedLoads =
    detail::register_primitive("SearchSorted", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      return std::make_shared<SearchSorted>(r.get<bool>());
    });

int normalize_kth(const array& a, int kth, int ax, const char* op) {
  const int n = a.shape()[ax];
  const int k = kth < 0 ? kth + n : kth;
  if (k < 0 || k >= n) {
    throw std::out_of_range(msg("[", op, "] kth ", kth, " is out of range for axis ", ax, " of size ", n,
                                " of the array of shape ", shape_str(a.shape())));
  }
  return k;
}

}  // namespace

array sort(const array& a, int axis, StreamOrDevice s) {
  OnStream on(s);
  const int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "sort");
  return array(a.shape(), a.dtype(), std::make_shared<Sort>(ax), {a});
}

array argsort(const array& a, int axis, StreamOrDevice s) {
  OnStream on(s);
  const int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "argsort");
  return array(a.shape(), int32, std::make_shared<ArgSort>(ax), {a});
}

array topk(const array& a, int k, int axis, StreamOrDevice s) {
  OnStream on(s);
  const int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "topk");
  const int n = a.shape()[ax];
  if (k < 0 || k > n) {
    throw std::invalid_argument(msg("[topk] k = ", k, " is not in [0, ", n, "] for axis ", ax,
                                    " of the array of shape ", shape_str(a.shape())));
  }
  return array(with_axis(a.shape(), ax, k), a.dtype(), std::make_shared<TopK>(k, ax), {a});
}

array argpartition(const array& a, int kth, int axis, StreamOrDevice s) {
  OnStream on(s);
  const int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "argpartition");
  const int k = normalize_kth(a, kth, ax, "argpartition");
  return array(a.shape(), int32, std::make_shared<ArgPartition>(k, ax), {a});
}

array partition(const array& a, int kth, int axis, StreamOrDevice s) {
  OnStream on(s);
  const int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "partition");
  const int k = normalize_kth(a, kth, ax, "partition");
  // The values follow the indices, so the gradient flows through take_along_axis.
  return take_along_axis(a, array(a.shape(), int32, std::make_shared<ArgPartition>(k, ax), {a}), ax);
}

// Without an axis: over the flattened array (MLX's C++ overloads).
array sort(const array& a, StreamOrDevice s) {
  OnStream on(s);
  return sort(flatten(a), 0);
}
array argsort(const array& a, StreamOrDevice s) {
  OnStream on(s);
  return argsort(flatten(a), 0);
}
array topk(const array& a, int k, StreamOrDevice s) {
  OnStream on(s);
  return topk(flatten(a), k, 0);
}
array partition(const array& a, int kth, StreamOrDevice s) {
  OnStream on(s);
  return partition(flatten(a), kth, 0);
}
array argpartition(const array& a, int kth, StreamOrDevice s) {
  OnStream on(s);
  return argpartition(flatten(a), kth, 0);
}

array searchsorted(const array& sorted_sequence, const array& values, const std::string& side, StreamOrDevice s) {
  OnStream on(s);
  if (side != "left" && side != "right") {
    throw std::invalid_argument(msg("[searchsorted] side must be \"left\" or \"right\", got \"", side, "\""));
  }
  if (sorted_sequence.ndim() != 1) {
    throw std::invalid_argument(msg("[searchsorted] the sorted sequence must be 1-d, got shape ",
                                    shape_str(sorted_sequence.shape())));
  }
  // Compared in the promoted dtype (as MLX): 2.5 searched among int32 values stays 2.5.
  const Dtype d = promote_types(sorted_sequence.dtype(), values.dtype());
  return array(values.shape(), int32, std::make_shared<SearchSorted>(side == "right"),
               {astype(sorted_sequence, d), astype(values, d)});
}

}  // namespace loom
