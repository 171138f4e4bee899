// Gathers and scatters along an axis: take, take_along_axis, put_along_axis, scatter_add_axis and
// scatter_add_take, each a primitive with its CPU kernel, vjp and jvp side by side.
#include "loom/ops/indexing.h"

#include <algorithm>
#include <cstring>

#include "loom/core/primitive.h"
#include "loom/core/serialize.h"
#include "loom/ops/batching.h"
#include "loom/ops/indexing_utils.h"
#include "loom/kernels/elementwise.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::prod;
using detail::shape_str;

namespace {

Shape take_shape(const Shape& a, const Shape& idx, int axis) {
  Shape out(a.begin(), a.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), a.begin() + axis + 1, a.end());
  return out;
}

// ---- vmap helpers ----

// `x` with its batch (at `axis`, -1: unbatched) at `at`: moved there, or a new axis of `size` broadcast.
array batch_at(const array& x, int axis, int at, int size) {
  if (axis == at) return x;
  if (axis >= 0) return moveaxis(x, axis, at);
  return broadcast_to(expand_dims(x, at), detail::insert_axis(x.shape(), at, size));
}

// The batch axis of the first batched input.
int first_batch_axis(const std::vector<int>& axes) {
  for (int a : axes) {
    if (a >= 0) return a;
  }
  return -1;
}

// Entry b's number at b along the first of ndim axes (B, 1, .., 1): an index array that sends each
// batch entry's indices into its own entry.
array batch_iota(int size, int ndim) {
  Shape shape(ndim, 1);
  shape[0] = size;
  return reshape(arange(0, size), shape);
}

// ---- take ----

// out[p, j, q] = a[p, idx[j], q] with p over a.shape[:axis], j over the indices, q over a.shape[axis+1:].
template <typename T>
void take_kernel(const array& a, array& out, int axis, const std::vector<int64_t>& idx) {
  const Shape& sh = a.shape();
  const Strides& st = a.strides();
  const size_t nd = sh.size();
  const int64_t P = prod(sh, 0, axis), N = static_cast<int64_t>(idx.size()), Q = prod(sh, axis + 1, nd);
  const int64_t s_ax = st[axis];
  const bool dense = detail::dense_block(sh, st, axis + 1, nd);
  std::vector<int64_t> post;
  if (!dense) post = detail::block_offsets(sh, st, axis + 1, nd);
  const Shape pre_shape(sh.begin(), sh.begin() + axis);
  const std::array<Strides, 1> pre_st{Strides(st.begin(), st.begin() + axis)};
  const T* src = kernels::ptr<T>(a);
  T* dst = kernels::ptr<T>(out);
  const int64_t* ix = idx.data();
  const int64_t* po = post.data();
  kernels::parallel_for(
      static_cast<size_t>(P * N),
      [&](size_t b, size_t e) {
        detail::Walker<1> w(pre_shape, pre_st, static_cast<int64_t>(b) / N);
        int64_t j = static_cast<int64_t>(b) % N;
        for (size_t r = b; r < e; ++r) {
          const T* s = src + w.off[0] + ix[j] * s_ax;
          T* d = dst + static_cast<int64_t>(r) * Q;
          if (dense) {
            if (Q == 1) {
              *d = *s;
            } else {
              std::memcpy(static_cast<void*>(d), static_cast<const void*>(s), sizeof(T) * Q);
            }
          } else {
            for (int64_t q = 0; q < Q; ++q) d[q] = s[po[q]];
          }
          if (++j == N) {
            j = 0;
            w.next();
          }
        }
      },
      std::max<size_t>(1, kernels::kParallelThreshold / std::max<int64_t>(Q, 1)));
}

class Take : public UnaryPrimitive {
 public:
  bool supports_complex() const override { return true; }
  explicit Take(int axis) : axis_(axis) {}
  void save(detail::Writer& w) const override { w.put(axis_); }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& a = in[0];
    auto idx = detail::load_indices(in[1], a.shape()[axis_], axis_, "take");
    out.alloc();
    if (out.size() == 0) return;
    LOOM_DISPATCH_ITEMSIZE(a.itemsize(), T, take_kernel<T>(a, out, axis_, idx));
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> out;
    for (int arg : argnums) {
      out.push_back(arg == 0 ? scatter_add_take(zeros_like(p[0]), p[1], cot[0], axis_) : zeros_like(p[1]));
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    for (size_t i = 0; i < argnums.size(); ++i) {
      if (argnums[i] == 0) return {take(t[i], p[1], axis_)};
    }
    return {zeros(take_shape(p[0].shape(), p[1].shape(), axis_), p[0].dtype())};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const array& a = in[0];
    const array& idx = in[1];
    const Dtype dt = outs[0].dtype();
    if (axes[1] < 0) {  // shared indices: the batch is one more axis of a around the taken one
      const int b = axes[0], ax = detail::batched_axis(axis_, b);
      const int at = b < ax ? b : b - 1 + static_cast<int>(idx.ndim());
      return {{array(take_shape(a.shape(), idx.shape(), ax), dt, std::make_shared<Take>(ax), {a, idx})}, {at}};
    }
    if (axes[0] < 0) {  // a shared array: the batch is one more axis of the indices
      return {{array(take_shape(a.shape(), idx.shape(), axis_), dt, std::make_shared<Take>(axis_), {a, idx})},
              {axis_ + axes[1]}};
    }
    // Each entry's indices into its own entry: a gather indexed by (entry, index), whose window is the
    // rest of a; its result (B, I.., pre.., post..) is ordered as take's (B, pre.., I.., post..).
    const int size = detail::vmap_size(in, axes);
    const array x = detail::batch_first(a, axes[0]), i = detail::batch_first(idx, axes[1]);
    const int ni = static_cast<int>(i.ndim()) - 1, pre = axis_, post = static_cast<int>(x.ndim()) - 2 - axis_;
    Shape window = x.shape();
    window[0] = 1;
    window[axis_ + 1] = 1;
    array g = gather(x, {batch_iota(size, ni + 1), i}, {0, axis_ + 1}, window);
    Shape flat = i.shape();
    for (int d = 1; d < static_cast<int>(x.ndim()); ++d) {
      if (d != axis_ + 1) flat.push_back(x.shape(d));
    }
    std::vector<int> perm{0};
    for (int d = 0; d < pre; ++d) perm.push_back(1 + ni + d);
    for (int d = 0; d < ni; ++d) perm.push_back(1 + d);
    for (int d = 0; d < post; ++d) perm.push_back(1 + ni + pre + d);
    return {{transpose(reshape(g, flat), perm)}, {0}};
  }
  // A shapeless call takes other index shapes, and other lengths of every axis of the array.
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    return {take_shape(in.at(0), in.at(1), axis_)};
  }
  const char* name() const override { return "Take"; }

 private:
  int axis_;
};
const bool kTakeLoads = detail::register_primitive("Take", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<Take>(r.get<int>());
});

// ---- take_along_axis ----

// a arrives broadcast to the output shape outside `axis`; idx has the output shape.
template <typename T>
void take_along_kernel(const array& a, array& out, int axis, const std::vector<int64_t>& idx) {
  const Shape& sh = out.shape();
  const Strides& st = a.strides();
  const size_t nd = sh.size();
  const int64_t P = prod(sh, 0, axis), J = sh[axis], Q = prod(sh, axis + 1, nd);
  const int64_t s_ax = st[axis];
  const bool dense = detail::dense_block(a.shape(), st, axis + 1, nd);
  std::vector<int64_t> post;
  if (!dense) post = detail::block_offsets(a.shape(), st, axis + 1, nd);
  const Shape pre_shape(sh.begin(), sh.begin() + axis);
  const std::array<Strides, 1> pre_st{Strides(st.begin(), st.begin() + axis)};
  const T* src = kernels::ptr<T>(a);
  T* dst = kernels::ptr<T>(out);
  const int64_t* ix = idx.data();
  const int64_t* po = post.data();
  kernels::parallel_for(
      static_cast<size_t>(P * J),
      [&](size_t b, size_t e) {
        detail::Walker<1> w(pre_shape, pre_st, static_cast<int64_t>(b) / J);
        int64_t j = static_cast<int64_t>(b) % J;
        for (size_t r = b; r < e; ++r) {
          const T* s = src + w.off[0];
          const int64_t* ir = ix + static_cast<int64_t>(r) * Q;
          T* d = dst + static_cast<int64_t>(r) * Q;
          if (dense) {
            for (int64_t q = 0; q < Q; ++q) d[q] = s[ir[q] * s_ax + q];
          } else {
            for (int64_t q = 0; q < Q; ++q) d[q] = s[ir[q] * s_ax + po[q]];
          }
          if (++j == J) {
            j = 0;
            w.next();
          }
        }
      },
      std::max<size_t>(1, kernels::kParallelThreshold / std::max<int64_t>(Q, 1)));
}

