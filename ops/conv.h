// Convolutions and pooling, channels-last as in MLX: inputs are (N, spatial..., C), conv weights are
// (C_out, kernel spatial..., C_in / groups). Every op validates its arguments and records a node.
//
// Convolutions run as im2col + BLAS GEMM (float32/float64; float16/bfloat16 compute in float32).
// Their gradients are two more roles of the same primitive: the input gradient (a transposed
// convolution: GEMM with the weight, then col2im) and the weight gradient (GEMM of the cotangent with
// the im2col matrix). The three roles are the partial contractions of one trilinear form, so each
// one's vjp/jvp is built from the three: gradients of any order work.
#pragma once

#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/core/array.h"

namespace loom {

/// Cross-correlation over `input.ndim() - 2` spatial dimensions.
/// input (N, S_1..S_D, C_in), weight (C_out, K_1..K_D, C_in / groups) -> (N, O_1..O_D, C_out) with
/// O_d = ((S_d - 1) * input_dilation_d + 1 + padding_lo_d + padding_hi_d - ((K_d - 1) * kernel_dilation_d + 1))
///       / stride_d + 1.
/// Each per-dimension list may be empty (default: stride 1, padding 0, dilation 1; an empty
/// padding_hi copies padding_lo, as in MLX), hold one value (used for every dimension) or one value
/// per spatial dimension. `input_dilation` inserts (input_dilation - 1) zeros between input elements;
/// `flip` reverses the kernel's spatial axes (a true convolution instead of a cross-correlation).
/// Both dtypes must be floating point; the result has their promoted dtype.
array conv_general(const array& input, const array& weight, std::vector<int> stride = {},
                   std::vector<int> padding_lo = {}, std::vector<int> padding_hi = {},
                   std::vector<int> kernel_dilation = {}, std::vector<int> input_dilation = {}, int groups = 1,
                   bool flip = false, StreamOrDevice s = {});

/// input (N, L, C_in), weight (C_out, K, C_in / groups) -> (N, L_out, C_out); padding on both sides.
array conv1d(const array& input, const array& weight, int stride = 1, int padding = 0, int dilation = 1,
             int groups = 1, StreamOrDevice s = {});

/// input (N, H, W, C_in), weight (C_out, KH, KW, C_in / groups) -> (N, H_out, W_out, C_out).
array conv2d(const array& input, const array& weight, const std::pair<int, int>& stride = {1, 1},
             const std::pair<int, int>& padding = {0, 0}, const std::pair<int, int>& dilation = {1, 1},
             int groups = 1, StreamOrDevice s = {});

/// input (N, D, H, W, C_in), weight (C_out, KD, KH, KW, C_in / groups) -> (N, D_out, H_out, W_out, C_out).
/// groups > 1 is allowed (MLX's conv_general rejects groups with 3 spatial dimensions).
array conv3d(const array& input, const array& weight, const std::tuple<int, int, int>& stride = {1, 1, 1},
             const std::tuple<int, int, int>& padding = {0, 0, 0}, const std::tuple<int, int, int>& dilation = {1, 1, 1},
             int groups = 1, StreamOrDevice s = {});

// Transposed convolutions (MLX's; the adjoint of the convolution with respect to its input). The
// weight is laid out as a convolution's, (C_out, kernel..., C_in / groups), with C_in the channels of
// `input` (PyTorch's weight (C_in, C_out / groups, kernel...) is w_torch[g * C_in / G + i, o, k...] =
// w[g * C_out / G + o, k..., i]). The output's spatial size is, as in PyTorch,
//   (S - 1) * stride - 2 * padding + dilation * (K - 1) + 1 + output_padding.
// As PyTorch requires (MLX does not check): padding >= 0, 0 <= output_padding < max(stride, dilation),
// and a non-empty output. A padding beyond dilation * (K - 1) crops the output as in PyTorch.
// groups > 1 works for every number of spatial dimensions (MLX: 1-d and 2-d only), as in conv3d.
array conv_transpose1d(const array& input, const array& weight, int stride = 1, int padding = 0, int dilation = 1,
                       int output_padding = 0, int groups = 1, StreamOrDevice s = {});
array conv_transpose2d(const array& input, const array& weight, const std::pair<int, int>& stride = {1, 1},
                       const std::pair<int, int>& padding = {0, 0}, const std::pair<int, int>& dilation = {1, 1},
                       const std::pair<int, int>& output_padding = {0, 0}, int groups = 1, StreamOrDevice s = {});
array conv_transpose3d(const array& input, const array& weight, const std::tuple<int, int, int>& stride = {1, 1, 1},
                       const std::tuple<int, int, int>& padding = {0, 0, 0},
                       const std::tuple<int, int, int>& dilation = {1, 1, 1},
                       const std::tuple<int, int, int>& output_padding = {0, 0, 0}, int groups = 1,
                       StreamOrDevice s = {});

// ---- pooling (channels-last, floating point) ----
// The window of output position o along a spatial axis covers input positions o * stride - padding
// + [0, kernel_size). Max pooling pads with -inf; its gradient goes to the first maximum of each window
// in row-major window order (ties are not split; a NaN counts as the maximum). Average pooling pads
// with zeros and always divides by the full window size (PyTorch's count_include_pad=True).
// Requirements (as in PyTorch): kernel_size >= 1, stride >= 1, 0 <= padding <= kernel_size / 2, and the
// padded input at least kernel_size long. O = (S + 2 * padding - kernel_size) / stride + 1.

/// Pools over the `input.ndim() - 2` spatial axes of (N, S_1..S_D, C). `stride` empty means
/// stride = kernel_size, `padding` empty means 0; a one-element list applies to every axis.
array max_pool(const array& input, const std::vector<int>& kernel_size, const std::vector<int>& stride = {},
               const std::vector<int>& padding = {}, StreamOrDevice s = {});
array avg_pool(const array& input, const std::vector<int>& kernel_size, const std::vector<int>& stride = {},
               const std::vector<int>& padding = {}, StreamOrDevice s = {});

/// input (N, L, C) -> (N, L_out, C); stride defaults to kernel_size.
array max_pool1d(const array& input, int kernel_size, std::optional<int> stride = std::nullopt, int padding = 0,
                 StreamOrDevice s = {});
array avg_pool1d(const array& input, int kernel_size, std::optional<int> stride = std::nullopt, int padding = 0,
                 StreamOrDevice s = {});

/// input (N, H, W, C) -> (N, H_out, W_out, C); stride defaults to kernel_size.
array max_pool2d(const array& input, const std::pair<int, int>& kernel_size, StreamOrDevice s = {});
array max_pool2d(const array& input, const std::pair<int, int>& kernel_size, const std::pair<int, int>& stride,
                 const std::pair<int, int>& padding = {0, 0}, StreamOrDevice s = {});
array avg_pool2d(const array& input, const std::pair<int, int>& kernel_size, StreamOrDevice s = {});
array avg_pool2d(const array& input, const std::pair<int, int>& kernel_size, const std::pair<int, int>& stride,
                 const std::pair<int, int>& padding = {0, 0}, StreamOrDevice s = {});

}  // namespace loom
