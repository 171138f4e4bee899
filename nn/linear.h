// Affine layers.
#pragma once

#include <optional>

#include "loom/nn/module.h"

namespace loom::nn {

/// y = x W^T + b with W of shape (output_dims, input_dims); W and b start as U(-k, k), k = 1/sqrt(input_dims),
/// as in PyTorch and MLX.
struct Linear : Module {
  array weight;
  std::optional<array> bias;

  Linear(int input_dims, int output_dims, bool bias = true);
  array operator()(const array& x) const;
};

}  // namespace loom::nn
