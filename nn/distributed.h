// Tensor-parallel layers, as mlx.nn's (python/mlx/nn/layers/distributed.py): a Linear whose weight is
// split among the ranks of a group, by output features (AllToShardedLinear: a replicated input gives
// each rank its slice of the output) or by input features (ShardedToAllLinear: sliced inputs give every
// rank the whole output, summed over the group). A pair of them splits an MLP (columns, then rows) or
// attention (heads, then the output projection) with one all_sum per pair in the forward pass and one in
// the backward.
//
// Gradients are those of the unsplit model: each rank gets the gradient of the (replicated) loss for
// the slice it holds, and the whole gradient of every replicated parameter, so any optimizer can update
// each rank's parameters on its own. This is MLX's convention for these layers; it is why they use
// sum_gradients and an all_sum whose vjp passes the cotangent through, rather than Loom's all_sum, whose
// vjp sums the cotangents of every rank's loss (the data-parallel convention, distributed.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/distributed/distributed.h"
#include "loom/nn/linear.h"
#include "loom/nn/module.h"
#include "loom/nn/quantized.h"

namespace loom::nn {

/// The identity whose vjp is the all_sum of the cotangent over `group` (MLX's sum_gradients): placed
/// where a replicated array fans out to ranks that each use it for their own slice of the work.
array sum_gradients(const array& x, std::optional<distributed::Group> group = std::nullopt);

/// How a weight is made of parts along the axis being sharded, each split among the ranks on its
/// own (a fused query/key/value projection is 3 parts: rank r holds the r-th slice of each).
class Segments {
 public:
  /// `count` equal parts (1: the weight is one part).
  Segments(int count = 1);  // NOLINT: an int converts, as MLX's `segments=3`
  /// Parts that end at these indices along the axis (mx.split's indices; the last part runs to the end).
  static Segments at(std::vector<int> indices);
  /// Parts that end at these fractions of the axis (each in (0, 1), increasing).
  static Segments fractions(std::vector<double> fractions);
  /// The boundaries for an axis of `n` elements: the start of every part but the first.
  std::vector<int> boundaries(int n, const char* op) const;

 private:
  int count_ = 1;
  std::vector<int> indices_;
  std::vector<double> fractions_;
};

/// A sharding rule: for a parameter's dotted path and array, the axis to split and its parts, or
/// nullopt to keep it whole on every rank.
using ShardingFn = std::function<std::optional<std::pair<int, Segments>>(const std::string& path, const array& weight)>;
/// MLX's two rules: "all-to-sharded" splits a weight's output axis (axis -2; a bias's only axis) and
/// "sharded-to-all" a weight's input axis (-1), keeping biases whole. Throws std::invalid_argument
/// naming any other string.
ShardingFn sharding_rule(const std::string& sharding, Segments segments = 1);

/// `params` with every array the rule selects replaced by this rank's slice: each part of the axis is
/// cut into group-size equal slices and the rank's slices of all parts are concatenated. Throws
/// std::invalid_argument naming the parameter when a part does not divide evenly.
ParamTree shard(const ParamTree& params, const ShardingFn& sharding,
                std::optional<distributed::Group> group = std::nullopt);

/// Replaces `module`'s parameters with this rank's slices (MLX's shard_inplace) and records each
/// split in the module (Module::splits, which optim::save_gathered_checkpoint reads). The module
/// computes as before, so it must communicate by itself for the result to mean anything
/// (shard_linear's layers do).
void shard_inplace(Module& module, const std::string& sharding, Segments segments = 1,
                   std::optional<distributed::Group> group = std::nullopt);
void shard_inplace(Module& module, const ShardingFn& sharding, std::optional<distributed::Group> group = std::nullopt);

/// x W^T + b with W and b this rank's slices of a weight split by output features (AllToShardedLinear's
/// computation): x is replicated, its gradient summed over the group.
array all_to_sharded_linear(const array& x, const array& weight, const std::optional<array>& bias,
                            std::optional<distributed::Group> group = std::nullopt);
/// all_sum(x_r W_r^T) + b with W_r this rank's slice of a weight split by input features and b whole
/// (ShardedToAllLinear's computation). For layers that keep plain Linear members and are split in place
/// (TransformerEncoderLayer::shard).
array sharded_to_all_linear(const array& x, const array& weight, const std::optional<array>& bias,
                            std::optional<distributed::Group> group = std::nullopt);

/// What the sharded Linear layers hold: this rank's slices of the weight and bias, and the group.
struct ShardedLinear : Module {
  array weight;
  std::optional<array> bias;
  distributed::Group group;

