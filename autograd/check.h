// Finite-difference checking of vjp and jvp, used by the tests of every primitive.
#pragma once

#include <string>
#include <vector>

#include "loom/autograd/transforms.h"

namespace loom {

struct GradCheck {
  bool ok = true;
  std::string report;  // what disagreed, and by how much
};

/// Compares the vjp and jvp of `fun` at `primals` against central differences. Floating primals are
/// cast to float64 first. `argnums` lists the primals to check (default: every floating primal);
/// others (e.g. indices) stay fixed. Random cotangents and tangents come from a fixed seed.
GradCheck check_grads(const VectorFn& fun, const std::vector<array>& primals, const std::vector<int>& argnums = {},
                      double eps = 1e-6, double rtol = 1e-5, double atol = 1e-6);

}  // namespace loom
