#include "loom/nn/linear.h"

#include <cmath>
#include <stdexcept>

#include "loom/nn/init.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::nn {

namespace {
array checked_uniform_weight(int input_dims, int output_dims) {
  if (input_dims <= 0 || output_dims <= 0) {
    throw std::invalid_argument(detail::msg("[nn::Linear] dimensions must be positive, got input_dims ", input_dims,
                                            " and output_dims ", output_dims));
  }
  double k = 1.0 / std::sqrt(static_cast<double>(input_dims));
  return init::uniform({output_dims, input_dims}, -k, k);
}
}  // namespace

Linear::Linear(int input_dims, int output_dims, bool with_bias)
    : weight(checked_uniform_weight(input_dims, output_dims)) {
  register_parameter("weight", weight);
  if (with_bias) {
    double k = 1.0 / std::sqrt(static_cast<double>(input_dims));
    bias = init::uniform({output_dims}, -k, k);
    register_parameter("bias", *bias);
  }
}

array Linear::operator()(const array& x) const {
  const int in = weight.shape(1);
  if (x.ndim() < 1 || x.shape().back() != in) {
    throw std::invalid_argument("[nn::Linear] expected input with last axis " + std::to_string(in) + ", got shape " +
                                detail::shape_str(x.shape()));
  }
  if (bias) return addmm(*bias, x, transpose(weight));
  return matmul(x, transpose(weight));
}

}  // namespace loom::nn
