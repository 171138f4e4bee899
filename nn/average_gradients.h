// Data-parallel gradient averaging as graph: bucketed all_mean nodes, evaluated by the step's eval.
#pragma once

#include <cstddef>
#include <optional>

#include "loom/distributed/distributed.h"
#include "loom/nn/tree.h"

namespace loom::nn {

/// The mean of `grads` over the processes of `group` (default: the world), as MLX's
/// nn.average_gradients. Gradients are packed into buckets of at most `all_reduce_size` bytes in
/// reverse order (the order the backward pass produces them; a bucket holds one dtype, and a
/// gradient larger than the limit is a bucket of its own); each bucket is one all_mean_flat of its
/// gradients (eval has their producers write straight into the bucket; gradients already evaluated
/// are copied in), split back to the original names and shapes as views. `all_reduce_size` <= 0
/// sends every gradient alone. With `communication_type` (float16 or bfloat16, say) buckets travel
/// in that dtype, summed, then are cast back and divided in one pass. On a group of size 1 the
/// gradients come back untouched. Nothing is communicated here: the collectives run in the next eval.
ParamTree average_gradients(const ParamTree& grads, std::ptrdiff_t all_reduce_size = 32 << 20,
                            std::optional<Dtype> communication_type = std::nullopt,
                            std::optional<distributed::Group> group = std::nullopt);

}  // namespace loom::nn
