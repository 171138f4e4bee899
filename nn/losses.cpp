#include "loom/nn/losses.h"

#include <stdexcept>

#include "loom/fast/fast.h"
#include "loom/ops/indexing.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::nn::losses {

using detail::msg;
using detail::shape_str;

namespace {

enum class Reduction { none, mean, sum };

Reduction parse_reduction(const std::string& r, const char* loss) {
  if (r == "none") return Reduction::none;
  if (r == "mean") return Reduction::mean;
  if (r == "sum") return Reduction::sum;
  throw std::invalid_argument(msg("[", loss, "] reduction must be 'none', 'mean' or 'sum'; got '", r, "'"));
}

array reduce(const array& loss, Reduction r) {
  switch (r) {
    case Reduction::mean: return mean(loss);
    case Reduction::sum: return sum(loss);
    case Reduction::none: break;
  }
  return loss;
}

void check_same_shape(const array& a, const array& b, const char* loss, const char* a_name, const char* b_name) {
  if (a.shape() != b.shape()) {
    throw std::invalid_argument(msg("[", loss, "] ", a_name, " of shape ", shape_str(a.shape()), " and ", b_name,
                                    " of shape ", shape_str(b.shape()), " must have the same shape"));
  }
}

// The floating dtype two operands compute in: their promoted dtype, or float32 when that is integral.
Dtype float_result(const array& a, const array& b) {
  Dtype d = promote_types(a.dtype(), b.dtype());
  return is_floating_point(d) ? d : float32;
}

// The class axis of `inputs` (a distribution over classes along `axis`).
int class_axis(const array& inputs, int axis, const char* loss, const char* name) {
  if (inputs.ndim() == 0) {
    throw std::invalid_argument(msg("[", loss, "] ", name, " must have at least one axis (the classes); got a 0-d array"));
  }
  return detail::normalize_axis(axis, static_cast<int>(inputs.ndim()), loss);
}

// Checks class-index targets against `inputs` with the classes along `ax`; returns the class count.
int check_class_targets(const array& inputs, const array& targets, int ax, const char* loss, const char* name) {
  Shape expected = inputs.shape();
  expected.erase(expected.begin() + ax);
  if (targets.shape() != expected) {
    throw std::invalid_argument(msg("[", loss, "] class-index targets of shape ", shape_str(targets.shape()),
                                    " do not match ", name, " of shape ", shape_str(inputs.shape()),
                                    " without the class axis ", ax, ": expected ", shape_str(expected)));
  }
  if (!is_integral(targets.dtype())) {
    throw std::invalid_argument(msg("[", loss, "] class-index targets must have an integer dtype; got ",
                                    targets.dtype(), " targets of shape ", shape_str(targets.shape()), " for ", name,
                                    " of shape ", shape_str(inputs.shape())));
  }
  const int n = inputs.shape()[ax];
  if (n == 0 && targets.size() > 0) {
    throw std::invalid_argument(msg("[", loss, "] ", name, " of shape ", shape_str(inputs.shape()),
                                    " have no classes along axis ", ax));
  }
  fast::check_class_indices(targets, n, inputs.shape(), ax, loss);
  return n;
}

array apply_weights(const array& loss, const std::optional<array>& weights, const char* name) {
  if (!weights) return loss;
  if (weights->shape() != loss.shape()) {
    throw std::invalid_argument(msg("[", name, "] weights of shape ", shape_str(weights->shape()),
                                    " must have the shape of the per-sample loss, ", shape_str(loss.shape())));
  }
  return multiply(loss, *weights);
}

// log(p) clipped below at -100 (MLX's binary_cross_entropy clipping), with a finite gradient at p = 0:
// log never sees the zero, so its vjp does not make 0 * inf. Negative p still gives NaN.
array clipped_log(const array& p) {
  const Dtype d = p.dtype();
  array is_zero = equal(p, array(0.0, d));
  array safe = where(is_zero, array(1.0, d), p);
  array lg = clip(log(safe), array(-100.0, d), std::nullopt);
  return where(is_zero, array(-100.0, d), lg);
}

}  // namespace

// ---- cross entropy ----

