// Quantization as in MLX (mlx/ops.h): quantize / dequantize a matrix along its last axis in groups,
// products with a quantized matrix (quantized_matmul, gather_qmm), and E4M3 float8 conversion.
//
// Modes (MLX's names and defaults):
//   "affine" (group_size 64, bits 4; group sizes 32/64/128, bits 2/3/4/5/6/8): w ~= scale * q + bias
//            per group, q in [0, 2^bits); scales and biases have w's dtype.
//   "mxfp4"  (group_size 32, bits 4): FP4 E2M1 values times a power-of-two scale (uint8, E8M0).
//   "mxfp8"  (group_size 32, bits 8): E4M3 values times a power-of-two scale (uint8, E8M0).
//   "nvfp4"  (group_size 16, bits 4): FP4 E2M1 values times an E4M3 scale (uint8), with an optional
//            float32 global scale.
// Packing: the codes of a row form one little-endian bit stream (element i at bit i * bits) stored in
// uint32 words, so w of shape (..., K) quantizes to (..., K * bits / 32) words; this is MLX's layout
// for every bit width (bits 3/5/6 too: MLX writes them byte by byte, which is the same stream).
//
// quantize and dequantize reproduce MLX's CPU backend bit for bit (affine: its quantize kernel and
// its dequantize composition, whose multiply and add each round to the scales' dtype; the fp modes:
// its composed fallbacks, each step rounded to w's dtype as MLX's ops do). quantized_matmul and
// gather_qmm dequantize blocks of w to float32 (float64 for float64 x) and run the BLAS GEMM, so they equal
// x @ dequantize(w).T up to float32 summation order (MLX's CPU kernels sum in another order).
//
// Gradients (as MLX): quantized_matmul and gather_qmm have a vjp with respect to x, scales and
// biases (affine) and throw for the packed weights; jvp with respect to x (and, beyond MLX, scales
// and biases: the product is linear in them; gather_qmm's jvp is NYI in MLX). dequantize is
// differentiable in scales and biases. quantize's outputs, to_fp8 and from_fp8 are constants to
// autograd (MLX's ConvertFP8 has no vjp/jvp either).
//
// Deliberate differences from MLX: quantized_matmul / gather_qmm also take float64 x (a float64 GEMM;
// MLX's CPU kernel throws at eval) and x of 1 or 2 dimensions against a stack of quantized matrices
// is broadcast to the stack (MLX's CPU kernel uses the first matrix only); dequantize of affine scales and biases of different dtypes
// casts both to their promoted dtype first (MLX rounds the product to the scales' dtype); nvfp4
// dequantize with a global scale returns `dtype` (MLX's CPU fallback returns float32 there).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/core/array.h"

namespace loom {

/// Quantizes w (at least 2-D, floating, last axis divisible by group_size) along its last axis.
/// Returns {w_q (uint32), scales, biases} for "affine" and {w_q, scales (uint8)} for the fp modes.
std::vector<array> quantize(const array& w, std::optional<int> group_size = std::nullopt,
                            std::optional<int> bits = std::nullopt, const std::string& mode = "affine",
                            const std::optional<array>& global_scale = std::nullopt, StreamOrDevice s = {});

/// The inverse of quantize: (..., K * bits / 32) uint32 words -> (..., K) in `dtype` (default: the
/// promoted dtype of scales and biases for "affine", bfloat16 for the fp modes, as MLX).
array dequantize(const array& w, const array& scales, const std::optional<array>& biases = std::nullopt,
                 std::optional<int> group_size = std::nullopt, std::optional<int> bits = std::nullopt,
                 const std::string& mode = "affine", const std::optional<array>& global_scale = std::nullopt,
                 std::optional<Dtype> dtype = std::nullopt, StreamOrDevice s = {});

/// x @ dequantize(w).T (transpose, the default) or x @ dequantize(w). x is (..., M, K); w is 2-D or has
/// batch axes, broadcast against x's when both have them.
array quantized_matmul(const array& x, const array& w, const array& scales,
                       const std::optional<array>& biases = std::nullopt, bool transpose = true,
                       std::optional<int> group_size = std::nullopt, std::optional<int> bits = std::nullopt,
                       const std::string& mode = "affine", StreamOrDevice s = {});

/// quantized_matmul of x's matrix lhs_indices[i] with w's matrix rhs_indices[i] (indices into the
/// flattened batch axes; absent indices mean "every matrix in order"). The result has the broadcast
/// shape of the indices followed by (M, N). `sorted_indices` is a hint MLX's GPU kernels use; the
/// result does not depend on it.
array gather_qmm(const array& x, const array& w, const array& scales, const std::optional<array>& biases = std::nullopt,
                 std::optional<array> lhs_indices = std::nullopt, std::optional<array> rhs_indices = std::nullopt,
                 bool transpose = true, std::optional<int> group_size = std::nullopt,
                 std::optional<int> bits = std::nullopt, const std::string& mode = "affine",
                 bool sorted_indices = false, StreamOrDevice s = {});

/// Floating x -> uint8 E4M3 codes, rounding to nearest even; magnitudes at or above 448 (and inf,
/// NaN) saturate to +-448 (0x7E / 0xFE), as MLX's CPU backend.
array to_fp8(array x, StreamOrDevice s = {});
/// uint8 E4M3 codes -> `dtype` (floating). As MLX, 0x7F / 0xFF give +-480 (no NaN).
array from_fp8(array x, Dtype dtype, StreamOrDevice s = {});

}  // namespace loom
