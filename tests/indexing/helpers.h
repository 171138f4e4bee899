// Shared helpers for the indexing tests.
#pragma once

#include <vector>

#include "../test_utils.h"
#include "loom/ops/indexing.h"

namespace loom::testing {

/// 0, 1, 2, ... in `shape`, as `dtype`.
inline array iota(const Shape& shape, Dtype dtype = float32) {
  int n = 1;
  for (int s : shape) n *= s;
  return astype(reshape(arange(0, n), shape), dtype);
}

inline const std::vector<Dtype>& all_dtypes() {
  static const std::vector<Dtype> d{bool_, uint8, int32, int64, float16, bfloat16, float32, float64};
  return d;
}

inline const std::vector<Dtype>& index_dtypes() {
  static const std::vector<Dtype> d{uint8, int32, int64};
  return d;
}

}  // namespace loom::testing
