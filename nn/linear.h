// Affine layers, embeddings and the identity.
#pragma once

#include <optional>

#include "loom/nn/module.h"

namespace loom::nn {

/// Returns its input unchanged.
struct Identity : Module {
  array operator()(const array& x) const { return x; }
};

/// y = x W^T + b with W of shape (output_dims, input_dims); W and b start as U(-k, k), k = 1/sqrt(input_dims),
/// as in PyTorch and MLX.
struct Linear : Module {
  array weight;
  std::optional<array> bias;

  Linear(int input_dims, int output_dims, bool bias = true);
  array operator()(const array& x) const;
};

/// y[..., o] = sum_ij x1[..., i] W[o, j, i] x2[..., j] + b[o], with W of shape
/// (output_dims, input2_dims, input1_dims) as in MLX. x1 (..., input1_dims) and x2 (..., input2_dims)
/// must have the same leading axes. W and b start as U(-k, k), k = 1/sqrt(input1_dims) (MLX and PyTorch).
struct Bilinear : Module {
  array weight;
  std::optional<array> bias;

  Bilinear(int input1_dims, int input2_dims, int output_dims, bool bias = true);
  array operator()(const array& x1, const array& x2) const;
};

/// A lookup table: integer indices of any shape (values in [0, num_embeddings)) -> shape + (dims).
/// The weight (num_embeddings, dims) starts as N(0, 1/dims) as in MLX (PyTorch uses N(0, 1)).
struct Embedding : Module {
  array weight;

  Embedding(int num_embeddings, int dims);
  array operator()(const array& indices) const;
  /// x (..., dims) @ W^T: the embedding used as the output projection of a tied language model.
  array as_linear(const array& x) const;
};

}  // namespace loom::nn
