// Helpers of the fused kernels that work row by row over the last axis (layer_norm, rms_norm,
// attention) (internal).
#pragma once


#include <algorithm>
#include <vector>

#include "loom/core/array.h"
#include "loom/core/threads.h"
#include "loom/kernels/elementwise.h"
#include "loom/core/loops.h"

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

/// body(xr, yr) for each row of the last axis of row-major `x` and `out` (of one shape): the row
/// loop of the fused forward kernels.
template <typename T, typename Body>
void map_rows(const array& x, array& out, Body body) {
  const int n = x.shape(-1);
  const T* xp = ptr<T>(x);
  T* yp = ptr<T>(out);
  parallel_rows(x.size() / n, n, [&](size_t r) { body(xp + r * n, yp + r * n); });
}

/// body(r0, r1, acc) over chunks of `rows` rows of `n` elements, where acc is the chunk's `width`
/// partial sums (zero at first); returns their totals, added in chunk order. The chunks depend on
/// the rows alone (one below the parallel threshold, else 2 to 16), so the sums do not depend on the
/// thread count or on which thread ran a chunk. The backward kernels' per-feature sums (a weight's
/// or a bias's gradient) use it.
template <typename T, typename Body>
std::vector<T> parallel_rows_summing(size_t rows, int n, size_t width, Body body) {
  const size_t threshold = rows_threshold(n);
  const size_t chunks = rows < threshold ? 1 : std::min<size_t>({16, rows, std::max<size_t>(2, 2 * rows / threshold)});
  std::vector<T> part(chunks * width, T(0));
  const int nt = chunks > 1 ? threads_for(rows, threshold) : 1;
  loom::detail::run_tasks(static_cast<int64_t>(chunks), nt, [&](int64_t c) {
    body(rows * size_t(c) / chunks, rows * size_t(c + 1) / chunks, part.data() + size_t(c) * width);
  });
  if (chunks == 1) return part;
  std::vector<T> total(width, T(0));
  for (size_t c = 0; c < chunks; ++c) {
    for (size_t j = 0; j < width; ++j) total[j] += part[c * width + j];
  }
  return total;
}

/// The outputs of a row kernel's backward: dx first (which may take the cotangent's or the input's
/// buffer: a row is read before it is written), then per-feature sums (a weight's or a bias's
/// gradient). False when there are no rows: the sums are then zero.
inline bool alloc_row_grads(std::vector<array>& outs) {
  outs[0].alloc();
  for (size_t i = 1; i < outs.size(); ++i) outs[i].alloc();
  if (outs[0].size() > 0) return true;
  for (size_t i = 1; i < outs.size(); ++i) std::fill_n(static_cast<char*>(outs[i].raw_data()), outs[i].nbytes(), 0);
  return false;
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