  struct Slices {
    array weight;
    std::optional<array> bias;
    distributed::Group group;
  };
  explicit ShardedLinear(Slices s);
};

/// y = x W_r^T + b_r: rank r holds rows r * O / N ... of W (O = output_dims, N = the group size) and
/// the same slice of b, and its output is that slice of the features. The input is replicated; its
/// gradient is summed over the group (sum_gradients). W and b start as the slices of a Linear's, drawn
/// whole on every rank: the layers of a model built alike on every rank make up the unsplit model.
struct AllToShardedLinear : ShardedLinear {
  AllToShardedLinear(int input_dims, int output_dims, bool bias = true,
                     std::optional<distributed::Group> group = std::nullopt);
  /// A layer holding this rank's slices as given: weight (output_dims / N, input_dims), bias (output_dims / N).
  explicit AllToShardedLinear(Slices s);
  array operator()(const array& x) const;
  /// This rank's slice of `linear` (draws no random numbers).
  static std::shared_ptr<AllToShardedLinear> from_linear(const Linear& linear, Segments segments = 1,
                                                         std::optional<distributed::Group> group = std::nullopt);
};

/// y = all_sum(x_r W_r^T) + b: rank r holds columns r * I / N ... of W (I = input_dims) and reads
/// that slice of the input features; every rank gets the whole output. b is whole on every rank.
struct ShardedToAllLinear : ShardedLinear {
  ShardedToAllLinear(int input_dims, int output_dims, bool bias = true,
                     std::optional<distributed::Group> group = std::nullopt);
  /// A layer holding this rank's slice of the weight (output_dims, input_dims / N) and the whole bias.
  explicit ShardedToAllLinear(Slices s);
  array operator()(const array& x) const;
  static std::shared_ptr<ShardedToAllLinear> from_linear(const Linear& linear, Segments segments = 1,
                                                         std::optional<distributed::Group> group = std::nullopt);
};

/// What the quantized sharded layers hold (QuantizedLinear's parameters, sliced, and the group). Every
/// parameter is frozen, the bias too (MLX's).
struct QuantizedShardedLinear : Module {
  array weight, scales;
  std::optional<array> biases;
  std::optional<array> bias;
  int group_size, bits;
  std::string mode;
  distributed::Group group;

  struct Slices {
    array weight, scales;
    std::optional<array> biases, bias;
    int group_size, bits;
    std::string mode;
    distributed::Group group;
  };
  explicit QuantizedShardedLinear(Slices s);
  /// Input features of this rank's slice of the weight.
  int input_dims() const;
};

/// AllToShardedLinear with a quantized weight.
struct QuantizedAllToShardedLinear : QuantizedShardedLinear {
  QuantizedAllToShardedLinear(int input_dims, int output_dims, bool bias = true,
                              std::optional<int> group_size = std::nullopt, std::optional<int> bits = std::nullopt,
                              const std::string& mode = "affine",
                              std::optional<distributed::Group> group = std::nullopt);
  explicit QuantizedAllToShardedLinear(Slices s);
  array operator()(const array& x) const;
  static std::shared_ptr<QuantizedAllToShardedLinear> from_quantized_linear(
      const QuantizedLinear& linear, Segments segments = 1, std::optional<distributed::Group> group = std::nullopt);
};

/// ShardedToAllLinear with a quantized weight. Each rank's input features must be a whole number of
/// quantization groups.
struct QuantizedShardedToAllLinear : QuantizedShardedLinear {
  QuantizedShardedToAllLinear(int input_dims, int output_dims, bool bias = true,
                              std::optional<int> group_size = std::nullopt, std::optional<int> bits = std::nullopt,
                              const std::string& mode = "affine",
                              std::optional<distributed::Group> group = std::nullopt);
  explicit QuantizedShardedToAllLinear(Slices s);
  array operator()(const array& x) const;
  static std::shared_ptr<QuantizedShardedToAllLinear> from_quantized_linear(
      const QuantizedLinear& linear, Segments segments = 1, std::optional<distributed::Group> group = std::nullopt);
};

/// Fully sharded data parallelism (MLX's fully_shard / FullyShardedModule): each rank keeps only its
/// slice, along axis 0, of every parameter of `module` (not its buffers, and not the parameters of a
/// submodule that has a FullyShardedModule of its own), so an optimizer updating the module updates
/// the slices and keeps state for them alone. Calling the module through the handle,
///
///     auto fs = nn::fully_shard(model);                       // model's parameters become slices
///     auto step = nn::value_and_grad(model, [&](const array& x, const array& y) {
///       return fs([&] { return loss(model(x), y); });         // full parameters inside
///     });
///     auto [l, grads] = step(x, y);                           // grads: this rank's slices
///     opt.update(model, grads);                               // no average_gradients
///
/// puts the full parameters in place for the call (one all_gather per dtype; cast to `compute_dtype`
/// when given) and the slices back afterwards. In the backward pass the gradients are
/// reduce-scattered and divided by the group size: each rank gets its slice of the gradient averaged
/// over the ranks, as nn::average_gradients would give. Wrapping each layer by itself gathers layer
/// by layer, and eval starts each layer's all_gather as early as the graph allows. Every parameter's
/// axis 0 must split evenly among the ranks (std::invalid_argument naming it otherwise). On a group of
/// size 1 nothing is sharded and the call runs `fn` as it is (MLX's fully_shard returns the module).
///
/// Unlike MLX's, the handle does not stand in for the module (a C++ call cannot be intercepted): call
/// the module inside the handle's operator().
class FullyShardedModule {
 public:
  FullyShardedModule(Module& module, std::optional<distributed::Group> group = std::nullopt,
                     std::optional<Dtype> compute_dtype = std::nullopt);
  ~FullyShardedModule();
  FullyShardedModule(const FullyShardedModule&) = delete;
  FullyShardedModule& operator=(const FullyShardedModule&) = delete;