class TakeAlongAxis : public UnaryPrimitive {
 public:
  bool supports_complex() const override { return true; }
  explicit TakeAlongAxis(int axis) : axis_(axis) {}
  void save(detail::Writer& w) const override { w.put(axis_); }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& a = in[0];
    auto idx = detail::load_indices(in[1], a.shape()[axis_], axis_, "take_along_axis");
    out.alloc();
    if (out.size() == 0) return;
    LOOM_DISPATCH_ITEMSIZE(a.itemsize(), T, take_along_kernel<T>(a, out, axis_, idx));
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> out;
    for (int arg : argnums) {
      out.push_back(arg == 0 ? scatter_add_axis(zeros_like(p[0]), p[1], cot[0], axis_) : zeros_like(p[1]));
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    for (size_t i = 0; i < argnums.size(); ++i) {
      if (argnums[i] == 0) return {take_along_axis(t[i], p[1], axis_)};
    }
    return {zeros(p[1].shape(), p[0].dtype())};
  }
  // The array and the indices aligned on the first batched input's batch axis (the other moved or
  // broadcast there): one more axis along which the take runs alike.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const int size = detail::vmap_size(in, axes), at = first_batch_axis(axes);
    const array a = batch_at(in[0], axes[0], at, size), i = batch_at(in[1], axes[1], at, size);
    auto prim = std::make_shared<TakeAlongAxis>(detail::batched_axis(axis_, at));
    return {{array(i.shape(), outs[0].dtype(), std::move(prim), {a, i})}, {at}};
  }
  // (Its inputs arrive broadcast to one shape but along its axis.)
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    for (size_t d = 0; d < in.at(0).size(); ++d) {
      if (static_cast<int>(d) != axis_ && in[0][d] != in.at(1)[d]) {
        throw std::invalid_argument(msg("[compile] TakeAlongAxis along axis ", axis_, " cannot take an array of shape ",
                                        shape_str(in[0]), " with indices of shape ", shape_str(in[1])));
      }
    }
    return {in[1]};
  }
  const char* name() const override { return "TakeAlongAxis"; }

 private:
  int axis_;
};
const bool kTakeAlongAxisLoads =
    detail::register_primitive("TakeAlongAxis", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      return std::make_shared<TakeAlongAxis>(r.get<int>());
    });

// ---- put_along_axis / scatter_add_axis ----

enum class ScatterMode { put, add };

// out (row-major, shape S) gets out[p, idx[p, j, q], q] (=|+=) v[p, j, q]; idx and v are row-major of
// shape I (S with I[axis] along the axis). Positions collide only along j, which runs in order inside
// each (p, q), so threads split over p or q.
template <typename T, ScatterMode mode>
void scatter_axis_kernel(array& out, const array& vals, int axis, const std::vector<int64_t>& idx) {
  const Shape& sh = out.shape();
  const size_t nd = sh.size();
  const int64_t P = prod(sh, 0, axis), n = sh[axis], J = vals.shape()[axis], Q = prod(sh, axis + 1, nd);
  T* dst = kernels::ptr<T>(out);
  const T* v = kernels::ptr<T>(vals);
  const int64_t* ix = idx.data();
  detail::split_outer_inner(P, Q, static_cast<size_t>(P * J * Q), [&](int64_t p0, int64_t p1, int64_t q0, int64_t q1) {
    for (int64_t p = p0; p < p1; ++p) {
      T* o = dst + p * n * Q;
      for (int64_t j = 0; j < J; ++j) {
        const int64_t r = (p * J + j) * Q;
        const int64_t* ir = ix + r;
        const T* vr = v + r;
        for (int64_t q = q0; q < q1; ++q) {
          if constexpr (mode == ScatterMode::put) {
            o[ir[q] * Q + q] = vr[q];
          } else {
            using C = compute_t<T>;
            T& y = o[ir[q] * Q + q];
            y = static_cast<T>(kernels::wrapping_add(static_cast<C>(y), static_cast<C>(vr[q])));  // wraps as numpy
          }
        }
      }
    }
  });
}

class ScatterAxis : public UnaryPrimitive {
 public:
  ScatterAxis(ScatterMode mode, int axis) : mode_(mode), axis_(axis) {}
  void save(detail::Writer& w) const override { w.put(mode_, axis_); }
  bool supports_complex() const override { return true; }  // put and add
  void eval_cpu(const std::vector<array>& in, array& out) override {
    auto idx = detail::load_indices(in[1], in[0].shape()[axis_], axis_, op_name());
    detail::copy_or_donate(in[0], out);
    if (idx.empty() || out.size() == 0) return;
    array vals = kernels::row_contiguous(in[2]);
    if (mode_ == ScatterMode::put) {
      LOOM_DISPATCH_ITEMSIZE(out.itemsize(), T, scatter_axis_kernel<T, ScatterMode::put>(out, vals, axis_, idx));
    } else {
      LOOM_DISPATCH_ALL(out.dtype(), T, scatter_axis_kernel<T, ScatterMode::add>(out, vals, axis_, idx));
    }
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> out;
    for (int arg : argnums) {
      if (arg == 0) {
        // put: the written positions no longer depend on a.
        out.push_back(mode_ == ScatterMode::put ? put_along_axis(cot[0], p[1], zeros_like(p[2]), axis_) : cot[0]);
      } else if (arg == 1) {
        out.push_back(zeros_like(p[1]));
      } else {
        array g = take_along_axis(cot[0], p[1], axis_);
        if (mode_ == ScatterMode::put) g = where(last_writer_mask(p[0], p[1]), g, zeros_like(g));
        out.push_back(g);
      }
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    array ta = detail::tangent_or_zeros(p, t, argnums, 0);
    if (!detail::has_arg(argnums, 2) && mode_ == ScatterMode::add) return {ta};
    array tv = detail::tangent_or_zeros(p, t, argnums, 2);
    return {mode_ == ScatterMode::put ? put_along_axis(ta, p[1], tv, axis_) : scatter_add_axis(ta, p[1], tv, axis_)};
  }
  // The updates are written over a copy of the input: its own buffer when nothing else reads it.
  uint64_t donors(const std::vector<array>& in, int) const override {
    return listed_once(in, 0) ? row_contiguous_donors(in, {0}) : 0;
  }
  // As TakeAlongAxis: every input aligned on one batch axis.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const int size = detail::vmap_size(in, axes), at = first_batch_axis(axes);
    std::vector<array> x;
    for (size_t k = 0; k < in.size(); ++k) x.push_back(batch_at(in[k], axes[k], at, size));
    Shape shape = x[0].shape();
    auto prim = std::make_shared<ScatterAxis>(mode_, detail::batched_axis(axis_, at));
    return {{array(std::move(shape), outs[0].dtype(), std::move(prim), std::move(x))}, {at}};
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return {in.at(0)}; }
  const char* name() const override { return mode_ == ScatterMode::put ? "PutAlongAxis" : "ScatterAddAxis"; }

 private:
  const char* op_name() const { return mode_ == ScatterMode::put ? "put_along_axis" : "scatter_add_axis"; }
  // True where a value survives the put: with repeated indices along the axis only the last write
  // lands, so only it gets a gradient. Found by putting each value's position j and reading it back.
  array last_writer_mask(const array& a, const array& idx) const {
    const Shape& s = idx.shape();
    Shape pshape(s.size(), 1);
    pshape[axis_] = s[axis_];
    array pos = broadcast_to(reshape(arange(0, s[axis_]), pshape), s);
    array winner = put_along_axis(full(a.shape(), -1, int32), idx, pos, axis_);
    return equal(take_along_axis(winner, idx, axis_), pos);
  }
  ScatterMode mode_;
  int axis_;
};
// One class under two names: the mode saved picks the name back.
std::shared_ptr<Primitive> load_scatter_axis(detail::Reader& r) {
  const auto mode = r.get<ScatterMode>();
  if (mode != ScatterMode::put && mode != ScatterMode::add) r.fail("not a scatter mode");
  return std::make_shared<ScatterAxis>(mode, r.get<int>());
}
const bool kScatterAxisLoads = detail::register_primitive("PutAlongAxis", load_scatter_axis) &&
                               detail::register_primitive("ScatterAddAxis", load_scatter_axis);

