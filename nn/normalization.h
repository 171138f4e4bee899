// Normalization layers. Features are on the last axis (channels-last). Statistics use the population
// variance (divide by n) and are computed in float32 (float64 for float64 inputs): float16/bfloat16
// inputs are cast up, so squares cannot overflow, and the output has the input's dtype (float32 for
// integer inputs). Affine parameters start as weight = 1, bias = 0 (MLX and PyTorch).
#pragma once

#include <optional>

#include "loom/nn/module.h"

namespace loom::nn {

/// (x - mean) / sqrt(var + eps) * weight + bias, with mean and var over the last axis (of size dims).
/// `affine` = false has no parameters; `bias` = false drops the bias (MLX's arguments).
struct LayerNorm : Module {
  std::optional<array> weight, bias;
  int dims;
  double eps;

  explicit LayerNorm(int dims, double eps = 1e-5, bool affine = true, bool bias = true);
  array operator()(const array& x) const;
};

/// x / sqrt(mean(x^2) + eps) * weight over the last axis (of size dims); weight starts at 1.
struct RMSNorm : Module {
  array weight;
  double eps;

  explicit RMSNorm(int dims, double eps = 1e-5);
  array operator()(const array& x) const;
};

/// Batch normalization of (N, ..., num_features) over every axis but the last.
/// Training mode normalizes with the batch's mean and (population) variance and, with
/// track_running_stats, updates the buffers running_mean (starts at 0) and running_var (starts at 1)
/// as running = (1 - momentum) * running + momentum * batch_stat (the update is lazy and carries no
/// gradient). running_var tracks the population variance of the batch, as in MLX (PyTorch tracks the
/// unbiased one). Evaluation mode normalizes with the running statistics, or with the batch's when
/// track_running_stats is false. Names: weight, bias (parameters), running_mean, running_var (buffers).
struct BatchNorm : Module {
  std::optional<array> weight, bias, running_mean, running_var;
  int num_features;
  double eps, momentum;

  explicit BatchNorm(int num_features, double eps = 1e-5, double momentum = 0.1, bool affine = true,
                     bool track_running_stats = true);
  /// Not const: in training mode it updates the running statistics.
  array operator()(const array& x);
};

/// Group normalization of (N, ..., dims): the channels are split into num_groups groups and each
/// sample's group is normalized over its channels and every spatial position. By default the groups
/// are MLX's (channel c belongs to group c % num_groups); pytorch_compatible = true uses PyTorch's
/// contiguous groups (group c / (dims / num_groups)). Then weight (1) and bias (0) per channel.
struct GroupNorm : Module {
  std::optional<array> weight, bias;
  int num_groups, dims;
  double eps;
  bool pytorch_compatible;

  GroupNorm(int num_groups, int dims, double eps = 1e-5, bool affine = true, bool pytorch_compatible = false);
  array operator()(const array& x) const;
};

}  // namespace loom::nn
