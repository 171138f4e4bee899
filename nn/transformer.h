// Attention, transformer encoder layers and positional encodings (as mlx.nn).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "loom/distributed/distributed.h"
#include "loom/nn/dropout.h"
#include "loom/nn/linear.h"
#include "loom/nn/module.h"
#include "loom/nn/normalization.h"

namespace loom::nn {

/// Multi-head attention as MLX's: queries (B, L, query_input_dims), keys (B, S, key_input_dims) and
/// values (B, S, value_input_dims) are projected by query_proj, key_proj (to dims) and value_proj (to
/// value_dims), split into num_heads heads, attended with softmax(q k^T / sqrt(head_dim) + mask) v,
/// and out_proj maps the concatenated heads (value_dims) to value_output_dims. The optional dims
/// default as in MLX: query/key_input_dims = dims, value_input_dims = key_input_dims, value_dims =
/// value_output_dims = dims. The projections are Linear layers (PyTorch/MLX init) without bias unless
/// `bias` (MLX's default is no bias).
///
/// The mask is additive (float; cast to the scores' dtype) or boolean (true = attend), and must
/// broadcast to (B, num_heads, L, S), e.g. (L, S) from create_additive_causal_mask(L).
struct MultiHeadAttention : Module {
  int num_heads;
  Linear query_proj, key_proj, value_proj, out_proj;

  MultiHeadAttention(int dims, int num_heads, std::optional<int> query_input_dims = std::nullopt,
                     std::optional<int> key_input_dims = std::nullopt,
                     std::optional<int> value_input_dims = std::nullopt, std::optional<int> value_dims = std::nullopt,
                     std::optional<int> value_output_dims = std::nullopt, bool bias = false);

  array operator()(const array& queries, const array& keys, const array& values,
                   const std::optional<array>& mask = std::nullopt) const;

  /// (N, N) additive mask: 0 where key j <= query i, the lowest finite value of `dtype` where j > i
  /// (MLX's finfo.min), so a position attends only to itself and earlier ones.
  static array create_additive_causal_mask(int N, Dtype dtype = float32);

  /// Splits the layer across `group` in place for tensor parallelism (Megatron-LM's split of attention;
  /// mlx-lm's model.shard(group)): rank r of N keeps heads r * H / N ... of the H heads, that is its
  /// rows of query/key/value_proj (and of their biases) and its columns of out_proj, and num_heads
  /// becomes H / N. The forward pass then sums the ranks' out_proj outputs (one all_sum; out_proj's
  /// bias is added once), so every rank computes the unsplit layer's output from the same inputs, and
  /// the gradients are those of the unsplit layer for the slices each rank holds (the convention of
  /// nn::AllToShardedLinear and nn::ShardedToAllLinear). Every rank must call the layer, with the same
  /// inputs; a mask with a heads axis must have this rank's heads. A Loom extension (MLX's layer has
  /// no such method). Throws std::invalid_argument when N does not divide num_heads or the layer is
  /// split already; a group of size 1 leaves the layer as it is.
  void shard(std::optional<distributed::Group> group = std::nullopt);
  /// The group the heads are split across (set by shard()).
  std::optional<distributed::Group> group;
};

/// One transformer encoder block as MLX's: self-attention and an MLP (linear1: dims -> mlp_dims,
/// activation, linear2: mlp_dims -> dims), each with a residual connection and a LayerNorm, and
/// dropout after the attention and after the activation. norm_first = true (pre-norm, MLX's default):
///     x = x + dropout1(attention(ln1(x))),  y = x + linear2(dropout2(act(linear1(ln2(x)))))
/// norm_first = false (post-norm, the original Transformer):
///     x = ln1(x + dropout1(attention(x))),  y = ln2(x + linear2(dropout2(act(linear1(x)))))
/// mlp_dims defaults to 4 * dims; the activation to nn::relu. Children: attention (no biases, as in
/// MLX), ln1, ln2, linear1, linear2, dropout1, dropout2, each initialised as that layer documents
/// (PyTorch/MLX uniform for the projections, ones/zeros for the norms).
struct TransformerEncoderLayer : Module {
  MultiHeadAttention attention;
  LayerNorm ln1, ln2;
  Linear linear1, linear2;
  Dropout dropout1, dropout2;
  std::function<array(const array&)> activation;
  bool norm_first;

