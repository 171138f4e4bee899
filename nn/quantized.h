// Quantized layers, as mlx.nn's (python/mlx/nn/layers/quantized.py): a Linear and an Embedding
// whose weight is stored by ops/quantized.h's quantize (packed uint32 codes, scales and, for
// "affine", biases), and nn::quantize to turn a model's Linear / Embedding layers into them.
//
// Parameters are named as MLX's: "weight" (uint32), "scales", "biases" (affine only) and "bias". As in
// MLX a layer built by its constructor is frozen entirely (trainable_parameters() is empty), and
// from_linear's bias, copied from the float layer, stays trainable.
//
// Deliberate difference from MLX: MLX's nn.quantize swaps the layers of a Python model in place. A
// C++ member cannot change its type, so here nn::quantize returns the parameter tree of the quantized
// model instead: load it with update() into a model declared with QuantizedLinear / QuantizedEmbedding
// in those places (for models built from shared_ptr layers, nn::to_quantized gives the layer).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "loom/nn/linear.h"
#include "loom/nn/module.h"

namespace loom::nn {

/// y = quantized_matmul(x, weight, scales, biases) + bias: nn::Linear with a quantized weight of
/// (output_dims, input_dims). The weight starts as Linear's, U(-k, k) with k = 1/sqrt(input_dims),
/// quantized; the bias starts at zero (MLX).
struct QuantizedLinear : Module {
  array weight, scales;
  std::optional<array> biases;
  std::optional<array> bias;
  int group_size, bits;
  std::string mode;

  QuantizedLinear(int input_dims, int output_dims, bool bias = true, std::optional<int> group_size = std::nullopt,
                  std::optional<int> bits = std::nullopt, const std::string& mode = "affine");
  array operator()(const array& x) const;
  /// The quantized copy of a Linear (its bias shared, trainable).
  static std::shared_ptr<QuantizedLinear> from_linear(const Linear& linear, std::optional<int> group_size = std::nullopt,
                                                      std::optional<int> bits = std::nullopt,
                                                      const std::string& mode = "affine");
  int input_dims() const;
  int output_dims() const { return weight.shape(0); }
};

/// nn::Embedding with a quantized (num_embeddings, dims) table: the rows of the given indices,
/// dequantized. The table starts as Embedding's, N(0, 1/dims), quantized.
struct QuantizedEmbedding : Module {
  array weight, scales;
  std::optional<array> biases;
  int group_size, bits;
  std::string mode;

  QuantizedEmbedding(int num_embeddings, int dims, std::optional<int> group_size = std::nullopt,
                     std::optional<int> bits = std::nullopt, const std::string& mode = "affine");
  array operator()(const array& indices) const;
  /// x (..., dims) @ W^T as a quantized matmul (tied input and output embeddings).
  array as_linear(const array& x) const;
  static std::shared_ptr<QuantizedEmbedding> from_embedding(const Embedding& embedding,
                                                            std::optional<int> group_size = std::nullopt,
                                                            std::optional<int> bits = std::nullopt,
                                                            const std::string& mode = "affine");
};

/// The group size and bits of `mode` where not given (MLX's: affine 64 / 4, mxfp4 32 / 4, nvfp4 16 / 4,
/// mxfp8 32 / 8); throws std::invalid_argument naming `op` for an unknown mode.
std::pair<int, int> quantization_defaults(const std::string& mode, std::optional<int> group_size,
                                          std::optional<int> bits, const char* op);

/// Decides which layers nn::quantize converts: called with each module's dotted path and the module.
using QuantizePredicate = std::function<bool(const std::string& path, const Module& module)>;

/// The quantized layer for a Linear or an Embedding (MLX's to_quantized); throws std::invalid_argument
/// for other modules.
std::shared_ptr<Module> to_quantized(const Module& layer, std::optional<int> group_size = std::nullopt,
                                     std::optional<int> bits = std::nullopt, const std::string& mode = "affine");

/// The parameters of `model` with every Linear and Embedding the predicate accepts (default: all of
/// them) quantized: "path.weight" becomes the packed codes and "path.scales" (and "path.biases" for
/// affine) follow it; everything else is passed through. See the header comment for how this
/// differs from MLX's in-place nn.quantize.
ParamTree quantize(Module& model, std::optional<int> group_size = std::nullopt, std::optional<int> bits = std::nullopt,
                   const std::string& mode = "affine", const QuantizePredicate& class_predicate = nullptr);

}  // namespace loom::nn
