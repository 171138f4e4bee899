// Fused ops: one kernel where the op-by-op graph would make several passes over memory.
#pragma once

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

namespace detail {
/// Throws std::out_of_range starting "[op]" if `targets` is evaluated and holds a class index outside
/// [0, num_classes); does nothing for unevaluated targets.
void check_class_indices(const array& targets, int num_classes, const Shape& logits_shape, int axis, const char* op);
}  // namespace detail

}  // namespace loom
