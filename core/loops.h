// Strided iteration shared by every CPU kernel (internal).
#pragma once

#include <omp.h>

#include <array>
#include <cstdint>
#include <vector>

#include "loom/core/array.h"
#include "loom/core/threads.h"

namespace loom::kernels {

/// A kernel's view of an evaluated array's first element.
template <typename T>
inline T* ptr(const array& a) {
  return static_cast<T*>(a.raw_data());
}

/// Walks the row-major positions of `shape` from a starting linear index, tracking the element
/// offset of each of N operands (one strides vector each).
template <size_t N>
struct Walker {
  const Shape& shape;
  const std::array<Strides, N>& strides;
  std::vector<int> idx;
  std::array<int64_t, N> off{};

  Walker(const Shape& sh, const std::array<Strides, N>& st, int64_t start) : shape(sh), strides(st), idx(sh.size(), 0) {
    for (int d = static_cast<int>(sh.size()) - 1; d >= 0; --d) {
      if (sh[d] == 0) break;
      idx[d] = static_cast<int>(start % sh[d]);
      start /= sh[d];
      for (size_t k = 0; k < N; ++k) off[k] += int64_t(idx[d]) * st[k][d];
    }
  }
  void next() {
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
      if (++idx[d] < shape[d]) return;
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * shape[d];
      idx[d] = 0;
    }
  }
};

/// Work below this many elements stays on one thread.
inline constexpr size_t kParallelThreshold = 1 << 15;

inline int threads_for(size_t work) {
  return work >= kParallelThreshold ? get_num_threads() : 1;
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

/// Calls body(offsets, n, inner_strides) for each row of the innermost dimension of `shape`, where
/// offsets[k] is the element offset of operand k at the row's start. Rows are split across threads
/// when the total work is large. Dimensions should be collapsed first.
template <size_t N, typename Body>
void for_each_row(const Shape& shape, const std::array<Strides, N>& strides, Body body) {
  const int nd = static_cast<int>(shape.size());
  const int inner = shape[nd - 1];
  std::array<int64_t, N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = strides[k][nd - 1];
  int64_t outer = 1;
  for (int d = 0; d < nd - 1; ++d) outer *= shape[d];
  auto run = [&](int64_t begin, int64_t end) {
    if (begin >= end) return;
    std::vector<int> idx(std::max(nd - 1, 1), 0);
    std::array<int64_t, N> off{};
    int64_t rem = begin;
    for (int d = nd - 2; d >= 0; --d) {
      idx[d] = static_cast<int>(rem % shape[d]);
      rem /= shape[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx[d] * strides[k][d];
    }
    for (int64_t r = begin; r < end; ++r) {
      body(off, inner, inner_strides);
      for (int d = nd - 2; d >= 0; --d) {
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
        if (++idx[d] < shape[d]) break;
        for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * shape[d];
        idx[d] = 0;
      }
    }
  };
  int nt = threads_for(static_cast<size_t>(outer) * inner);
  if (nt > 1 && outer > 1) {
#pragma omp parallel num_threads(nt)
    {
      int t = omp_get_thread_num(), n = omp_get_num_threads();
      run(outer * t / n, outer * (t + 1) / n);
    }
  } else if (nt > 1) {
    // One long row: split it.
#pragma omp parallel num_threads(nt)
    {
      int t = omp_get_thread_num(), n = omp_get_num_threads();
      int64_t b = int64_t(inner) * t / n, e = int64_t(inner) * (t + 1) / n;
      std::array<int64_t, N> off{};
      for (size_t k = 0; k < N; ++k) off[k] = b * inner_strides[k];
      if (e > b) body(off, static_cast<int>(e - b), inner_strides);
    }
  } else {
    run(0, outer);
  }
}

/// Calls body(begin, end) over [0, n), split across threads when n is large.
template <typename Body>
void parallel_for(size_t n, Body body, size_t threshold = kParallelThreshold) {
  int nt = n >= threshold ? get_num_threads() : 1;
  if (nt <= 1) {
    body(size_t(0), n);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    size_t t = omp_get_thread_num(), k = omp_get_num_threads();
    size_t b = n * t / k, e = n * (t + 1) / k;
    if (e > b) body(b, e);
  }
}

}  // namespace loom::kernels
