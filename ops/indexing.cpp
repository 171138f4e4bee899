// Gathers and scatters along an axis: take, take_along_axis, put_along_axis, scatter_add_axis and
// scatter_add_take, each a primitive with its CPU kernel, vjp and jvp side by side.
#include "loom/ops/indexing.h"

#include <algorithm>
#include <cstring>

#include "loom/core/primitive.h"
#include "loom/ops/indexing_utils.h"
#include "loom/ops/kernels/elementwise.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::prod;
using detail::shape_str;

namespace {

// Runs the block with NAME bound to an unsigned type of the array's item size: copies need no
// arithmetic, so four instantiations serve all eight dtypes.
#define LOOM_DISPATCH_ITEMSIZE(size, NAME, ...)   \
  switch (size) {                                 \
    case 1: {                                     \
      using NAME = uint8_t;                       \
      __VA_ARGS__;                                \
      break;                                      \
    }                                             \
    case 2: {                                     \
      using NAME = uint16_t;                      \
      __VA_ARGS__;                                \
      break;                                      \
    }                                             \
    case 4: {                                     \
      using NAME = uint32_t;                      \
      __VA_ARGS__;                                \
      break;                                      \
    }                                             \
    default: {                                    \
      using NAME = uint64_t;                      \
      __VA_ARGS__;                                \
      break;                                      \
    }                                             \
  }

Shape take_shape(const Shape& a, const Shape& idx, int axis) {
  Shape out(a.begin(), a.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), a.begin() + axis + 1, a.end());
  return out;
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
  explicit Take(int axis) : axis_(axis) {}
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
  const char* name() const override { return "Take"; }

 private:
  int axis_;
};

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
  explicit TakeAlongAxis(int axis) : axis_(axis) {}
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
  const char* name() const override { return "TakeAlongAxis"; }

 private:
  int axis_;
};

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
  const char* name() const override { return "ScatterAddTake"; }

 private:
  int axis_;
};

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

array take(const array& a, const array& indices, int axis) {
  detail::check_index_dtype(indices, "take");
  const int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "take");
  if (a.shape()[ax] == 0 && indices.size() > 0) {
    throw std::invalid_argument(msg("[take] cannot take ", indices.size(), " indices from axis ", ax,
                                    " of size 0 of the array of shape ", shape_str(a.shape())));
  }
  return array(take_shape(a.shape(), indices.shape(), ax), a.dtype(), std::make_shared<Take>(ax), {a, indices});
}

array take(const array& a, const array& indices) {
  detail::check_index_dtype(indices, "take");
  return take(flatten(a), indices, 0);
}

array take(const array& a, int index, int axis) {
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

array take(const array& a, int index) { return take(flatten(a), index, 0); }

array take_along_axis(const array& a, const array& indices, int axis) {
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

array put_along_axis(const array& a, const array& indices, const array& values, int axis) {
  return scatter_axis(a, indices, values, axis, ScatterMode::put);
}

array scatter_add_axis(const array& a, const array& indices, const array& values, int axis) {
  return scatter_axis(a, indices, values, axis, ScatterMode::add);
}

array scatter_add_take(const array& a, const array& indices, const array& updates, int axis) {
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

}  // namespace loom
