// Graph utilities: ops that order or regroup nodes rather than compute new values, and the helper
// that primitives' forward-mode rules share.
#pragma once

#include <vector>

#include "loom/core/array.h"

namespace loom {

/// Arrays with the values of `inputs` that are only computed after every array of `dependencies`: a
/// scheduling edge (eval runs a node after all its inputs), as MLX's `depends`. Gradients pass to
/// `inputs` unchanged; `dependencies` get none. Throws std::invalid_argument when `inputs` is empty.
std::vector<array> depends(const std::vector<array>& inputs, const std::vector<array>& dependencies);

/// Consecutive parts of 1-D `a`, part k in shapes[k], as views of a's buffer made by one node: how a
/// flat bucket (distributed::all_sum_flat, nn::average_gradients) is split back into the arrays it
/// holds. The parts' sizes must add up to a.size() (std::invalid_argument otherwise).
std::vector<array> split_flat(const array& a, const std::vector<Shape>& shapes);

/// A tangent for every primal: tangents[i] for primals[argnums[i]], zeros for the others. For
/// jvp rules that pass all their inputs' tangents on (a concatenation's, a collective's).
std::vector<array> tangents_or_zeros(const std::vector<array>& primals, const std::vector<array>& tangents,
                                     const std::vector<int>& argnums);

}  // namespace loom
