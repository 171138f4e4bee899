// The row kernels of softmax and log_softmax over the last axis (internal): one pass per row
// forward (ops' Softmax, fast::softmax) and one backward (fast::softmax's), from the output.
#pragma once

#include <cmath>

#include "loom/kernels/fast_math.h"
#include "loom/kernels/rows.h"

namespace loom::kernels {

/// softmax (log_softmax when take_log) of each last-axis row of row-major x, into out.
template <typename T>
void softmax_rows(const array& x, array& out, bool take_log) {
  const int n = x.shape(-1);
  map_rows<T>(x, out, [&](const T* xr, T* yr) {
    // The composition's shift: the max (NaNs skipped; they make the sum NaN), 0 for a row of -inf.
    // A +inf entry stays the shift: it makes the row NaN, as in numpy, PyTorch and MLX.
    T m = detail::lane_max(xr, n);
    if (std::isinf(m) && m < 0) m = 0;
    if (take_log) {
      const T ls = std::log(detail::lane_sum<T>(n, [&](int j) { return detail::exp_of(xr[j] - m); }));
      for (int j = 0; j < n; ++j) yr[j] = (xr[j] - m) - ls;
    } else {
      const T s = detail::lane_sum<T>(n, [&](int j) { return yr[j] = detail::exp_of(xr[j] - m); });
      const T inv = T(1) / s;
      for (int j = 0; j < n; ++j) yr[j] *= inv;
    }
  });
}

/// The gradient from the output y and the cotangent g, row-major, into out.
/// softmax: dx = y (g - sum(g y)); log_softmax: dx = g - exp(y) sum(g).
template <typename T>
void softmax_backward_rows(const array& y, const array& g, array& out, bool take_log) {
  const int n = y.shape(-1);
  const size_t rows = y.size() / n;
  const T* yp = ptr<T>(y);
  const T* gp = ptr<T>(g);
  T* dp = ptr<T>(out);
  parallel_rows(rows, n, [&](size_t r) {
    const T* yr = yp + r * n;
    const T* gr = gp + r * n;
    T* d = dp + r * n;
    if (take_log) {
      const T s = detail::lane_sum<T>(n, [&](int j) { return gr[j]; });
      for (int j = 0; j < n; ++j) d[j] = gr[j] - detail::exp_of(yr[j]) * s;
    } else {
      const T s = detail::lane_sum<T>(n, [&](int j) { return gr[j] * yr[j]; });
      for (int j = 0; j < n; ++j) d[j] = yr[j] * (gr[j] - s);
    }
  });
}

}  // namespace loom::kernels
