// Gradient clipping by global norm (MLX's optim.clip_grad_norm).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/array.h"
#include "loom/distributed/distributed.h"
#include "loom/nn/tree.h"

namespace loom::optim {

/// Scales the gradients so that their global L2 norm (over every array of the tree) is at most
/// `max_norm`: each g becomes g * max_norm / (norm + 1e-6) when norm >= max_norm, and stays as it
/// is otherwise. Returns the (lazy) clipped gradients and the norm before clipping, a scalar of
/// float32 (float64 when any gradient is float64; half-precision squares are summed in float32).
/// max_norm must be finite and >= 0.
std::pair<nn::ParamTree, array> clip_grad_norm(const nn::ParamTree& grads, double max_norm);

/// clip_grad_norm of a model spread over the ranks of `group` (fully sharded, ZeRO-2, tensor
/// parallel, or one axis of a distributed::Mesh): the gradients named in `sharded` are this rank's
/// parts of larger ones (each rank holds other elements), every other gradient is the same on every
/// rank of the group. The norm is that of the whole model's gradient, each element counted once: the
/// squares of the sharded parts summed over the group (one all_sum of a scalar), plus the replicated
/// ones' squares. Every rank gets the same norm and the same scale. Throws std::invalid_argument
/// for a name in `sharded` that `grads` lacks, and as clip_grad_norm. On a group of size 1 it is
/// clip_grad_norm.
std::pair<nn::ParamTree, array> clip_grad_norm_sharded(const nn::ParamTree& grads, double max_norm,
                                                       const std::vector<std::string>& sharded,
                                                       std::optional<distributed::Group> group = std::nullopt);

}  // namespace loom::optim
