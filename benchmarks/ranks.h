// Helpers of the benchmarks that run under mpirun (sharded, pipeline, moe): memory of a tree of
// arrays and the largest value over the ranks.
#pragma once

#include <loom/loom.h>

namespace bench {

/// MB held by the arrays of `t` (an optimizer state's "step" counter left out).
inline double megabytes(const loom::nn::ParamTree& t) {
  double bytes = 0;
  for (const auto& [name, a] : t) {
    if (name != "step") bytes += static_cast<double>(a.nbytes());
  }
  return bytes / (1 << 20);
}

/// The largest of every rank's `v`.
inline double largest(double v, const loom::distributed::Group& g) {
  return loom::distributed::all_max(loom::array(v, loom::float64), g).item<double>();
}

}  // namespace bench
