// Convolution and pooling layers, channels-last as ops/conv.h: inputs are (N, L, C) for the 1-d
// layers, (N, H, W, C) for the 2-d ones and (N, D, H, W, C) for the 3-d ones.
#pragma once

#include <optional>
#include <tuple>
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

/// A per-axis size of a 3-d layer: one int for all three axes, or {depth, height, width}.
struct IntOrTriple {
  int first, second, third;
  IntOrTriple(int v) : first(v), second(v), third(v) {}  // NOLINT: implicit on purpose
  IntOrTriple(int a, int b, int c) : first(a), second(b), third(c) {}
  IntOrTriple(std::tuple<int, int, int> t)  // NOLINT
      : first(std::get<0>(t)), second(std::get<1>(t)), third(std::get<2>(t)) {}
  std::tuple<int, int, int> tuple() const { return {first, second, third}; }
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

/// 3-d convolution: (N, D, H, W, in_channels) -> (N, D_out, H_out, W_out, out_channels). As MLX's
/// nn.Conv3d (which has no groups): weight (out_channels, KD, KH, KW, in_channels), U(-k, k) with
/// k = 1/sqrt(in_channels * KD * KH * KW); the bias starts at zero.
struct Conv3d : Module {
  array weight;
  std::optional<array> bias;
  std::tuple<int, int, int> stride, padding, dilation;

  Conv3d(int in_channels, int out_channels, IntOrTriple kernel_size, IntOrTriple stride = 1, IntOrTriple padding = 0,
         IntOrTriple dilation = 1, bool bias = true);
  array operator()(const array& x) const;
};

// Transposed convolutions, as MLX's nn.ConvTranspose1d/2d/3d (no groups): (N, spatial..., in_channels)
// -> (N, spatial_out..., out_channels) with spatial_out = (S - 1) * stride - 2 * padding + dilation *
// (K - 1) + 1 + output_padding. The weight has MLX's layout (out_channels, kernel..., in_channels)
// (PyTorch's is (in, out, kernel...)) and starts as U(-k, k), k = 1/sqrt(in_channels * prod(kernel));
// the bias starts at zero (PyTorch draws both with fan-in out_channels * prod(kernel)). As PyTorch
// (MLX does not check), output_padding must be smaller than stride or dilation.

/// (N, L, in_channels) -> (N, L_out, out_channels).
struct ConvTranspose1d : Module {
  array weight;
  std::optional<array> bias;
  int stride, padding, dilation, output_padding;

  ConvTranspose1d(int in_channels, int out_channels, int kernel_size, int stride = 1, int padding = 0,
                  int dilation = 1, int output_padding = 0, bool bias = true);
  array operator()(const array& x) const;
};

/// (N, H, W, in_channels) -> (N, H_out, W_out, out_channels).
struct ConvTranspose2d : Module {
  array weight;
  std::optional<array> bias;
  std::pair<int, int> stride, padding, dilation, output_padding;

  ConvTranspose2d(int in_channels, int out_channels, IntOrPair kernel_size, IntOrPair stride = 1,
                  IntOrPair padding = 0, IntOrPair dilation = 1, IntOrPair output_padding = 0, bool bias = true);
  array operator()(const array& x) const;
};

/// (N, D, H, W, in_channels) -> (N, D_out, H_out, W_out, out_channels).
struct ConvTranspose3d : Module {
  array weight;
  std::optional<array> bias;
  std::tuple<int, int, int> stride, padding, dilation, output_padding;

  ConvTranspose3d(int in_channels, int out_channels, IntOrTriple kernel_size, IntOrTriple stride = 1,
                  IntOrTriple padding = 0, IntOrTriple dilation = 1, IntOrTriple output_padding = 0, bool bias = true);
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