// ---- scatter_add_take ----

// out (row-major, shape S) gets out[p, idx[j], q] += u[p, j, q] with u row-major of take's shape.
template <typename T>
void scatter_add_kernel(array& out, const array& upd, int axis, const std::vector<int64_t>& idx) {
  using C = compute_t<T>;
  const Shape& sh = out.shape();
  const size_t nd = sh.size();
  const int64_t P = prod(sh, 0, axis), n = sh[axis], N = static_cast<int64_t>(idx.size()), Q = prod(sh, axis + 1, nd);
  T* dst = kernels::ptr<T>(out);
  const T* u = kernels::ptr<T>(upd);
  const int64_t* ix = idx.data();
  detail::split_outer_inner(P, Q, static_cast<size_t>(P * N * Q), [&](int64_t p0, int64_t p1, int64_t q0, int64_t q1) {
    for (int64_t p = p0; p < p1; ++p) {
      for (int64_t j = 0; j < N; ++j) {
        T* o = dst + (p * n + ix[j]) * Q;
        const T* ur = u + (p * N + j) * Q;
        for (int64_t q = q0; q < q1; ++q) o[q] = static_cast<T>(kernels::wrapping_add(static_cast<C>(o[q]), static_cast<C>(ur[q])));
      }
    }
  });
}

class ScatterAdd : public UnaryPrimitive {
 public:
  explicit ScatterAdd(int axis) : axis_(axis) {}
  void save(detail::Writer& w) const override { w.put(axis_); }
  bool supports_complex() const override { return true; }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    auto idx = detail::load_indices(in[1], in[0].shape()[axis_], axis_, "scatter_add_take");
    detail::copy_or_donate(in[0], out);
    if (idx.empty() || out.size() == 0) return;
    array upd = kernels::row_contiguous(in[2]);
    LOOM_DISPATCH_ALL(out.dtype(), T, scatter_add_kernel<T>(out, upd, axis_, idx));
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> out;
    for (int arg : argnums) {
      if (arg == 0) out.push_back(cot[0]);
      else if (arg == 1) out.push_back(zeros_like(p[1]));
      else out.push_back(take(cot[0], p[1], axis_));
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    array ta = detail::tangent_or_zeros(p, t, argnums, 0);
    if (!detail::has_arg(argnums, 2)) return {ta};
    return {scatter_add_take(ta, p[1], detail::tangent_or_zeros(p, t, argnums, 2), axis_)};
  }
  // The updates are written over a copy of the input: its own buffer when nothing else reads it.
  uint64_t donors(const std::vector<array>& in, int) const override {
    return listed_once(in, 0) ? row_contiguous_donors(in, {0}) : 0;
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const int size = detail::vmap_size(in, axes);
    const array a = detail::batch_first_broadcast(in[0], axes[0], size);
    const array u = detail::batch_first_broadcast(in[2], axes[2], size);  // (B, pre.., I.., post..)
    if (axes[1] < 0) {  // shared indices: one more leading axis
      return {{array(a.shape(), outs[0].dtype(), std::make_shared<ScatterAdd>(axis_ + 1), {a, in[1], u})}, {0}};
    }
    // Each entry's indices into its own entry: a scatter_add indexed by (entry, index), whose updates
    // are windows (1, pre.., 1, post..) after the index axes.
    const array i = detail::batch_first(in[1], axes[1]);
    const int ni = static_cast<int>(i.ndim()) - 1, pre = axis_, post = static_cast<int>(a.ndim()) - 2 - axis_;
    std::vector<int> perm{0};
    for (int d = 0; d < ni; ++d) perm.push_back(1 + pre + d);
    for (int d = 0; d < pre; ++d) perm.push_back(1 + d);
    for (int d = 0; d < post; ++d) perm.push_back(1 + pre + ni + d);
    Shape window = i.shape();
    for (int d = 0; d < static_cast<int>(a.ndim()); ++d) window.push_back(d == 0 || d == axis_ + 1 ? 1 : a.shape(d));
    array upd = reshape(transpose(u, perm), window);
    return {{scatter_add(a, {batch_iota(size, ni + 1), i}, upd, {0, axis_ + 1})}, {0}};
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return {in.at(0)}; }
  const char* name() const override { return "ScatterAddTake"; }

 private:
  int axis_;
};
const bool kScatterAddTakeLoads =
    detail::register_primitive("ScatterAddTake", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      return std::make_shared<ScatterAdd>(r.get<int>());
    });

// Checks shared by put_along_axis and scatter_add_axis; returns the node.
array scatter_axis(const array& a, const array& indices, const array& values, int axis, ScatterMode mode) {
  const char* op = mode == ScatterMode::put ? "put_along_axis" : "scatter_add_axis";
  detail::check_index_dtype(indices, op);
  const int nd = static_cast<int>(a.ndim());
  const int ax = detail::normalize_axis(axis, nd, op);
  if (static_cast<int>(indices.ndim()) != nd) {
    throw std::invalid_argument(msg("[", op, "] indices of shape ", shape_str(indices.shape()), " have ",
                                    indices.ndim(), " dimensions but the array of shape ", shape_str(a.shape()),
                                    " has ", nd, "; they must match"));
  }
  array v = astype(values, a.dtype());
  Shape vs = v.shape();
  bool ok = true;
  while (static_cast<int>(vs.size()) > nd) {
    ok &= vs.front() == 1;
    vs.erase(vs.begin());
  }
  Shape s;
  if (ok) {
    try {
      s = broadcast_shapes(indices.shape(), vs);
    } catch (const std::invalid_argument&) {
      ok = false;
    }
  }
  for (int d = 0; ok && d < nd; ++d) ok = d == ax || s[d] == 1 || s[d] == a.shape()[d];
  if (!ok) {
    throw std::invalid_argument(msg("[", op, "] indices of shape ", shape_str(indices.shape()), " and values of shape ",
                                    shape_str(values.shape()), " do not broadcast together to the array of shape ",
                                    shape_str(a.shape()), " outside axis ", ax));
  }
  Shape target = a.shape();
  target[ax] = s[ax];
  if (a.shape()[ax] == 0 && prod(target, 0, target.size()) > 0) {
    throw std::invalid_argument(msg("[", op, "] cannot index axis ", ax, " of size 0 of the array of shape ",
                                    shape_str(a.shape())));
  }
  if (vs != v.shape()) v = reshape(v, vs);
  array idx = broadcast_to(indices, target);
  v = broadcast_to(v, target);
  return array(a.shape(), a.dtype(), std::make_shared<ScatterAxis>(mode, ax), {a, idx, v});
}

}  // namespace

array take(const array& a, const array& indices, int axis, StreamOrDevice s) {
  OnStream on(s);
  detail::check_index_dtype(indices, "take");
  const int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "take");
  if (a.shape()[ax] == 0 && indices.size() > 0) {
    throw std::invalid_argument(msg("[take] cannot take ", indices.size(), " indices from axis ", ax,
                                    " of size 0 of the array of shape ", shape_str(a.shape())));
  }
  return array(take_shape(a.shape(), indices.shape(), ax), a.dtype(), std::make_shared<Take>(ax), {a, indices});
}

array take(const array& a, const array& indices, StreamOrDevice s) {
  OnStream on(s);
  detail::check_index_dtype(indices, "take");
  return take(flatten(a), indices, 0);
}

array take(const array& a, int index, int axis, StreamOrDevice s) {
  OnStream on(s);
  const int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "take");
  const int n = a.shape()[ax];
  const int i = index < 0 ? index + n : index;
  if (i < 0 || i >= n) {
    throw std::out_of_range(msg("[take] index ", index, " is out of bounds for axis ", ax, " of size ", n,
                                " of the array of shape ", shape_str(a.shape())));
  }
  Shape start(a.ndim(), 0), stop = a.shape();
  start[ax] = i;
  stop[ax] = i + 1;
  return squeeze(slice(a, start, stop), ax);
}

array take(const array& a, int index, StreamOrDevice s) { OnStream on(s); return take(flatten(a), index, 0); }