  TransformerEncoderLayer(int dims, int num_heads, std::optional<int> mlp_dims = std::nullopt, double dropout = 0.0,
                          std::function<array(const array&)> activation = nullptr, bool norm_first = true);
  /// x (B, L, dims); mask as MultiHeadAttention's.
  array operator()(const array& x, const std::optional<array>& mask = std::nullopt) const;

  /// Splits the layer across `group` in place for tensor parallelism: the attention's heads as
  /// MultiHeadAttention::shard does, and the MLP by its hidden features (rank r keeps rows
  /// r * mlp_dims / N ... of linear1 and those columns of linear2; one all_sum after linear2). The
  /// norms stay whole on every rank. In training mode dropout2 draws the whole mask and applies this
  /// rank's columns of it, so a split model draws what the unsplit one draws. Same contract as
  /// MultiHeadAttention::shard; N must also divide mlp_dims.
  void shard(std::optional<distributed::Group> group = std::nullopt);
  /// The group the MLP is split across (set by shard()).
  std::optional<distributed::Group> group;
};

/// num_layers TransformerEncoderLayers ("layers.0", ...) followed by a final LayerNorm ("ln"), as MLX's
/// TransformerEncoder.
struct TransformerEncoder : Module {
  std::vector<std::unique_ptr<TransformerEncoderLayer>> layers;
  LayerNorm ln;

  TransformerEncoder(int num_layers, int dims, int num_heads, std::optional<int> mlp_dims = std::nullopt,
                     double dropout = 0.0, std::function<array(const array&)> activation = nullptr,
                     bool norm_first = true);
  array operator()(const array& x, const std::optional<array>& mask = std::nullopt) const;
  /// Splits every layer across `group` (TransformerEncoderLayer::shard); the final norm stays whole.
  void shard(std::optional<distributed::Group> group = std::nullopt);
};

/// Rotary positional encoding (RoFormer) of x (..., L, D) along the sequence axis -2: the first
/// `dims` features (dims even, dims <= D) are rotated in pairs by the angle
/// (offset + l) * scale * base^(-2i / dims) for position l and pair i; features past dims are unchanged.
/// The pairs are (i, i + dims/2) by default, or consecutive (2i, 2i + 1) with `traditional` (as MLX).
/// No parameters.
struct RoPE : Module {
  int dims;
  bool traditional;
  double base, scale;

  explicit RoPE(int dims, bool traditional = false, double base = 10000, double scale = 1.0);
  array operator()(const array& x, int offset = 0) const;
};

/// Sinusoidal embeddings of positions as MLX's: x (any shape, e.g. positions) -> x.shape + (dims), with
/// [sin(x * sigma_i), cos(x * sigma_i)] (cos first with `cos_first`) for dims/2 frequencies sigma_i
/// spaced geometrically from max_freq down to min_freq (times 2 pi with `full_turns`), all multiplied by
/// `scale` (default sqrt(2 / dims)). dims must be even and at least 4. No parameters.
struct SinusoidalPositionalEncoding : Module {
  array sigmas;  // (dims / 2) frequencies; a constant, not a parameter
  double scale;
  bool cos_first;

  explicit SinusoidalPositionalEncoding(int dims, double min_freq = 0.0001, double max_freq = 1.0,
                                        std::optional<double> scale = std::nullopt, bool cos_first = false,
                                        bool full_turns = false);
  array operator()(const array& x) const;
};

}  // namespace loom::nn
