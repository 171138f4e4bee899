// Helpers shared by the indexing and sorting kernels (internal).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "loom/core/array.h"
#include "loom/core/primitive.h"
#include "loom/kernels/elementwise.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::detail {

inline int64_t prod(const Shape& shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t d = begin; d < end; ++d) p *= shape[d];
  return p;
}

using kernels::Walker;

/// True when the dims [begin, end) of (shape, strides) are laid out densely in row-major order
/// (stride 1 innermost), ignoring size-1 dims.
inline bool dense_block(const Shape& shape, const Strides& strides, size_t begin, size_t end) {
  int64_t expect = 1;
  for (size_t d = end; d-- > begin;) {
    if (shape[d] == 1) continue;
    if (strides[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

/// Element offsets, under `strides`, of the row-major positions of dims [begin, end) of `shape`.
inline std::vector<int64_t> block_offsets(const Shape& shape, const Strides& strides, size_t begin, size_t end) {
  Shape sh(shape.begin() + begin, shape.begin() + end);
  std::array<Strides, 1> st{Strides(strides.begin() + begin, strides.begin() + end)};
  int64_t n = prod(sh, 0, sh.size());
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (n == 0) return out;
  Walker<1> w(sh, st, 0);
  for (int64_t i = 0; i < n; ++i, w.next()) out[i] = w.off[0];
  return out;
}

/// Throws std::invalid_argument unless `indices` has an integer dtype.
inline void check_index_dtype(const array& indices, const char* op) {
  if (!is_integral(indices.dtype())) {
    throw std::invalid_argument(msg("[", op, "] indices must have an integer dtype; got ",
                                    indices.dtype(), " indices of shape ", shape_str(indices.shape())));
  }
}

/// The indices in row-major order as int64, negative ones counted from the end of an axis of size n.
/// Throws std::out_of_range (data-dependent: the only eval-time error of these ops) for an index
/// outside [-n, n).
inline std::vector<int64_t> load_indices(const array& indices, int n, int axis, const char* op) {
  std::vector<int64_t> v(indices.size());
  if (v.empty()) return v;
  kernels::copy_strided(indices, v.data(), int64, kernels::row_major_strides(indices.shape()));
  for (auto& x : v) {
    int64_t y = x < 0 ? x + n : x;
    if (y < 0 || y >= n) {
      throw std::out_of_range(msg("[", op, "] index ", x, " is out of bounds for axis ", axis, " of size ", n));
    }
    x = y;
  }
  return v;
}

/// Gives `out` (of a's shape and dtype) a row-contiguous copy of `a`: a's own buffer when eval donated it
/// (see the scatters' donors).
inline void copy_or_donate(const array& a, array& out) {
  out.alloc();
  kernels::copy_into(a, out);
}

/// Runs f(p0, p1, q0, q1) over the P x Q grid of independent (outer, inner) positions, split across
/// threads along P or Q when `work` is large. Each call owns its positions alone, so scatters whose
/// collisions only happen along a third (sequential) dimension are race-free.
template <typename F>
void split_outer_inner(int64_t P, int64_t Q, size_t work, F f) {
  int nt = kernels::threads_for(work);
  if (nt <= 1 || (P <= 1 && Q <= 1)) {
    f(int64_t(0), P, int64_t(0), Q);
  } else if (P >= nt || P >= Q) {
    kernels::parallel_for(static_cast<size_t>(P), [&](size_t b, size_t e) { f(int64_t(b), int64_t(e), int64_t(0), Q); }, 1);
  } else {
    kernels::parallel_for(static_cast<size_t>(Q), [&](size_t b, size_t e) { f(int64_t(0), P, int64_t(b), int64_t(e)); }, 1);
  }
}

/// The tangent given for input `which`, or zeros like that primal.
inline array tangent_or_zeros(const std::vector<array>& primals, const std::vector<array>& tangents,
                              const std::vector<int>& argnums, int which) {
  for (size_t i = 0; i < argnums.size(); ++i) {
    if (argnums[i] == which) return tangents[i];
  }
  return zeros_like(primals[which]);
}

inline bool has_arg(const std::vector<int>& argnums, int which) {
  for (int a : argnums) {
    if (a == which) return true;
  }
  return false;
}

}  // namespace loom::detail
