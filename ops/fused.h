// Fused ops: one kernel where the op-by-op graph would make several passes over memory.
#pragma once

#include <optional>

#include "loom/core/array.h"

namespace loom {

/// Per-row softmax cross entropy against class indices, in one pass over each row:
///     out[r] = logsumexp(logits[r, :]) - (1 - label_smoothing) * logits[r, targets[r]]
///              - label_smoothing * mean(logits[r, :])
/// where r runs over the positions of every axis but `axis` (the class axis). `targets` has an
/// integer dtype and the shape of `logits` without `axis`; the result has that shape and the logits'
/// dtype (float16 / bfloat16 compute in float32; integer logits are cast to float32). label_smoothing
/// is in [0, 1). Equal, to rounding, to logsumexp(logits, axis) - take_along_axis(...), and stable for
/// large logits.
///
/// Class indices must lie in [0, C): checked now when `targets` is evaluated, otherwise when the
/// graph runs (std::out_of_range from eval). Negative indices are rejected (they do not count from
/// the end here).
///
/// Its gradient with respect to the logits is (softmax(logits) - (1 - ls) * onehot(targets) - ls / C)
/// times the cotangent, again one pass per row; that backward primitive has its own vjp and jvp
/// (written with ops), so higher-order derivatives work.
array softmax_cross_entropy(const array& logits, const array& targets, int axis = -1, double label_smoothing = 0.0);

/// Attention: softmax(scale * queries keys^T + mask, over the last axis) values, as MLX's
/// fast::scaled_dot_product_attention. queries (..., L, E), keys (..., S, E) and values (..., S, Ev)
/// with the same leading axes (e.g. (B, heads, L, E)); the result is (..., L, Ev) in their promoted
/// dtype (float16 / bfloat16 compute in float32). The optional mask is additive (floating point) or
/// boolean (true = attend; false adds the lowest finite float) and broadcasts to (..., L, S).
///
/// One kernel per (batch, head) computes the scores, the softmax and the weighted sum block by block
/// without materializing the (L, S) weights; the backward recomputes them. Mask entries at or below
/// half the lowest finite value (or -inf) at the end of a row (a causal mask's future) are skipped:
/// their weights are exactly 0, as the composition's underflow gives, unless the whole row is masked.
/// With 4 axes the result (and the gradients of queries, keys and values) are laid out as
/// (B, L, heads, E) in memory, so transposing them to (B, L, heads, E) costs no copy.
/// Derivatives of every order are those of the composition (the backward is one fused kernel; its
/// own derivatives, and the mask's gradient, go through the composition).
array scaled_dot_product_attention(const array& queries, const array& keys, const array& values, double scale,
                                   const std::optional<array>& mask = std::nullopt);

/// The exact GELU x * Phi(x) = x (1 + erf(x / sqrt(2))) / 2 elementwise, in one pass, and its
/// gradient g * (Phi(x) + x phi(x)) in one pass (float32 uses the vectorized erf of simd_math.h). Integer inputs give float32; half types compute in float32. Derivatives of the gradient
/// go through the composition.
array gelu_erf(const array& x);

/// Layer normalization over the last axis, as MLX's fast::layer_norm:
///     (x - mean) / sqrt(var + eps) * weight + bias
/// with the population variance; weight and bias (optional) have shape (x.shape(-1)). One pass per
/// row forward and backward (the backward recomputes the row statistics); float16 / bfloat16 and
/// integer inputs compute in float32, the result has the promoted dtype (float32 for integers).
/// Derivatives of the gradient go through the composition.
array layer_norm(const array& x, const std::optional<array>& weight, const std::optional<array>& bias,
                 double eps = 1e-5);

/// RMS normalization over the last axis, as MLX's fast::rms_norm:
///     x / sqrt(mean(x^2) + eps) * weight
/// where weight (optional) has shape (x.shape(-1)). One pass per row forward and backward (the
/// backward recomputes the row statistic); float16 / bfloat16 and integer inputs compute in float32,
/// the result has the promoted dtype (float32 for integers). Derivatives of the gradient go through
/// the composition.
array rms_norm(const array& x, const std::optional<array>& weight, double eps = 1e-5);

namespace detail {
/// Throws std::out_of_range starting "[op]" if `targets` is evaluated and holds a class index outside
/// [0, num_classes); does nothing for unevaluated targets.
void check_class_indices(const array& targets, int num_classes, const Shape& logits_shape, int axis, const char* op);
/// softmax (log_softmax when `take_log`) of floating-point x over `axes`, op by op (ops/reduce.cpp).
array softmax_composed(const array& x, const std::vector<int>& axes, bool take_log);
/// The same over the last axis as one fused primitive, forward and backward (ops/softmax.cpp).
array softmax_last_axis(const array& x, bool take_log);
}  // namespace detail

}  // namespace loom
