// Fused ops, as MLX's mlx::core::fast: one kernel where the op-by-op graph would make several passes
// over memory. Each is defined by a composition of plain ops (its reference, see fast/custom.h): its
// values agree with the composition to rounding, and its derivatives of every order are the
// composition's (a fused backward kernel computes the first-order vjp where the op has one).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "loom/core/array.h"

namespace loom::fast {

/// softmax (log_softmax) over the last axis, one pass per row forward and one backward (the
/// backward reads the forward's output, not its input). Integer inputs give float32; half types
/// compute in float32 and return their own dtype. loom::softmax computes the same values with a
/// plain primitive whose gradient is written with ops (as MLX's).
array softmax(const array& x, StreamOrDevice s = {});
array log_softmax(const array& x, StreamOrDevice s = {});

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
array softmax_cross_entropy(const array& logits, const array& targets, int axis = -1, double label_smoothing = 0.0,
                            StreamOrDevice s = {});

/// Throws std::out_of_range starting "[op]" if `targets` is evaluated and holds a class index outside
/// [0, num_classes) (as softmax_cross_entropy does at once for evaluated targets); does nothing for
/// unevaluated targets, which the kernels check when they run.
void check_class_indices(const array& targets, int num_classes, const Shape& logits_shape, int axis, const char* op);

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
                                   const std::optional<array>& mask = std::nullopt, StreamOrDevice s = {});

/// The exact GELU x * Phi(x) = x (1 + erf(x / sqrt(2))) / 2 elementwise, in one pass, and its
/// gradient g * (Phi(x) + x phi(x)) in one pass (computed from the forward's output). Integer inputs
/// give float32; half types compute in float32. nn::gelu is this op.
array gelu(const array& x, StreamOrDevice s = {});

/// Layer normalization over the last axis, as MLX's fast::layer_norm:
///     (x - mean) / sqrt(var + eps) * weight + bias
/// with the population variance; weight and bias (optional) have shape (x.shape(-1)). One pass per
/// row forward and backward (the backward recomputes the row statistics); float16 / bfloat16 and
/// integer inputs compute in float32, the result has the promoted dtype (float32 for integers).
/// Derivatives of the gradient go through the composition.
array layer_norm(const array& x, const std::optional<array>& weight, const std::optional<array>& bias,
                 double eps = 1e-5, StreamOrDevice s = {});

/// RMS normalization over the last axis, as MLX's fast::rms_norm:
///     x / sqrt(mean(x^2) + eps) * weight
/// where weight (optional) has shape (x.shape(-1)). One pass per row forward and backward (the
/// backward recomputes the row statistic); float16 / bfloat16 and integer inputs compute in float32,
/// the result has the promoted dtype (float32 for integers). Derivatives of the gradient go through
/// the composition.
array rms_norm(const array& x, const std::optional<array>& weight, double eps = 1e-5, StreamOrDevice s = {});

/// Hyper-parameters of one Adam/AdamW step.
struct AdamStep {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = true;        // AdamW's p *= 1 - lr wd; false: Adam's g += wd p
  bool bias_correction = true;
  int64_t step = 1;             // t, counting this update
};

/// One Adam/AdamW step of one parameter as a single primitive: inputs p, g, m, v (same shape,
/// floating dtype; g, m, v are cast to p's dtype), outputs {p', m', v'} in p's dtype. One pass over
/// the elements (OpenMP-parallel for large parameters), computing in float for float16/bfloat16/
/// float32 and in double for float64, in torch.optim.Adam(W)'s order of operations, bit for bit as
/// its reference (torch's single-tensor step, op by op). It writes into the buffers of p, m and v
/// when nothing else holds them. Its derivatives are the reference's (meta-learning through a step).
std::array<array, 3> adam_update(const array& p, const array& g, const array& m, const array& v,
                                 const AdamStep& hp);

}  // namespace loom::fast