array take_along_axis(const array& a, const array& indices, int axis, StreamOrDevice s) {
  OnStream on(s);
  detail::check_index_dtype(indices, "take_along_axis");
  const int nd = static_cast<int>(a.ndim());
  const int ax = detail::normalize_axis(axis, nd, "take_along_axis");
  if (static_cast<int>(indices.ndim()) != nd) {
    throw std::invalid_argument(msg("[take_along_axis] indices of shape ", shape_str(indices.shape()), " have ",
                                    indices.ndim(), " dimensions but the array of shape ", shape_str(a.shape()),
                                    " has ", nd, "; they must match"));
  }
  Shape out = indices.shape();
  for (int d = 0; d < nd; ++d) {
    if (d == ax) continue;
    const int sa = a.shape()[d], si = indices.shape()[d];
    if (sa != si && sa != 1 && si != 1) {
      throw std::invalid_argument(msg("[take_along_axis] indices of shape ", shape_str(indices.shape()),
                                      " do not broadcast with the array of shape ", shape_str(a.shape()),
                                      " outside axis ", ax));
    }
    out[d] = sa == 1 ? si : sa;
  }
  if (a.shape()[ax] == 0 && prod(out, 0, out.size()) > 0) {
    throw std::invalid_argument(msg("[take_along_axis] cannot take from axis ", ax, " of size 0 of the array of shape ",
                                    shape_str(a.shape())));
  }
  Shape a_target = out;
  a_target[ax] = a.shape()[ax];
  array ab = broadcast_to(a, a_target);
  array ib = broadcast_to(indices, out);
  return array(std::move(out), a.dtype(), std::make_shared<TakeAlongAxis>(ax), {ab, ib});
}

array put_along_axis(const array& a, const array& indices, const array& values, int axis, StreamOrDevice s) {
  OnStream on(s);
  return scatter_axis(a, indices, values, axis, ScatterMode::put);
}

array scatter_add_axis(const array& a, const array& indices, const array& values, int axis, StreamOrDevice s) {
  OnStream on(s);
  return scatter_axis(a, indices, values, axis, ScatterMode::add);
}

array scatter_add_take(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s) {
  OnStream on(s);
  detail::check_index_dtype(indices, "scatter_add_take");
  const int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "scatter_add_take");
  if (a.shape()[ax] == 0 && indices.size() > 0) {
    throw std::invalid_argument(msg("[scatter_add_take] cannot index axis ", ax, " of size 0 of the array of shape ",
                                    shape_str(a.shape())));
  }
  Shape target = take_shape(a.shape(), indices.shape(), ax);
  Shape b;
  try {
    b = broadcast_shapes(updates.shape(), target);
  } catch (const std::invalid_argument&) {
    b.clear();
  }
  if (b != target) {
    throw std::invalid_argument(msg("[scatter_add_take] updates of shape ", shape_str(updates.shape()),
                                    " do not broadcast to ", shape_str(target), ", the shape take(a, indices, ", ax,
                                    ") has for a of shape ", shape_str(a.shape()), " and indices of shape ",
                                    shape_str(indices.shape())));
  }
  array u = broadcast_to(astype(updates, a.dtype()), target);
  return array(a.shape(), a.dtype(), std::make_shared<ScatterAdd>(ax), {a, indices, u});
}


// ---- MLX's gather and scatters ----

namespace {

enum class Reduce { none, add, prod, max, min };

// The window of each index tuple as an element offset under `strides`: sum over j of
// indices[j][b] * strides[axes[j]]. The indices (all of one shape) are wrapped and checked so that a
// window of size window[axis] starting there fits in the axis.
std::vector<int64_t> window_offsets(const std::vector<array>& indices, const std::vector<int>& axes,
                                    const Shape& shape, const Strides& strides, const Shape& window, const char* op) {
  std::vector<int64_t> off(indices.empty() ? 1 : indices[0].size(), 0);
  std::vector<int64_t> v;
  for (size_t j = 0; j < indices.size(); ++j) {
    const int ax = axes[j];
    const int64_t n = shape[ax], w = window[ax];
    v.resize(indices[j].size());
    if (v.empty()) continue;
    kernels::copy_strided(indices[j], v.data(), int64, kernels::row_major_strides(indices[j].shape()));
    for (size_t b = 0; b < v.size(); ++b) {
      const int64_t x = v[b], y = x < 0 ? x + n : x;
      if (y < 0 || y >= n || y + w > n) {
        if (w <= 1) {
          throw std::out_of_range(msg("[", op, "] index ", x, " is out of bounds for axis ", ax, " of size ", n));
        }
        throw std::out_of_range(msg("[", op, "] index ", x, " with a window of size ", w,
                                    " is out of bounds for axis ", ax, " of size ", n));
      }
      off[b] += y * strides[ax];
    }
  }
  return off;
}

// Shared argument checks of gather and the scatters: the index arrays (integer, at most ndim of them,
// one per axis) and the axes (normalized, distinct). Returns the indices broadcast together.
std::vector<array> check_index_arrays(const array& a, const std::vector<array>& indices, std::vector<int>& axes,
                                      const char* op) {
  const int nd = static_cast<int>(a.ndim());
  if (indices.size() > a.ndim()) {
    throw std::invalid_argument(msg("[", op, "] got ", indices.size(), " index arrays for the array of shape ",
                                    shape_str(a.shape()), " with ", nd, " dimensions"));
  }
  if (indices.size() != axes.size()) {
    throw std::invalid_argument(msg("[", op, "] got ", indices.size(), " index arrays but ", axes.size(),
                                    " axes; they must match"));
  }
  for (const array& x : indices) detail::check_index_dtype(x, op);
  for (int& ax : axes) ax = detail::normalize_axis(ax, nd, op);
  for (size_t i = 0; i < axes.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (axes[i] == axes[j]) throw std::invalid_argument(msg("[", op, "] axis ", axes[i], " is given twice"));
    }
  }
  Shape b;
  for (const array& x : indices) {
    try {
      b = broadcast_shapes(b, x.shape());
    } catch (const std::invalid_argument&) {
      std::string shapes;
      for (const array& y : indices) shapes += (shapes.empty() ? "" : ", ") + shape_str(y.shape());
      throw std::invalid_argument(msg("[", op, "] index arrays of shapes ", shapes, " do not broadcast together"));
    }
  }
  std::vector<array> out;
  for (const array& x : indices) out.push_back(broadcast_to(x, b));
  return out;
}

