// Derivatives of a fused primitive taken from its reference composition (internal): a fused kernel
// computes fast, and its vjp / jvp differentiate the plain ops that define it, so higher-order
// derivatives work and the rules cannot drift from the definition.
#pragma once

#include <vector>

#include "loom/autograd/transforms.h"
#include "loom/ops/graph.h"
#include "loom/ops/ops.h"

namespace loom::detail {

/// The cotangents of the inputs in `argnums` of `ref` at `primals`.
template <typename F>
std::vector<array> reference_vjp(F ref, const std::vector<array>& primals, const std::vector<array>& cotangents,
                                 const std::vector<int>& argnums) {
  auto all = loom::vjp(ref, primals, cotangents).second;
  std::vector<array> out;
  for (int a : argnums) out.push_back(all[a]);
  return out;
}

/// The output tangents of `ref` at `primals`, given tangents for the inputs in `argnums` (others 0).
template <typename F>
std::vector<array> reference_jvp(F ref, const std::vector<array>& primals, const std::vector<array>& tangents,
                                 const std::vector<int>& argnums) {
  return loom::jvp(ref, primals, tangents_or_zeros(primals, tangents, argnums)).second;
}

}  // namespace loom::detail