array cross_entropy(const array& logits, const array& targets, const std::optional<array>& weights, int axis,
                    double label_smoothing, const std::string& reduction) {
  const char* op = "cross_entropy";
  const Reduction red = parse_reduction(reduction, op);
  const int ax = class_axis(logits, axis, op, "logits");
  if (!(label_smoothing >= 0.0 && label_smoothing < 1.0)) {
    throw std::invalid_argument(msg("[", op, "] label_smoothing must be in [0, 1); got ", label_smoothing));
  }
  array loss = logits;
  if (targets.ndim() == logits.ndim()) {
    // Probabilities (or one-hot rows).
    if (targets.shape() != logits.shape()) {
      throw std::invalid_argument(msg("[", op, "] probability targets of shape ", shape_str(targets.shape()),
                                      " do not match logits of shape ", shape_str(logits.shape())));
    }
    const Dtype out = float_result(logits, targets);
    const Dtype compute = out == float64 ? float64 : float32;  // half types compute in float32
    array x = astype(logits, compute);
    array score = sum(multiply(x, astype(targets, compute)), ax);
    array lse = logsumexp(x, ax);
    if (label_smoothing > 0) {
      // MLX: lse - (1 - ls) * score - ls * mean(x).
      loss = subtract(subtract(lse, multiply(score, array(1.0 - label_smoothing, compute))),
                      multiply(mean(x, ax), array(label_smoothing, compute)));
    } else {
      loss = subtract(lse, score);
    }
    if (out != compute) loss = astype(loss, out);
  } else if (targets.ndim() + 1 == logits.ndim()) {
    check_class_targets(logits, targets, ax, op, "logits");
    loss = fast::softmax_cross_entropy(logits, targets, ax, label_smoothing);
  } else {
    Shape without = logits.shape();
    without.erase(without.begin() + ax);
    throw std::invalid_argument(msg("[", op, "] targets of shape ", shape_str(targets.shape()),
                                    " fit neither logits of shape ", shape_str(logits.shape()),
                                    " (probability targets) nor its shape without the class axis ", ax, ", ",
                                    shape_str(without), " (class-index targets)"));
  }
  return reduce(apply_weights(loss, weights, op), red);
}

array cross_entropy(const array& logits, const array& targets, const std::string& reduction) {
  return cross_entropy(logits, targets, std::nullopt, -1, 0.0, reduction);
}

array cross_entropy(const array& logits, const array& targets, const std::optional<array>& weights,
                    const std::string& reduction) {
  return cross_entropy(logits, targets, weights, -1, 0.0, reduction);
}

// ---- binary cross entropy ----

array binary_cross_entropy(const array& inputs, const array& targets, const std::optional<array>& weights,
                           bool with_logits, const std::string& reduction) {
  const char* op = "binary_cross_entropy";
  const Reduction red = parse_reduction(reduction, op);
  check_same_shape(inputs, targets, op, "inputs", "targets");
  const Dtype d = float_result(inputs, targets);
  array x = astype(inputs, d);
  array t = astype(targets, d);
  array loss = x;
  if (with_logits) {
    // softplus(x) - x t with softplus(x) = max(x, 0) + log1p(exp(-|x|)): exp never overflows. max(x, 0)
    // is written (x + |x|) / 2, whose derivative at x = 0 is 1/2 (abs's is 0 there), which gives the
    // exact sigmoid(0) = 0.5 (maximum's gives its tie to one side).
    array softplus = add(multiply(add(x, abs(x)), array(0.5, d)), log1p(exp(negative(abs(x)))));
    loss = subtract(softplus, multiply(x, t));
  } else {
    array one = array(1.0, d);
    loss = negative(add(multiply(t, clipped_log(x)), multiply(subtract(one, t), clipped_log(subtract(one, x)))));
  }
  return reduce(apply_weights(loss, weights, op), red);
}

array binary_cross_entropy(const array& inputs, const array& targets, const std::string& reduction) {
  return binary_cross_entropy(inputs, targets, std::nullopt, true, reduction);
}

array binary_cross_entropy(const array& inputs, const array& targets, const std::optional<array>& weights,
                           const std::string& reduction) {
  return binary_cross_entropy(inputs, targets, weights, true, reduction);
}

