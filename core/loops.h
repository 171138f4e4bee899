// Strided iteration shared by every CPU kernel (internal).
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "loom/core/array.h"
#include "loom/core/parallel.h"
#include "loom/core/threads.h"

/// Before a loop: its iterations do not depend on one another through memory (the output may be an
/// input's buffer, but only at the same index), so GCC may vectorize it without run-time alias
/// checks. Clang vectorizes these loops with its own checks; its assume_safety form would insist,
/// and warn on every loop it cannot vectorize for other reasons.
#if defined(__clang__)
#define LOOM_IVDEP
#else
#define LOOM_IVDEP _Pragma("GCC ivdep")
#endif

namespace loom::kernels {

/// A kernel's view of an evaluated array's first element.
template <typename T>
inline T* ptr(const array& a) {
  return static_cast<T*>(a.raw_data());
}

/// The one strided iterator: walks the row-major positions of the first `dims` axes of `shape` (all
/// of them by default; any number), tracking the element offset `off[k]` of each of N operands
/// (operand k has strides `strides[k]`). It starts at any linear position and moves by one
/// position (`next`), by any number of positions (`advance`), or, when walking the axes before a
/// row, by one row. Index arrays hold any rank (inline up to 6 axes, so no allocation below that).
/// Every kernel that visits a strided array position by position or row by row goes through it.
/// It keeps pointers to `shape`'s and the strides' elements: they must outlive it.
template <size_t N>
struct Walker {
  std::array<int64_t, N> off{};  // element offset of each operand at the current position

  Walker(const Shape& sh, const std::array<Strides, N>& st, int64_t start = 0, int dims = -1)
      : shape_(sh.data()), nd_(dims < 0 ? static_cast<int>(sh.size()) : dims), idx_(nd_, 0) {
    for (size_t k = 0; k < N; ++k) strides_[k] = st[k].data();
    seek(start);
  }
  /// One operand.
  template <size_t M = N, typename = std::enable_if_t<M == 1>>
  Walker(const Shape& sh, const Strides& st, int64_t start = 0, int dims = -1)
      : shape_(sh.data()), nd_(dims < 0 ? static_cast<int>(sh.size()) : dims), idx_(nd_, 0) {
    strides_[0] = st.data();
    seek(start);
  }