class Gather : public UnaryPrimitive {
 public:
  bool supports_complex() const override { return true; }
  Gather(std::vector<int> axes, Shape slice_sizes) : axes_(std::move(axes)), slice_(std::move(slice_sizes)) {}
  void save(detail::Writer& w) const override { w.put(axes_, slice_); }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    out.alloc();
    if (out.size() == 0) return;
    const array& a = in[0];
    std::vector<array> idx(in.begin() + 1, in.end());
    auto base = window_offsets(idx, axes_, a.shape(), a.strides(), slice_, "gather");
    LOOM_DISPATCH_ITEMSIZE(a.itemsize(), T, kernel<T>(a, out, base));
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> out;
    std::vector<array> idx(p.begin() + 1, p.end());
    for (int arg : argnums) {
      out.push_back(arg == 0 ? scatter_add(zeros_like(p[0]), idx, cot[0], axes_) : zeros_like(p[arg]));
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    std::vector<array> idx(p.begin() + 1, p.end());
    return {gather(detail::tangent_or_zeros(p, t, argnums, 0), idx, axes_, slice_)};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const int size = detail::vmap_size(in, axes);
    bool idx_batched = false;
    for (size_t k = 1; k < in.size(); ++k) idx_batched |= axes[k] >= 0;
    if (!idx_batched) {  // shared indices: every window spans the whole batch, where it is
      const int b = axes[0];
      std::vector<int> ax;
      for (int a : axes_) ax.push_back(detail::batched_axis(a, b));
      Shape window = detail::insert_axis(slice_, b, size);
      const int ni = in.size() > 1 ? static_cast<int>(in[1].ndim()) : 0;
      Shape shape = detail::insert_axis(outs[0].shape(), ni + b, size);
      return {{array(std::move(shape), outs[0].dtype(), std::make_shared<Gather>(std::move(ax), std::move(window)), in)},
              {ni + b}};
    }
    std::vector<array> idx;
    for (size_t k = 1; k < in.size(); ++k) idx.push_back(detail::batch_first_broadcast(in[k], axes[k], size));
    if (axes[0] < 0) return {{gather(in[0], idx, axes_, slice_)}, {0}};
    // Each entry's indices into its own entry: the entry is one more index, with a window of 1.
    const int ni = static_cast<int>(idx[0].ndim()) - 1;
    idx.insert(idx.begin(), batch_iota(size, ni + 1));
    std::vector<int> ax{0};
    for (int a : axes_) ax.push_back(a + 1);
    Shape window = detail::insert_axis(slice_, 0, 1);
    array g = gather(detail::batch_first(in[0], axes[0]), idx, ax, window);  // (B, I.., 1, window..)
    return {{squeeze(g, ni + 1)}, {0}};
  }
  // Every index array has one shape, followed by the slice sizes.
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    Shape out = in.size() > 1 ? in[1] : Shape{};
    for (size_t k = 2; k < in.size(); ++k) {
      if (in[k] != in[1]) {
        throw std::invalid_argument(msg("[compile] Gather cannot take index arrays of shapes ", shape_str(in[1]),
                                        " and ", shape_str(in[k])));
      }
    }
    for (size_t d = 0; d < slice_.size(); ++d) {
      if (slice_[d] > in.at(0)[d]) {
        throw std::invalid_argument(msg("[compile] Gather of slice sizes ", shape_str(slice_),
                                        " cannot take an array of shape ", shape_str(in[0])));
      }
    }
    out.insert(out.end(), slice_.begin(), slice_.end());
    return {out};
  }
  const char* name() const override { return "Gather"; }

 private:
  // out[b, u] = a[base[b] + offset of u] with u over the window's positions in row-major order.
  template <typename T>
  void kernel(const array& a, array& out, const std::vector<int64_t>& base) const {
    const size_t nd = a.ndim();
    const int64_t N = static_cast<int64_t>(base.size()), S = prod(slice_, 0, nd);
    const bool dense = detail::dense_block(slice_, a.strides(), 0, nd);
    std::vector<int64_t> po;
    if (!dense) po = detail::block_offsets(slice_, a.strides(), 0, nd);
    const T* src = kernels::ptr<T>(a);
    T* dst = kernels::ptr<T>(out);
    kernels::parallel_for(
        static_cast<size_t>(N),
        [&](size_t b, size_t e) {
          for (size_t r = b; r < e; ++r) {
            const T* s = src + base[r];
            T* d = dst + static_cast<int64_t>(r) * S;
            if (dense) {
              std::memcpy(static_cast<void*>(d), static_cast<const void*>(s), sizeof(T) * S);
            } else {
              for (int64_t q = 0; q < S; ++q) d[q] = s[po[q]];
            }
          }
        },
        std::max<size_t>(1, kernels::kParallelThreshold / std::max<int64_t>(S, 1)));
  }
  std::vector<int> axes_;
  Shape slice_;
};
const bool kGatherLoads = detail::register_primitive("Gather", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  std::vector<int> axes;
  Shape slice;
  r.get(axes, slice);
  return std::make_shared<Gather>(std::move(axes), std::move(slice));
});

template <typename T, Reduce M>
inline void combine(T& y, T x) {
  using C = compute_t<T>;
  if constexpr (M == Reduce::none) {
    y = x;
  } else if constexpr (M == Reduce::add) {
    y = static_cast<T>(kernels::wrapping_add(static_cast<C>(y), static_cast<C>(x)));
  } else if constexpr (M == Reduce::prod) {
    y = static_cast<T>(kernels::wrapping_mul(static_cast<C>(y), static_cast<C>(x)));
  } else {
    const C a = static_cast<C>(y), b = static_cast<C>(x);
    bool keep = M == Reduce::max ? a > b : a < b;
    if constexpr (std::is_floating_point_v<C>) keep = keep || a != a;  // NaN in, NaN out (as maximum)
    y = keep ? y : x;
  }
}