array binary_cross_entropy(const array& inputs, const array& targets, const std::optional<array>& weights,
                           const char* reduction) {
  return binary_cross_entropy(inputs, targets, weights, true, std::string(reduction));
}

// ---- negative log likelihood ----

array nll_loss(const array& inputs, const array& targets, int axis, const std::string& reduction) {
  const char* op = "nll_loss";
  const Reduction red = parse_reduction(reduction, op);
  const int ax = class_axis(inputs, axis, op, "inputs");
  check_class_targets(inputs, targets, ax, op, "inputs");
  array picked = take_along_axis(inputs, expand_dims(targets, ax), ax);
  return reduce(negative(squeeze(picked, ax)), red);
}

array nll_loss(const array& inputs, const array& targets, const std::string& reduction) {
  return nll_loss(inputs, targets, -1, reduction);
}

// ---- regression losses ----

array mse_loss(const array& predictions, const array& targets, const std::string& reduction) {
  const char* op = "mse_loss";
  const Reduction red = parse_reduction(reduction, op);
  check_same_shape(predictions, targets, op, "predictions", "targets");
  return reduce(square(subtract(predictions, targets)), red);
}

array l1_loss(const array& predictions, const array& targets, const std::string& reduction) {
  const char* op = "l1_loss";
  const Reduction red = parse_reduction(reduction, op);
  check_same_shape(predictions, targets, op, "predictions", "targets");
  return reduce(abs(subtract(predictions, targets)), red);
}

array smooth_l1_loss(const array& predictions, const array& targets, double beta, const std::string& reduction) {
  const char* op = "smooth_l1_loss";
  const Reduction red = parse_reduction(reduction, op);
  check_same_shape(predictions, targets, op, "predictions", "targets");
  if (!(beta >= 0.0)) throw std::invalid_argument(msg("[", op, "] beta must be >= 0; got ", beta));
  array diff = abs(subtract(predictions, targets));
  if (beta == 0.0) return reduce(diff, red);  // the quadratic piece is empty (and would divide by 0)
  array loss = where(less(diff, detail::scalar_like(beta, diff)), multiply(square(diff), detail::scalar_like(0.5 / beta, diff)),
                     subtract(diff, detail::scalar_like(0.5 * beta, diff)));
  return reduce(loss, red);
}

array smooth_l1_loss(const array& predictions, const array& targets, const std::string& reduction) {
  return smooth_l1_loss(predictions, targets, 1.0, reduction);
}

array huber_loss(const array& inputs, const array& targets, double delta, const std::string& reduction) {
  const char* op = "huber_loss";
  const Reduction red = parse_reduction(reduction, op);
  check_same_shape(inputs, targets, op, "inputs", "targets");
  if (!(delta > 0.0)) throw std::invalid_argument(msg("[", op, "] delta must be > 0; got ", delta));
  // MLX's form: q = min(|e|, delta), loss = q^2 / 2 + delta * (|e| - q). It is C1 at |e| = delta:
  // the derivative there is delta whichever input minimum gives the tie to (q - delta is 0).
  array a = abs(subtract(inputs, targets));
  array q = minimum(a, detail::scalar_like(delta, a));
  array loss = add(multiply(square(q), detail::scalar_like(0.5, q)), multiply(subtract(a, q), detail::scalar_like(delta, q)));
  return reduce(loss, red);
}

array huber_loss(const array& inputs, const array& targets, const std::string& reduction) {
  return huber_loss(inputs, targets, 1.0, reduction);
}

array kl_div_loss(const array& inputs, const array& targets, int axis, const std::string& reduction) {
  const char* op = "kl_div_loss";
  const Reduction red = parse_reduction(reduction, op);
  check_same_shape(inputs, targets, op, "inputs", "targets");
  const int ax = class_axis(inputs, axis, op, "inputs");
  return reduce(sum(multiply(exp(targets), subtract(targets, inputs)), ax), red);
}

array kl_div_loss(const array& inputs, const array& targets, const std::string& reduction) {
  return kl_div_loss(inputs, targets, -1, reduction);
}

}  // namespace loom::nn::losses
