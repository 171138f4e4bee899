// Gradient clipping by global norm (MLX's optim.clip_grad_norm).
#pragma once

#include <utility>

#include "loom/core/array.h"
#include "loom/nn/tree.h"

namespace loom::optim {

/// Scales the gradients so that their global L2 norm (over every array of the tree) is at most
/// `max_norm`: each g becomes g * max_norm / (norm + 1e-6) when norm >= max_norm, and stays as it
/// is otherwise. Returns the (lazy) clipped gradients and the norm before clipping, a scalar of
/// float32 (float64 when any gradient is float64; half-precision squares are summed in float32).
/// max_norm must be finite and >= 0.
std::pair<nn::ParamTree, array> clip_grad_norm(const nn::ParamTree& grads, double max_norm);

}  // namespace loom::optim