class Scatter : public UnaryPrimitive {
 public:
  Scatter(Reduce mode, std::vector<int> axes, const char* op) : mode_(mode), axes_(std::move(axes)), op_(op) {}
  void save(detail::Writer& w) const override { w.put(mode_, axes_, op_); }
  bool supports_complex() const override { return mode_ == Reduce::none || mode_ == Reduce::add; }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    detail::copy_or_donate(in[0], out);
    const array& upd_in = in.back();
    if (upd_in.size() == 0 || out.size() == 0) return;
    std::vector<array> idx(in.begin() + 1, in.end() - 1);
    const size_t k = upd_in.ndim() - out.ndim();
    const Shape win(upd_in.shape().begin() + k, upd_in.shape().end());
    auto base = window_offsets(idx, axes_, out.shape(), out.strides(), win, op_);
    array upd = kernels::row_contiguous(upd_in);
    // Windows overlap across index tuples only when an indexed axis has a window wider than 1; else
    // two tuples meet only at the same window position, so threads can split the window positions.
    bool split = true;
    for (int ax : axes_) split = split && win[ax] <= 1;
    switch (mode_) {
      case Reduce::none: LOOM_DISPATCH_ITEMSIZE(out.itemsize(), T, kernel<T, Reduce::none>(out, upd, base, win, split)); break;
      case Reduce::add: LOOM_DISPATCH_ALL(out.dtype(), T, kernel<T, Reduce::add>(out, upd, base, win, split)); break;
      case Reduce::prod: LOOM_DISPATCH_REAL(out.dtype(), T, kernel<T, Reduce::prod>(out, upd, base, win, split)); break;
      case Reduce::max: LOOM_DISPATCH_REAL(out.dtype(), T, kernel<T, Reduce::max>(out, upd, base, win, split)); break;
      case Reduce::min: LOOM_DISPATCH_REAL(out.dtype(), T, kernel<T, Reduce::min>(out, upd, base, win, split)); break;
    }
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>& outputs) override {
    if (mode_ == Reduce::prod) {
      throw std::runtime_error(msg("[", op_, "] has no vjp (MLX implements none for scatter_prod)"));
    }
    const array& a = p[0];
    const array& upd = p.back();
    const array& c = cot[0];
    std::vector<array> idx(p.begin() + 1, p.end() - 1);
    const Shape win = window(upd, a);
    std::vector<array> out;
    for (int arg : argnums) {
      if (arg == 0) {
        if (mode_ == Reduce::none) out.push_back(scatter(c, idx, zeros_like(upd), axes_));
        else if (mode_ == Reduce::add) out.push_back(c);
        else out.push_back(where(equal(outputs[0], a), c, zeros_like(c)));
      } else if (arg == static_cast<int>(p.size()) - 1) {
        array g = gather(c, idx, axes_, win);
        if (mode_ == Reduce::none) {
          if (!idx.empty() && idx[0].size() > 1) {
            g = where(last_writer_mask(a, idx, upd), g, zeros_like(g));
          }
        } else if (mode_ != Reduce::add) {
          g = where(equal(gather(outputs[0], idx, axes_, win), upd), g, zeros_like(g));
        }
        out.push_back(g);
      } else {
        out.push_back(zeros_like(p[arg]));
      }
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    if (mode_ == Reduce::prod) {
      throw std::runtime_error(msg("[", op_, "] has no jvp (MLX implements no derivative for scatter_prod)"));
    }
    const int last = static_cast<int>(p.size()) - 1;
    std::vector<array> idx(p.begin() + 1, p.end() - 1);
    array ta = detail::tangent_or_zeros(p, t, argnums, 0);
    array tu = detail::tangent_or_zeros(p, t, argnums, last);
    if (mode_ == Reduce::none) return {scatter(ta, idx, tu, axes_)};
    if (mode_ == Reduce::add) return {scatter_add(ta, idx, tu, axes_)};
    // max / min: the transpose of the vjp (the tangent of whichever side equals the result).
    const array& a = p[0];
    const array& upd = p.back();
    array res = array(a.shape(), a.dtype(), std::make_shared<Scatter>(mode_, axes_, op_), p);
    array from_a = where(equal(res, a), ta, zeros_like(ta));
    array hit = equal(gather(res, idx, axes_, window(upd, a)), upd);
    return {scatter_add(from_a, idx, where(hit, tu, zeros_like(tu)), axes_)};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override;
  // The updates are written over a copy of the input: its own buffer when nothing else reads it.
  uint64_t donors(const std::vector<array>& in, int) const override {
    return listed_once(in, 0) ? row_contiguous_donors(in, {0}) : 0;
  }
  const char* name() const override {
    switch (mode_) {
      case Reduce::none: return "Scatter";
      case Reduce::add: return "ScatterAdd";
      case Reduce::prod: return "ScatterProd";
      case Reduce::max: return "ScatterMax";
      default: return "ScatterMin";
    }
  }

 private:
  static Shape window(const array& upd, const array& a) {
    return Shape(upd.shape().begin() + (upd.ndim() - a.ndim()), upd.shape().end());
  }
  // True for each update element that lands last at its position (the one scatter keeps): each
  // element's number is scattered, and read back.
  array last_writer_mask(const array& a, const std::vector<array>& idx, const array& upd) const {
    const int64_t n = static_cast<int64_t>(upd.size());
    const Dtype dt = n > INT32_MAX ? int64 : int32;
    array pos = reshape(arange(0.0, static_cast<double>(n), 1.0, dt), upd.shape());
    array winner = scatter(full(a.shape(), -1, dt), idx, pos, axes_);
    return equal(gather(winner, idx, axes_, window(upd, a)), pos);
  }
  template <typename T, Reduce M>
  static void kernel(array& out, const array& upd, const std::vector<int64_t>& base, const Shape& win, bool split) {
    const int64_t N = static_cast<int64_t>(base.size()), U = prod(win, 0, win.size());
    const auto po = detail::block_offsets(win, out.strides(), 0, win.size());
    T* dst = kernels::ptr<T>(out);
    const T* u = kernels::ptr<T>(upd);
    auto body = [&](int64_t u0, int64_t u1) {
      for (int64_t i = 0; i < N; ++i) {
        T* o = dst + base[i];
        const T* ur = u + i * U;
        for (int64_t q = u0; q < u1; ++q) combine<T, M>(o[po[q]], ur[q]);
      }
    };
    if (split) {
      kernels::parallel_for(
          static_cast<size_t>(U), [&](size_t b, size_t e) { body(int64_t(b), int64_t(e)); },
          std::max<size_t>(1, kernels::kParallelThreshold / std::max<int64_t>(N, 1)));
    } else {
      body(0, U);
    }
  }
  Reduce mode_;
  std::vector<int> axes_;
  const char* op_;
};
// One class under five names (the mode saved picks the name back). op_ must outlive the primitive:
// the loader gives back the public op's own literal.
std::shared_ptr<Primitive> load_scatter(detail::Reader& r) {
  Reduce mode;
  std::vector<int> axes;
  std::string op;
  r.get(mode, axes, op);
  if (mode < Reduce::none || mode > Reduce::min) r.fail("not a scatter mode");
  for (const char* known : {"scatter", "scatter_add", "scatter_prod", "scatter_max", "scatter_min", "slice_update"}) {
    if (op == known) return std::make_shared<Scatter>(mode, std::move(axes), known);
  }
  r.fail("'" + op.substr(0, 32) + "' is not a scatter op");
}
const bool kScatterLoads =
    detail::register_primitive("Scatter", load_scatter) && detail::register_primitive("ScatterAdd", load_scatter) &&
    detail::register_primitive("ScatterProd", load_scatter) && detail::register_primitive("ScatterMax", load_scatter) &&
    detail::register_primitive("ScatterMin", load_scatter);

array scatter_node(const array& a, const std::vector<array>& indices, const array& updates, std::vector<int> axes,
                   Reduce mode, const char* op) {
  auto idx = check_index_arrays(a, indices, axes, op);
  const Shape b = idx.empty() ? Shape{} : idx[0].shape();
  const size_t k = b.size(), nd = a.ndim();
  if (updates.ndim() != nd + k) {
    throw std::invalid_argument(msg("[", op, "] updates of shape ", shape_str(updates.shape()), " have ",
                                    updates.ndim(), " dimensions; they need ", nd + k, ": the index shape ",
                                    shape_str(b), " followed by one window size per dimension of the array of shape ",
                                    shape_str(a.shape())));
  }
  for (size_t d = 0; d < k; ++d) {
    if (updates.shape()[d] != b[d]) {
      throw std::invalid_argument(msg("[", op, "] updates of shape ", shape_str(updates.shape()),
                                      " do not start with the index shape ", shape_str(b)));
    }
  }
  for (size_t d = 0; d < nd; ++d) {
    if (updates.shape()[k + d] > a.shape()[d]) {
      throw std::invalid_argument(msg("[", op, "] updates of shape ", shape_str(updates.shape()),
                                      " have windows larger than the array of shape ", shape_str(a.shape())));
    }
  }
  std::vector<array> inputs{a};
  inputs.insert(inputs.end(), idx.begin(), idx.end());
  inputs.push_back(astype(updates, a.dtype()));
  return array(a.shape(), a.dtype(), std::make_shared<Scatter>(mode, std::move(axes), op), std::move(inputs));
}

std::pair<std::vector<array>, std::vector<int>> Scatter::vmap(const std::vector<array>& in,
                                                              const std::vector<int>& axes,
                                                              const std::vector<array>& outs) {
  const int size = detail::vmap_size(in, axes);
  const int k = static_cast<int>(in.size()) - 2;  // index arrays
  bool idx_batched = false;
  for (int j = 1; j <= k; ++j) idx_batched |= axes[j] >= 0;
  const array a = detail::batch_first_broadcast(in[0], axes[0], size);
  const array& u = in.back();
  const int ua = axes.back();
  std::vector<array> inputs{a};
  std::vector<int> ax;
  if (!idx_batched) {
    // Shared indices: each update window spans the whole batch, a new window axis just after the
    // index axes, in the order the updates land in every entry.
    const int ni = k > 0 ? static_cast<int>(in[1].ndim()) : 0;
    for (int j = 1; j <= k; ++j) inputs.push_back(in[j]);
    inputs.push_back(ua >= 0 ? moveaxis(u, ua, ni) : broadcast_to(expand_dims(u, ni), detail::insert_axis(u.shape(), ni, size)));
    for (int x : axes_) ax.push_back(x + 1);
  } else {
    // Each entry's indices into its own entry: the entry is one more index, with a window of 1.
    std::vector<array> idx;
    for (int j = 1; j <= k; ++j) idx.push_back(detail::batch_first_broadcast(in[j], axes[j], size));
    const int ni = static_cast<int>(idx[0].ndim()) - 1;
    inputs.push_back(broadcast_to(batch_iota(size, ni + 1), idx[0].shape()));
    inputs.insert(inputs.end(), idx.begin(), idx.end());
    const array ub = detail::batch_first_broadcast(u, ua, size);
    inputs.push_back(expand_dims(ub, ni + 1));
    ax.push_back(0);
    for (int x : axes_) ax.push_back(x + 1);
  }
  Shape shape = a.shape();
  return {{array(std::move(shape), outs[0].dtype(), std::make_shared<Scatter>(mode_, std::move(ax), op_), std::move(inputs))},
          {0}};
}

// ---- masked_scatter ----

// Inputs: a, the mask broadcast to a's shape, and src laid out as rows. Under vmap the first
// `batch` axes of all three (src's rows axis follows them) index independent entries: each entry's
// true positions, in order, take its own src elements from the first.
class MaskedScatter : public UnaryPrimitive {
 public:
  explicit MaskedScatter(int batch = 0) : batch_(batch) {}
  void save(detail::Writer& w) const override { w.put(batch_); }
  bool supports_complex() const override { return true; }  // moves elements of any dtype
  void eval_cpu(const std::vector<array>& in, array& out) override {
    detail::copy_or_donate(in[0], out);
    if (out.size() == 0) return;
    array mask = kernels::row_contiguous(in[1]);
    array src = kernels::row_contiguous(in[2]);
    const bool* m = kernels::ptr<bool>(mask);
    const int64_t entries = detail::prod(out.shape(), 0, batch_);
    const int64_t n = static_cast<int64_t>(out.size()) / entries, ns = static_cast<int64_t>(src.size()) / entries;
    LOOM_DISPATCH_ITEMSIZE(out.itemsize(), T, {
      T* o0 = kernels::ptr<T>(out);
      const T* s0 = kernels::ptr<T>(src);
      kernels::parallel_for(
          static_cast<size_t>(entries),
          [&](size_t b, size_t e) {
            for (size_t r = b; r < e; ++r) {
              const bool* mr = m + r * n;
              int64_t count = 0;
              for (int64_t i = 0; i < n; ++i) count += mr[i] ? 1 : 0;
              if (count > ns) {
                throw std::runtime_error(msg("[masked_scatter] the mask selects ", count,
                                             " positions but src has only ", ns, " elements"));
              }
              T* o = o0 + r * n;
              const T* sr = s0 + r * ns;
              int64_t j = 0;
              for (int64_t i = 0; i < n; ++i) {
                if (mr[i]) o[i] = sr[j++];
              }
            }
          },
          std::max<size_t>(1, kernels::kParallelThreshold / std::max<int64_t>(n, 1)));
    });
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    const array& mask = p[1];
    const array& src = p[2];
    const array& c = cot[0];
    std::vector<array> out;
    for (int arg : argnums) {
      if (arg == 0) {
        out.push_back(where(mask, zeros_like(c), c));
      } else if (arg == 2 && src.size() == 0) {
        out.push_back(zeros_like(src));
      } else if (arg == 2) {
        // Masked position i of entry e took src element e * ns + (number of true entries before i).
        const int entries = static_cast<int>(detail::prod(mask.shape(), 0, batch_));
        const int ns = static_cast<int>(src.size()) / entries;
        array mf = reshape(mask, {entries, static_cast<int>(mask.size()) / entries});
        array pos = cumsum(astype(mf, int32), 1, false, false);
        pos = add(pos, reshape(multiply(arange(0, entries), array(ns)), {entries, 1}));
        pos = where(mf, pos, zeros_like(pos));
        array g = scatter_add_take(zeros({static_cast<int>(src.size())}, c.dtype()), flatten(pos),
                                   where(flatten(mf), flatten(c), zeros({1}, c.dtype())), 0);
        out.push_back(reshape(g, src.shape()));
      } else {
        out.push_back(zeros_like(p[arg]));
      }
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    // The inputs are already in the node's form (mask broadcast to a, src as rows).
    array ta = detail::tangent_or_zeros(p, t, argnums, 0);
    return {array(ta.shape(), ta.dtype(), std::make_shared<MaskedScatter>(batch_),
                  {ta, p[1], astype(detail::tangent_or_zeros(p, t, argnums, 2), ta.dtype())})};
  }
  // The batch leads all three inputs, one more independent axis.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    std::vector<array> x = detail::all_batch_first(in, axes);
    Shape shape = x[0].shape();
    return {{array(std::move(shape), outs[0].dtype(), std::make_shared<MaskedScatter>(batch_ + 1), std::move(x))}, {0}};
  }
  uint64_t donors(const std::vector<array>& in, int) const override {
    return listed_once(in, 0) ? row_contiguous_donors(in, {0}) : 0;
  }
  const char* name() const override { return "MaskedScatter"; }

 private:
  int batch_;
};
const bool kMaskedScatterLoads =
    detail::register_primitive("MaskedScatter", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      return std::make_shared<MaskedScatter>(r.get<int>());
    });

