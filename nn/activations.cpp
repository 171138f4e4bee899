#include "loom/nn/activations.h"

#include <cmath>
#include <stdexcept>

#include "loom/fast/fast.h"
#include "loom/ops/utils.h"

namespace loom::nn {

namespace {
// A scalar in x's dtype when x is floating point (float32 otherwise, or x's dtype for integral v).
template <typename T>
array s(T v, const array& x) {
  return loom::detail::scalar_like(v, x);
}
}  // namespace

array relu(const array& x) { return maximum(x, s(0, x)); }

array relu6(const array& x) { return minimum(maximum(x, s(0, x)), s(6, x)); }

array leaky_relu(const array& x, double negative_slope) {
  // max(x, a x) is leaky_relu for 0 <= a <= 1 (one op fewer than a where); other slopes need the select.
  if (negative_slope >= 0 && negative_slope <= 1) return maximum(x, x * negative_slope);
  return where(x > s(0, x), x, x * negative_slope);
}

array prelu(const array& x, const array& alpha) {
  return maximum(x, s(0, x)) + alpha * minimum(x, s(0, x));
}

array elu(const array& x, double alpha) {
  // max(x, 0) + alpha * expm1(min(x, 0)) equals the two-branch definition everywhere, and exp never
  // sees a large positive value (whose inf would turn the gradient of the unused branch into NaN).
  return maximum(x, s(0, x)) + expm1(minimum(x, s(0, x))) * alpha;
}

array celu(const array& x, double alpha) {
  if (alpha == 0) throw std::invalid_argument("[nn::celu] alpha must not be 0");
  return maximum(x, s(0, x)) + expm1(minimum(x, s(0, x)) * (1.0 / alpha)) * alpha;
}

array selu(const array& x) {
  constexpr double alpha = 1.6732632423543772, lambda = 1.0507009873554805;
  return maximum(x, s(0, x)) * lambda + expm1(minimum(x, s(0, x))) * (alpha * lambda);
}

array gelu(const array& x) { return fast::gelu(x); }

array gelu_approx(const array& x) {
  // 0.5 (1 + tanh(z)) = sigmoid(2 z) with z = sqrt(2/pi) (x + 0.044715 x^3).
  const double c1 = 2.0 * std::sqrt(2.0 / M_PI), c2 = c1 * 0.044715;
  return x * sigmoid(x * (square(x) * c2 + s(c1, x)));
}

array gelu_fast_approx(const array& x) { return x * sigmoid(x * 1.702); }

array silu(const array& x) { return x * sigmoid(x); }

array softplus(const array& x) { return maximum(x, s(0, x)) + log1p(exp(-abs(x))); }

array log_sigmoid(const array& x) { return -softplus(-x); }

array softsign(const array& x) { return x / (abs(x) + s(1, x)); }

array mish(const array& x) { return x * loom::tanh(softplus(x)); }

array hardswish(const array& x) { return x * minimum(maximum(x + s(3, x), s(0, x)), s(6, x)) * (1.0 / 6.0); }

array hard_tanh(const array& x, double min_val, double max_val) {
  if (!(min_val <= max_val)) {
    throw std::invalid_argument(loom::detail::msg("[nn::hard_tanh] min_val ", min_val, " is greater than max_val ",
                                                  max_val));
  }
  return minimum(maximum(x, s(min_val, x)), s(max_val, x));
}

array glu(const array& x, int axis) {
  int ax = loom::detail::normalize_axis(axis, static_cast<int>(x.ndim()), "nn::glu");
  if (x.shape(ax) % 2 != 0) {
    throw std::invalid_argument(loom::detail::msg("[nn::glu] axis ", axis, " must have an even size to split in halves, got shape ",
                                                  loom::detail::shape_str(x.shape())));
  }
  auto halves = split(x, 2, ax);
  return halves[0] * sigmoid(halves[1]);
}

// ---- modules ----

namespace {
array prelu_weight(int num_parameters, double init) {
  if (num_parameters < 1) {
    throw std::invalid_argument(loom::detail::msg("[nn::PReLU] num_parameters must be positive, got ", num_parameters));
  }
  return full({num_parameters}, static_cast<float>(init));
}
}  // namespace

PReLU::PReLU(int num_parameters, double init) : weight(prelu_weight(num_parameters, init)) {
  register_parameter("weight", weight);
}

array PReLU::operator()(const array& x) const {
  const int n = weight.shape(0);
  if (n > 1 && (x.ndim() == 0 || x.shape(-1) != n)) {
    throw std::invalid_argument(loom::detail::msg("[nn::PReLU] expected input with last axis ", n, " (one slope per channel), got shape ",
                                                  loom::detail::shape_str(x.shape())));
  }
  return prelu(x, weight);
}

CELU::CELU(double alpha) : alpha(alpha) {
  if (alpha == 0) throw std::invalid_argument("[nn::CELU] alpha must not be 0");
}

GELU::GELU(std::string approx) : approx(std::move(approx)) {
  if (this->approx != "none" && this->approx != "precise" && this->approx != "tanh" && this->approx != "fast") {
    throw std::invalid_argument("[nn::GELU] approx must be 'none', 'precise', 'tanh' or 'fast', got '" + this->approx +
                                "'");
  }
}

array GELU::operator()(const array& x) const {
  if (approx == "none") return gelu(x);
  if (approx == "fast") return gelu_fast_approx(x);
  return gelu_approx(x);
}

HardTanh::HardTanh(double min_val, double max_val) : min_val(min_val), max_val(max_val) {
  if (!(min_val <= max_val)) {
    throw std::invalid_argument(loom::detail::msg("[nn::HardTanh] min_val ", min_val, " is greater than max_val ",
                                                  max_val));
  }
}

}  // namespace loom::nn
