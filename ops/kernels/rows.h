// Helpers of the fused kernels that work row by row over the last axis (layer_norm, rms_norm,
// attention) (internal).
#pragma once

#include <algorithm>

#include "loom/core/array.h"
#include "loom/ops/kernels/elementwise.h"
#include "loom/ops/kernels/loops.h"

namespace loom::kernels {

/// `a` itself when row-contiguous, else a row-contiguous copy.
inline array row_major(const array& a) { return a.flags().row_contiguous ? a : row_contiguous(a); }

/// How many rows of `n` elements make enough work to split over threads.
inline size_t rows_threshold(int n) { return std::max<size_t>(1, kParallelThreshold / std::max(n, 1)); }

/// body(r) for each of `rows` rows of `n` elements, split over threads when there is enough work.
template <typename Body>
void parallel_rows(size_t rows, int n, Body body) {
  parallel_for(
      rows, [&](size_t r0, size_t r1) {
        for (size_t r = r0; r < r1; ++r) body(r);
      },
      rows_threshold(n));
}

/// Calls f(float{}) for float32 and f(double{}) otherwise (these kernels compute in one of the two).
template <typename F>
void dispatch_real(Dtype d, F f) {
  if (d == float32) {
    f(float{});
  } else {
    f(double{});
  }
}

}  // namespace loom::kernels