// ---- as_strided ----

class AsStrided : public UnaryPrimitive {
 public:
  bool supports_complex() const override { return true; }
  AsStrided(Shape shape, Strides strides, int64_t offset)
      : shape_(std::move(shape)), strides_(std::move(strides)), offset_(offset) {}
  void save(detail::Writer& w) const override { w.put(shape_, strides_, offset_); }
  // The input is 1-d (a flattened view): element i of the data is at i * stride of the input.
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& x = in[0];
    const int64_t s = x.ndim() == 1 ? x.strides()[0] : 1;
    Strides st(strides_.size());
    for (size_t i = 0; i < st.size(); ++i) st[i] = strides_[i] * s;
    size_t data_size;
    auto flags = array::layout_flags(out.shape(), st, &data_size);
    // (layout_flags calls a view contiguous only when no two of its positions share an element, leaving
    // broadcast axes aside, so overlapping windows stay strided views.)
    out.copy_shared_buffer(x, st, flags, data_size, out.size() == 0 ? 0 : offset_ * s);
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    const int n = static_cast<int>(p[0].size());
    array pos = as_strided(arange(n), shape_, strides_, static_cast<size_t>(offset_));
    return {reshape(scatter_add_take(zeros({n}, cot[0].dtype()), flatten(pos), flatten(cot[0]), 0), p[0].shape())};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    return {as_strided(t[0], shape_, strides_, static_cast<size_t>(offset_))};
  }
  // Entry b of the row-contiguous (B, n) batch starts n elements after entry b - 1: one more
  // leading axis of stride n over the flattened batch.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const array x = detail::batch_first(in[0], axes[0]);
    const int size = x.shape(0), n = x.shape(1);
    Shape shape = detail::insert_axis(shape_, 0, size);
    Strides strides = strides_;
    strides.insert(strides.begin(), n);
    auto prim = std::make_shared<AsStrided>(shape, std::move(strides), offset_);
    return {{array(std::move(shape), outs[0].dtype(), std::move(prim), {reshape(x, {size * n})})}, {0}};
  }
  const char* name() const override { return "AsStrided"; }
  bool makes_view() const override { return true; }

 private:
  Shape shape_;
  Strides strides_;
  int64_t offset_;
};
const bool kAsStridedLoads =
    detail::register_primitive("AsStrided", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      Shape shape;
      Strides strides;
      int64_t offset;
      r.get(shape, strides, offset);
      return std::make_shared<AsStrided>(std::move(shape), std::move(strides), offset);
    });

}  // namespace

array gather(const array& a, const std::vector<array>& indices, const std::vector<int>& axes_in,
             const Shape& slice_sizes, StreamOrDevice s) {
  OnStream on(s);
  std::vector<int> axes = axes_in;
  auto idx = check_index_arrays(a, indices, axes, "gather");
  const size_t nd = a.ndim();
  if (slice_sizes.size() != nd) {
    throw std::invalid_argument(msg("[gather] got ", slice_sizes.size(), " slice sizes ", shape_str(slice_sizes),
                                    " for the array of shape ", shape_str(a.shape()), "; it needs one per dimension"));
  }
  const int64_t n_idx = idx.empty() ? 1 : static_cast<int64_t>(idx[0].size());
  if (a.size() == 0) {
    if (n_idx != 0 && prod(slice_sizes, 0, nd) != 0) {
      throw std::invalid_argument(msg("[gather] the array of shape ", shape_str(a.shape()),
                                      " is empty, so the indices or the slice sizes ", shape_str(slice_sizes),
                                      " must be empty"));
    }
  } else {
    for (size_t d = 0; d < nd; ++d) {
      if (slice_sizes[d] < 0 || slice_sizes[d] > a.shape()[d]) {
        throw std::invalid_argument(msg("[gather] slice sizes ", shape_str(slice_sizes),
                                        " must lie in [0, a.shape[d]] for the array of shape ", shape_str(a.shape())));
      }
    }
  }
  Shape out = idx.empty() ? Shape{} : idx[0].shape();
  out.insert(out.end(), slice_sizes.begin(), slice_sizes.end());
  std::vector<array> inputs{a};
  inputs.insert(inputs.end(), idx.begin(), idx.end());
  return array(std::move(out), a.dtype(), std::make_shared<Gather>(std::move(axes), slice_sizes), std::move(inputs));
}

array gather(const array& a, const array& indices, int axis, const Shape& slice_sizes, StreamOrDevice s) {
  OnStream on(s);
  return gather(a, std::vector<array>{indices}, std::vector<int>{axis}, slice_sizes);
}