  /// fn() with the full parameters in place.
  template <class Fn>
  auto operator()(Fn&& fn) const {
    if (paths_.empty()) return fn();
    Gathered scope(*this, slices());
    return fn();
  }

  using Fn = std::function<std::vector<array>(const std::vector<array>&)>;
  /// fn(inputs) with the full parameters in place, holding them (and fn's intermediates) only while
  /// the forward pass runs the call: the backward pass gathers them again and recomputes fn before
  /// differentiating it (PyTorch FSDP's reshard_after_forward, with activation checkpointing). A
  /// model whose blocks are each called this way holds at most two blocks' full parameters at a time:
  /// a block's all_gather waits until the previous checkpointed call's inputs are ready, so it runs
  /// while that block computes, and in the backward pass until the later block's cotangents are (one
  /// block of prefetch each way). Costs one more forward pass of fn and one more all_gather per step.
  /// fn must be a function of `inputs` and the module's parameters alone, computing the same every
  /// time (random draws inside it differ on recomputation). On a group of size 1 it is fn(inputs).
  /// The handle must outlive the evaluation of the backward pass.
  std::vector<array> checkpoint(const Fn& fn, const std::vector<array>& inputs) const;
  Module& module() const { return module_; }
  /// The sharded parameters' paths within the module.
  const std::vector<std::string>& paths() const { return paths_; }
  const distributed::Group& group() const { return group_; }

 private:
  struct Gathered {  // installs the full parameters gathered from `slices`; puts back what was there
    Gathered(const FullyShardedModule& f, const std::vector<array>& slices);
    ~Gathered();
    const FullyShardedModule& fs;
    ParamTree previous;
  };
  std::vector<array> slices() const;  // this rank's slices, in paths() order
  Module& module_;
  distributed::Group group_;
  std::optional<Dtype> compute_dtype_;
  std::vector<std::string> paths_;
  std::vector<Shape> full_shapes_;
};

/// A FullyShardedModule of `module` (MLX's fully_shard).
std::shared_ptr<FullyShardedModule> fully_shard(Module& module, std::optional<distributed::Group> group = std::nullopt,
                                                std::optional<Dtype> compute_dtype = std::nullopt);

/// The sharded copy of a Linear or QuantizedLinear (MLX's shard_linear): "all-to-sharded" or
/// "sharded-to-all". Throws std::invalid_argument for another module or sharding.
std::shared_ptr<Module> shard_linear(const Module& linear, const std::string& sharding, Segments segments = 1,
                                     std::optional<distributed::Group> group = std::nullopt);

}  // namespace loom::nn