  /// Moves to linear position `pos` (row-major over the walked axes; wraps around past the end).
  /// Out of line, as the carries of `next`: one copy per N rather than one in every kernel.
  __attribute__((noinline)) void seek(int64_t pos) {
    off.fill(0);
    if (pos == 0) {
      for (int d = 0; d < nd_; ++d) idx_[d] = 0;
      return;
    }
    for (int d = nd_ - 1; d >= 0; --d) {
      if (shape_[d] == 0) break;
      idx_[d] = static_cast<int>(pos % shape_[d]);
      pos /= shape_[d];
      for (size_t k = 0; k < N; ++k) off[k] += int64_t(idx_[d]) * strides_[k][d];
    }
  }
  /// The next position (after the last one: back to the first).
  void next() {
    const int d = nd_ - 1;
    if (d < 0) return;
    for (size_t k = 0; k < N; ++k) off[k] += strides_[k][d];
    if (++idx_[d] < shape_[d]) return;
    carry(d);
  }
  /// `n` (>= 0) positions on: one carry per axis it crosses. Steps of up to one row (the fused
  /// gather's runs) divide nothing.
  void advance(int64_t n) {
    for (int d = nd_ - 1; d >= 0 && n > 0; --d) {
      const int64_t i = idx_[d] + n, s = shape_[d];
      int64_t q = 0, r = i;
      if (i >= s) {
        if (i < 2 * s) {
          q = 1, r = i - s;
        } else {
          q = i / s, r = i - q * s;
        }
      }
      for (size_t k = 0; k < N; ++k) off[k] += (r - idx_[d]) * strides_[k][d];
      idx_[d] = static_cast<int>(r);
      n = q;
    }
  }
  /// Axis d has just passed its end: back to 0, and one step along the axes before it.
  __attribute__((noinline)) void carry(int d) {
    for (; d >= 0; --d) {
      if (d < nd_ - 1) {
        for (size_t k = 0; k < N; ++k) off[k] += strides_[k][d];
        if (++idx_[d] < shape_[d]) return;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= strides_[k][d] * shape_[d];
      idx_[d] = 0;
    }
  }

  /// The index along walked axis d of the current position.
  int index(int d) const { return idx_[d]; }
  int ndim() const { return nd_; }

 private:
  const int* shape_;
  std::array<const int64_t*, N> strides_;
  int nd_;
  SmallVector<int, 6> idx_;
};

/// Work below this many elements stays on one thread.
inline constexpr size_t kParallelThreshold = 1 << 15;

/// The threads for `work` elements: 1 below the threshold and inside a task (nested loops run on
/// the thread that reached them).
inline int threads_for(size_t work, size_t threshold = kParallelThreshold) {
  return work >= threshold && !loom::detail::in_parallel() ? get_num_threads() : 1;
}

/// Merges adjacent dimensions that are contiguous in every operand, and drops size-1 dimensions.
template <size_t N>
void collapse(Shape& shape, std::array<Strides, N>& strides) {
  Shape s;
  std::array<Strides, N> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!s.empty()) {
      bool merge = true;
      for (size_t k = 0; k < N; ++k) merge &= st[k].back() == strides[k][d] * shape[d];
      if (merge) {
        s.back() *= shape[d];
        for (size_t k = 0; k < N; ++k) st[k].back() = strides[k][d];
        continue;
      }
    }
    s.push_back(shape[d]);
    for (size_t k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
  }
  if (s.empty()) {
    s.push_back(1);
    for (size_t k = 0; k < N; ++k) st[k].push_back(0);
  }
  shape = std::move(s);
  strides = std::move(st);
}

/// The row visitor of for_each_row: fn(ctx, offsets, n, inner_strides).
template <size_t N>
using RowFn = void (*)(void*, const std::array<int64_t, N>&, int, const std::array<int64_t, N>&);

/// for_each_row's traversal, one copy per operand count: a kernel's row body arrives through a
/// function pointer (one indirect call per row), so that each (op, dtype) instantiates only its row
/// loop and not the walk, the thread split and the tasks around it.
template <size_t N>
__attribute__((noinline)) void for_each_row_erased(const Shape& shape, const std::array<Strides, N>& strides,
                                                   RowFn<N> fn, void* ctx) {
  const int nd = static_cast<int>(shape.size());
  const int inner = shape[nd - 1];
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = strides[k][nd - 1];
  int64_t outer = 1;
  for (int d = 0; d < nd - 1; ++d) outer *= shape[d];
  auto run = [&](int64_t begin, int64_t end) {
    if (begin >= end) return;
    Walker<N> w(shape, strides, begin, nd - 1);  // over the axes before the row
    for (int64_t r = begin; r < end; ++r, w.next()) fn(ctx, w.off, inner, inner_strides);
  };
  const int nt = threads_for(static_cast<size_t>(outer) * inner);
  if (nt > 1 && outer > 1) {
    loom::detail::run_parts(static_cast<size_t>(outer), loom::detail::parts_for(outer, nt), nt,
                      [&](size_t b, size_t e) { run(int64_t(b), int64_t(e)); });
  } else if (nt > 1) {
    // One long row: split it.
    loom::detail::run_parts(static_cast<size_t>(inner), loom::detail::parts_for(inner, nt), nt, [&](size_t b, size_t e) {
      std::array<int64_t, N> off{};
      for (size_t k = 0; k < N; ++k) off[k] = int64_t(b) * inner_strides[k];
      fn(ctx, off, static_cast<int>(e - b), inner_strides);
    });
  } else {
    run(0, outer);
  }
}

/// Calls body(offsets, n, inner_strides) for each row of the innermost dimension of `shape`, where
/// offsets[k] is the element offset of operand k at the row's start. Rows are split across threads
/// when the total work is large. Dimensions should be collapsed first.
template <size_t N, typename Body>
void for_each_row(const Shape& shape, const std::array<Strides, N>& strides, Body body) {
  for_each_row_erased<N>(
      shape, strides,
      [](void* c, const std::array<int64_t, N>& o, int n, const std::array<int64_t, N>& s) {
        (*static_cast<Body*>(c))(o, n, s);
      },
      &body);
}

/// Calls body(begin, end) over [0, n), split across threads when n >= threshold.
template <typename Body>
void parallel_for(size_t n, Body body, size_t threshold = kParallelThreshold) {
  const int nt = threads_for(n, threshold);
  if (nt <= 1) {
    body(size_t(0), n);
    return;
  }
  loom::detail::run_parts(n, loom::detail::parts_for(static_cast<int64_t>(n), nt), nt, body);
}

}  // namespace loom::kernels
