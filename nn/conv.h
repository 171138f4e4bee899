// Convolution and pooling layers, channels-last as ops/conv.h: inputs are (N, L, C) for the 1-d
// layers and (N, H, W, C) for the 2-d ones.
#pragma once

#include <optional>
#include <utility>

#include "loom/nn/module.h"

namespace loom::nn {

/// A per-axis size of a 2-d layer: one int for both axes, or {height, width}.
struct IntOrPair {
  int first, second;
  IntOrPair(int v) : first(v), second(v) {}  // NOLINT: implicit on purpose
  IntOrPair(int a, int b) : first(a), second(b) {}
  IntOrPair(std::pair<int, int> p) : first(p.first), second(p.second) {}  // NOLINT
  std::pair<int, int> pair() const { return {first, second}; }
};

/// 1-d convolution: (N, L, in_channels) -> (N, L_out, out_channels). The weight has shape
/// (out_channels, kernel_size, in_channels / groups) and starts as U(-k, k) with
/// k = 1/sqrt(in_channels / groups * kernel_size) (MLX and PyTorch; for groups = 1 MLX's formula); the
/// bias starts at zero as in MLX (PyTorch draws it from the same uniform).
struct Conv1d : Module {
  array weight;
  std::optional<array> bias;
  int stride, padding, dilation, groups;

  Conv1d(int in_channels, int out_channels, int kernel_size, int stride = 1, int padding = 0, int dilation = 1,
         int groups = 1, bool bias = true);
  array operator()(const array& x) const;
};

/// 2-d convolution: (N, H, W, in_channels) -> (N, H_out, W_out, out_channels). The weight has shape
/// (out_channels, KH, KW, in_channels / groups) and starts as U(-k, k), k = 1/sqrt(in_channels / groups *
/// KH * KW) (MLX and PyTorch); the bias starts at zero as in MLX (PyTorch: the same uniform).
struct Conv2d : Module {
  array weight;
  std::optional<array> bias;
  std::pair<int, int> stride, padding, dilation;
  int groups;

  Conv2d(int in_channels, int out_channels, IntOrPair kernel_size, IntOrPair stride = 1, IntOrPair padding = 0,
         IntOrPair dilation = 1, int groups = 1, bool bias = true);
  array operator()(const array& x) const;
};

// ---- pooling (no parameters). The stride defaults to the kernel size, as in MLX and PyTorch; max
// pooling pads with -inf, average pooling with zeros (always dividing by the full window). ----

/// (N, L, C) -> (N, L_out, C).
struct MaxPool1d : Module {
  int kernel_size, stride, padding;
  explicit MaxPool1d(int kernel_size, std::optional<int> stride = std::nullopt, int padding = 0);
  array operator()(const array& x) const;
};
struct AvgPool1d : Module {
  int kernel_size, stride, padding;
  explicit AvgPool1d(int kernel_size, std::optional<int> stride = std::nullopt, int padding = 0);
  array operator()(const array& x) const;
};

/// (N, H, W, C) -> (N, H_out, W_out, C).
struct MaxPool2d : Module {
  std::pair<int, int> kernel_size, stride, padding;
  explicit MaxPool2d(IntOrPair kernel_size);
  MaxPool2d(IntOrPair kernel_size, IntOrPair stride, IntOrPair padding = 0);
  array operator()(const array& x) const;
};
struct AvgPool2d : Module {
  std::pair<int, int> kernel_size, stride, padding;
  explicit AvgPool2d(IntOrPair kernel_size);
  AvgPool2d(IntOrPair kernel_size, IntOrPair stride, IntOrPair padding = 0);
  array operator()(const array& x) const;
};

}  // namespace loom::nn
