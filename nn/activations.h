// Activation functions (namespace loom::nn, as mlx.nn's functions) and the modules that apply them
// (ReLU, GELU, ...; as mlx.nn's classes). Every function is a few elementwise ops; the dtype of a
// floating input is kept (an integer input to a function with non-integer constants becomes float32).
#pragma once

#include <string>

#include "loom/nn/module.h"
#include "loom/ops/ops.h"

namespace loom::nn {

// The core ops under their mlx.nn names: nn::sigmoid is loom::sigmoid, and so on (the same functions,
// so unqualified calls stay unambiguous).
using loom::log_softmax;
using loom::sigmoid;
using loom::tanh;
/// mlx.nn's softmax: along `axis`, the last by default (loom::softmax without an axis, as MLX's op,
/// takes every axis). With both namespaces open, an unqualified softmax(x) is ambiguous: say which.
inline array softmax(const array& x, int axis = -1) { return loom::softmax(x, axis); }
inline array softmax(const array& x, const std::vector<int>& axes) { return loom::softmax(x, axes); }

/// max(x, 0).
array relu(const array& x);
/// min(max(x, 0), 6).
array relu6(const array& x);
/// x for x > 0, negative_slope * x otherwise.
array leaky_relu(const array& x, double negative_slope = 0.01);
/// max(x, 0) + alpha * min(x, 0); `alpha` broadcasts against x (e.g. one value per channel).
array prelu(const array& x, const array& alpha);
/// x for x > 0, alpha * (exp(x) - 1) otherwise.
array elu(const array& x, double alpha = 1.0);
/// max(x, 0) + alpha * (exp(min(x, 0) / alpha) - 1). alpha must not be 0.
array celu(const array& x, double alpha = 1.0);
/// lambda * elu(x, alpha) with lambda = 1.0507009873554805, alpha = 1.6732632423543772.
array selu(const array& x);
/// Exact GELU: x * Phi(x) = x * (1 + erf(x / sqrt(2))) / 2.
array gelu(const array& x);
/// The tanh approximation of GELU: x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) (PyTorch's
/// approximate="tanh"), computed as x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)).
array gelu_approx(const array& x);
/// x * sigmoid(1.702 x).
array gelu_fast_approx(const array& x);
/// x * sigmoid(x) (also called swish).
array silu(const array& x);
/// log(1 + exp(x)), computed as max(x, 0) + log1p(exp(-|x|)) so it never overflows.
array softplus(const array& x);
/// log(sigmoid(x)) = -softplus(-x).
array log_sigmoid(const array& x);
/// x / (1 + |x|).
array softsign(const array& x);
/// x * tanh(softplus(x)).
array mish(const array& x);
/// x * min(max(x + 3, 0), 6) / 6.
array hardswish(const array& x);
/// min(max(x, min_val), max_val); needs min_val <= max_val.
array hard_tanh(const array& x, double min_val = -1.0, double max_val = 1.0);
/// Gated linear unit: splits `axis` into halves a and b and returns a * sigmoid(b); the axis must have
/// an even size.
array glu(const array& x, int axis = -1);

// ---- modules (no parameters unless stated) ----

struct ReLU : Module {
  array operator()(const array& x) const { return relu(x); }
};
struct ReLU6 : Module {
  array operator()(const array& x) const { return relu6(x); }
};
struct LeakyReLU : Module {
  double negative_slope;
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope(negative_slope) {}
  array operator()(const array& x) const { return leaky_relu(x, negative_slope); }
};
/// Parameter "weight" of shape (num_parameters), filled with `init` (MLX and PyTorch: 0.25). With
/// num_parameters > 1 it applies per channel (the last axis, channels-last).
struct PReLU : Module {
  array weight;
  explicit PReLU(int num_parameters = 1, double init = 0.25);
  array operator()(const array& x) const;
};
struct ELU : Module {
  double alpha;
  explicit ELU(double alpha = 1.0) : alpha(alpha) {}
  array operator()(const array& x) const { return elu(x, alpha); }
};
struct CELU : Module {
  double alpha;
  explicit CELU(double alpha = 1.0);
  array operator()(const array& x) const { return celu(x, alpha); }
};
struct SELU : Module {
  array operator()(const array& x) const { return selu(x); }
};
/// approx: "none" (exact, erf), "precise" or "tanh" (gelu_approx), "fast" (gelu_fast_approx).
struct GELU : Module {
  std::string approx;
  explicit GELU(std::string approx = "none");
  array operator()(const array& x) const;
};
struct SiLU : Module {
  array operator()(const array& x) const { return silu(x); }
};
struct Sigmoid : Module {
  array operator()(const array& x) const { return loom::sigmoid(x); }
};
struct Tanh : Module {
  array operator()(const array& x) const { return loom::tanh(x); }
};
struct Softplus : Module {
  array operator()(const array& x) const { return softplus(x); }
};
struct LogSigmoid : Module {
  array operator()(const array& x) const { return log_sigmoid(x); }
};
struct Softsign : Module {
  array operator()(const array& x) const { return softsign(x); }
};
struct Mish : Module {
  array operator()(const array& x) const { return mish(x); }
};
struct Hardswish : Module {
  array operator()(const array& x) const { return hardswish(x); }
};
struct HardTanh : Module {
  double min_val, max_val;
  explicit HardTanh(double min_val = -1.0, double max_val = 1.0);
  array operator()(const array& x) const { return hard_tanh(x, min_val, max_val); }
};
/// Softmax along `axis` (MLX's module always uses the last axis, the default here).
struct Softmax : Module {
  int axis;
  explicit Softmax(int axis = -1) : axis(axis) {}
  array operator()(const array& x) const { return loom::softmax(x, axis); }
};
struct LogSoftmax : Module {
  int axis;
  explicit LogSoftmax(int axis = -1) : axis(axis) {}
  array operator()(const array& x) const { return loom::log_softmax(x, axis); }
};
struct GLU : Module {
  int axis;
  explicit GLU(int axis = -1) : axis(axis) {}
  array operator()(const array& x) const { return glu(x, axis); }
};

}  // namespace loom::nn