array scatter(const array& a, const std::vector<array>& indices, const array& updates, const std::vector<int>& axes,
              StreamOrDevice s) {
  OnStream on(s);
  return scatter_node(a, indices, updates, axes, Reduce::none, "scatter");
}
array scatter(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s) {
  OnStream on(s);
  return scatter(a, std::vector<array>{indices}, updates, std::vector<int>{axis});
}
array scatter_add(const array& a, const std::vector<array>& indices, const array& updates,
                  const std::vector<int>& axes, StreamOrDevice s) {
  OnStream on(s);
  return scatter_node(a, indices, updates, axes, Reduce::add, "scatter_add");
}
array scatter_add(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s) {
  OnStream on(s);
  return scatter_add(a, std::vector<array>{indices}, updates, std::vector<int>{axis});
}
array scatter_prod(const array& a, const std::vector<array>& indices, const array& updates,
                   const std::vector<int>& axes, StreamOrDevice s) {
  OnStream on(s);
  return scatter_node(a, indices, updates, axes, Reduce::prod, "scatter_prod");
}
array scatter_prod(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s) {
  OnStream on(s);
  return scatter_prod(a, std::vector<array>{indices}, updates, std::vector<int>{axis});
}
array scatter_max(const array& a, const std::vector<array>& indices, const array& updates,
                  const std::vector<int>& axes, StreamOrDevice s) {
  OnStream on(s);
  return scatter_node(a, indices, updates, axes, Reduce::max, "scatter_max");
}
array scatter_max(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s) {
  OnStream on(s);
  return scatter_max(a, std::vector<array>{indices}, updates, std::vector<int>{axis});
}
array scatter_min(const array& a, const std::vector<array>& indices, const array& updates,
                  const std::vector<int>& axes, StreamOrDevice s) {
  OnStream on(s);
  return scatter_node(a, indices, updates, axes, Reduce::min, "scatter_min");
}
array scatter_min(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s) {
  OnStream on(s);
  return scatter_min(a, std::vector<array>{indices}, updates, std::vector<int>{axis});
}

namespace {
// The k start positions of a dynamic slice as k 0-d index arrays, after checking `start` against `axes`.
std::vector<array> dynamic_starts(const array& start, const std::vector<int>& axes, const char* op) {
  if (start.ndim() > 1) {
    throw std::invalid_argument(msg("[", op, "] start of shape ", shape_str(start.shape()), " must be 0-d or 1-d"));
  }
  if (start.size() != axes.size()) {
    throw std::invalid_argument(msg("[", op, "] start of shape ", shape_str(start.shape()), " gives ", start.size(),
                                    " positions for ", axes.size(), " axes; they must match"));
  }
  detail::check_index_dtype(start, op);
  std::vector<array> idx;
  for (size_t j = 0; j < axes.size(); ++j) idx.push_back(reshape(slice(flatten(start), {int(j)}, {int(j) + 1}), {}));
  return idx;
}
}  // namespace

array detail::dynamic_slice(const array& a, const array& start, std::vector<int> axes, Shape slice_size,
                            StreamOrDevice s) {
  OnStream on(s);
  const int nd = static_cast<int>(a.ndim());
  if (static_cast<int>(slice_size.size()) != nd) {
    throw std::invalid_argument(msg("[slice] ", slice_size.size(), " slice sizes ", shape_str(slice_size),
                                    " for an array of ", nd, " dimensions"));
  }
  for (int d = 0; d < nd; ++d) {
    if (slice_size[d] < 0 || slice_size[d] > a.shape()[d]) {
      throw std::invalid_argument(msg("[slice] slice sizes ", shape_str(slice_size), " do not fit the array of shape ",
                                      shape_str(a.shape())));
    }
  }
  std::vector<int> seen;
  for (int& ax : axes) {
    ax = detail::normalize_axis(ax, nd, "slice");
    if (std::find(seen.begin(), seen.end(), ax) != seen.end()) {
      throw std::invalid_argument(msg("[slice] axis ", ax, " is repeated"));
    }
    seen.push_back(ax);
  }
  std::vector<array> idx = dynamic_starts(start, axes, "slice");
  // A gather with 0-d indices: its output is the block itself.
  return gather(a, idx, axes, slice_size);
}

array detail::dynamic_slice_update(const array& src, const array& update, const array& start, std::vector<int> axes,
                                   StreamOrDevice s) {
  OnStream on(s);
  const char* op = "slice_update";
  const int nd = static_cast<int>(src.ndim());
  std::vector<array> idx = dynamic_starts(start, axes, op);
  if (update.ndim() > src.ndim()) {
    throw std::invalid_argument(msg("[slice_update] the update of shape ", shape_str(update.shape()),
                                    " has more dimensions than the array of shape ", shape_str(src.shape())));
  }
  // MLX's block shape: src's leading dimensions where the update has none (1 along an indexed axis),
  // then the update's sizes, each at most src's.
  const int diff = nd - static_cast<int>(update.ndim());
  Shape up(src.shape().begin(), src.shape().begin() + diff);
  up.insert(up.end(), update.shape().begin(), update.shape().end());
  for (int d = diff; d < nd; ++d) up[d] = std::min(up[d], src.shape()[d]);
  for (int& ax : axes) {
    ax = detail::normalize_axis(ax, nd, op);
    if (ax < diff) up[ax] = 1;
  }
  array upd = astype(update, src.dtype());
  try {
    upd = broadcast_to(upd, up);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(msg("[slice_update] the update of shape ", shape_str(update.shape()),
                                    " does not fit the array of shape ", shape_str(src.shape())));
  }
  return scatter_node(src, idx, upd, std::move(axes), Reduce::none, op);
}

array masked_scatter(const array& a, const array& mask, const array& src, StreamOrDevice s) {
  OnStream on(s);
  if (mask.dtype() != bool_) {
    throw std::invalid_argument(msg("[masked_scatter] the mask must be bool; got ", mask.dtype()));
  }
  const size_t nd = a.ndim();
  if (mask.ndim() > nd || !std::equal(mask.shape().begin(), mask.shape().end(), a.shape().begin())) {
    throw std::invalid_argument(msg("[masked_scatter] the mask of shape ", shape_str(mask.shape()),
                                    " must match the leading dimensions of the array of shape ", shape_str(a.shape())));
  }
  const size_t rest = nd - mask.ndim();
  const Shape tail(a.shape().begin() + mask.ndim(), a.shape().end());
  if (src.ndim() > rest + 1) {
    throw std::invalid_argument(msg("[masked_scatter] src of shape ", shape_str(src.shape()), " has more than ",
                                    rest + 1, " dimensions (one plus the array's ", rest,
                                    " dimensions past the mask's)"));
  }
  // As MLX: src becomes rows shaped like a's trailing dimensions, broadcast where it has fewer.
  array v = astype(src, a.dtype());
  Shape vs;
  if (src.ndim() < rest + 1) {
    vs = Shape(rest + 1 - src.ndim(), 1);
    vs.insert(vs.end(), src.shape().begin(), src.shape().end());
    v = reshape(v, vs);
    vs[0] = static_cast<int>(mask.size());
  } else {
    vs = src.shape();
  }
  for (size_t i = 0; i < rest; ++i) vs[i + 1] = tail[i];
  try {
    v = broadcast_to(v, vs);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(msg("[masked_scatter] src of shape ", shape_str(src.shape()),
                                    " does not broadcast to rows of shape ", shape_str(tail)));
  }
  Shape ms = mask.shape();
  while (ms.size() < nd) ms.push_back(1);
  array m = broadcast_to(reshape(mask, ms), a.shape());
  return array(a.shape(), a.dtype(), std::make_shared<MaskedScatter>(), {a, m, v});
}

namespace {
std::string strides_str(const Strides& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
  return out + ")";
}
}  // namespace

array as_strided(const array& a, Shape shape, Strides strides, size_t offset, StreamOrDevice s) {
  OnStream on(s);
  if (shape.size() != strides.size()) {
    throw std::invalid_argument(msg("[as_strided] shape ", shape_str(shape), " has ", shape.size(),
                                    " dimensions but ", strides.size(), " strides are given"));
  }
  int64_t lo = 0, hi = 0, n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) {
      throw std::invalid_argument(msg("[as_strided] negative dimension in shape ", shape_str(shape)));
    }
    n *= shape[i];
    const int64_t reach = strides[i] * int64_t(std::max(shape[i] - 1, 0));
    (reach < 0 ? lo : hi) += reach;
  }
  const int64_t size = static_cast<int64_t>(a.size());
  if (n > 0 && (offset > static_cast<size_t>(INT64_MAX) || static_cast<int64_t>(offset) + lo < 0 ||
                static_cast<int64_t>(offset) + hi >= size)) {
    throw std::out_of_range(msg("[as_strided] shape ", shape_str(shape), " with strides ", strides_str(strides),
                                " and offset ", offset, " reaches elements ", static_cast<int64_t>(offset) + lo,
                                " to ", static_cast<int64_t>(offset) + hi, ", outside the ", size,
                                " elements of the array of shape ", shape_str(a.shape())));
  }
  Shape out = shape;
  return array(std::move(out), a.dtype(), std::make_shared<AsStrided>(std::move(shape), std::move(strides), int64_t(offset)),
               {flatten(a)});
}

}  // namespace loom
