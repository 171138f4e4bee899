// Loss functions (MLX's `mlx.nn.losses`): names, argument order, formulas and defaults follow MLX.
//
// Reduction. Every loss takes `reduction`: "none" (the elementwise / per-sample loss), "mean" (the
// mean of all of it, as a 0-d array) or "sum". Any other string throws std::invalid_argument naming
// the loss and the string. The defaults are MLX's, and they differ between losses:
//
//   | loss                 | default reduction | other defaults                          |
//   | -------------------- | ----------------- | --------------------------------------- |
//   | cross_entropy        | "none"            | axis -1, label_smoothing 0              |
//   | binary_cross_entropy | "mean"            | with_logits true                        |
//   | nll_loss             | "none"            | axis -1                                 |
//   | mse_loss, l1_loss    | "mean"            |                                         |
//   | smooth_l1_loss       | "mean"            | beta 1                                  |
//   | huber_loss           | "none"            | delta 1                                 |
//   | kl_div_loss          | "none"            | axis -1                                 |
//
// Overloads. C++ has no keyword arguments, so each loss has its full MLX signature (positional in
// MLX's order) and a short form `loss(a, b, reduction)`:
//     nn::losses::cross_entropy(logits, y, "mean");
//     nn::losses::cross_entropy(logits, y, std::nullopt, -1, 0.1, "mean");   // label smoothing 0.1
//
// Validation happens when the loss is built: shapes that do not match, class-index targets of a
// non-integer dtype, a bad axis (std::out_of_range) and bad parameters throw with a message that
// starts "[loss_name]" and names the shapes, dtypes or values. Class indices must lie in [0, C) for
// C classes; when the targets are already evaluated this is checked at build time
// (std::out_of_range); otherwise it is checked when the graph runs (std::out_of_range from eval,
// as for `take`).
//
// Dtypes. Inputs follow numpy promotion. cross_entropy computes float16 / bfloat16 logits in
// float32 and returns the logits' dtype (with probability targets: the promoted dtype).
#pragma once

#include <optional>
#include <string>

#include "loom/core/array.h"

namespace loom::nn::losses {

/// Softmax cross entropy: loss = logsumexp(logits, axis) - score, where score is logits[target]
/// for class-index targets and sum(logits * targets, axis) for probability targets.
///
/// `targets` are either class indices (integer dtype, shape = logits.shape without `axis`) or
/// probabilities / one-hot rows (shape = logits.shape). With `label_smoothing` ls in [0, 1) the loss
/// is logsumexp - (1 - ls) * score - ls * mean(logits, axis) (MLX's formula; for class indices this
/// is the cross entropy against targets smoothed to (1 - ls) * onehot + ls / C). `weights`, when
/// given, has the shape of the per-sample loss and multiplies it before the reduction ("mean" is
/// then mean(loss * weights), as in MLX, not divided by the sum of the weights).
///
/// Stable for large logits (1e4 and beyond). Class-index targets run one fused pass per row
/// (`fast::softmax_cross_entropy` in fast/fast.h) forward and backward.
array cross_entropy(const array& logits, const array& targets, const std::optional<array>& weights = std::nullopt,
                    int axis = -1, double label_smoothing = 0.0, const std::string& reduction = "none");
array cross_entropy(const array& logits, const array& targets, const std::string& reduction);
array cross_entropy(const array& logits, const array& targets, const std::optional<array>& weights,
                    const std::string& reduction);

/// Binary cross entropy. With `with_logits` (the default), `inputs` are logits and
/// loss = softplus(inputs) - inputs * targets, computed as max(x, 0) + log1p(exp(-|x|)) - x * t (no
/// overflow for any x). Otherwise `inputs` are probabilities and
/// loss = -(t * max(log p, -100) + (1 - t) * max(log(1 - p), -100)) (MLX's clipping).
/// `targets` and `weights` (optional) have the shape of `inputs`.
array binary_cross_entropy(const array& inputs, const array& targets,
                           const std::optional<array>& weights = std::nullopt, bool with_logits = true,
                           const std::string& reduction = "mean");
array binary_cross_entropy(const array& inputs, const array& targets, const std::string& reduction);
array binary_cross_entropy(const array& inputs, const array& targets, const std::optional<array>& weights,
                           const std::string& reduction);
/// (Exists so that a string literal after `weights` is the reduction, not converted to `with_logits`.)
array binary_cross_entropy(const array& inputs, const array& targets, const std::optional<array>& weights,
                           const char* reduction);

/// Negative log likelihood: loss = -inputs[target] along `axis`, where `inputs` are log
/// probabilities and `targets` class indices (integer dtype, shape = inputs.shape without `axis`).
array nll_loss(const array& inputs, const array& targets, int axis = -1, const std::string& reduction = "none");
array nll_loss(const array& inputs, const array& targets, const std::string& reduction);

/// Squared error (predictions - targets)^2; the shapes must be equal.
array mse_loss(const array& predictions, const array& targets, const std::string& reduction = "mean");

/// Absolute error |predictions - targets|; the shapes must be equal.
array l1_loss(const array& predictions, const array& targets, const std::string& reduction = "mean");

/// Smooth L1: with d = |predictions - targets|, 0.5 * d^2 / beta where d < beta and d - 0.5 * beta
/// elsewhere. beta must be >= 0; beta = 0 is the L1 loss. The shapes must be equal.
array smooth_l1_loss(const array& predictions, const array& targets, double beta = 1.0,
                     const std::string& reduction = "mean");
array smooth_l1_loss(const array& predictions, const array& targets, const std::string& reduction);

/// Huber: with a = |inputs - targets|, 0.5 * a^2 where a <= delta and delta * (a - 0.5 * delta)
/// elsewhere. delta must be > 0. The shapes must be equal.
array huber_loss(const array& inputs, const array& targets, double delta = 1.0,
                 const std::string& reduction = "none");
array huber_loss(const array& inputs, const array& targets, const std::string& reduction);

/// Kullback-Leibler divergence KL(targets || inputs) with both given as log probabilities (MLX):
/// loss = sum(exp(targets) * (targets - inputs), axis). The shapes must be equal.
array kl_div_loss(const array& inputs, const array& targets, int axis = -1, const std::string& reduction = "none");
array kl_div_loss(const array& inputs, const array& targets, const std::string& reduction);

}  // namespace loom::nn::losses
