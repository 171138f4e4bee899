#include "loom/nn/linear.h"

#include <cmath>
#include <stdexcept>

#include "loom/nn/init.h"
#include "loom/ops/indexing.h"
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

namespace {
array bilinear_weight(int input1_dims, int input2_dims, int output_dims) {
  if (input1_dims <= 0 || input2_dims <= 0 || output_dims <= 0) {
    throw std::invalid_argument(detail::msg("[nn::Bilinear] dimensions must be positive, got input1_dims ", input1_dims,
                                            ", input2_dims ", input2_dims, " and output_dims ", output_dims));
  }
  double k = 1.0 / std::sqrt(static_cast<double>(input1_dims));
  return init::uniform({output_dims, input2_dims, input1_dims}, -k, k);
}

array embedding_weight(int num_embeddings, int dims) {
  if (num_embeddings <= 0 || dims <= 0) {
    throw std::invalid_argument(detail::msg("[nn::Embedding] num_embeddings and dims must be positive, got ",
                                            num_embeddings, " and ", dims));
  }
  return init::normal({num_embeddings, dims}, 0.0, std::sqrt(1.0 / dims));
}
}  // namespace

Bilinear::Bilinear(int input1_dims, int input2_dims, int output_dims, bool with_bias)
    : weight(bilinear_weight(input1_dims, input2_dims, output_dims)) {
  register_parameter("weight", weight);
  if (with_bias) {
    double k = 1.0 / std::sqrt(static_cast<double>(input1_dims));
    bias = init::uniform({output_dims}, -k, k);
    register_parameter("bias", *bias);
  }
}

array Bilinear::operator()(const array& x1, const array& x2) const {
  const int out = weight.shape(0), in2 = weight.shape(1), in1 = weight.shape(2);
  const bool ok = x1.ndim() >= 1 && x2.ndim() >= 1 && x1.shape().back() == in1 && x2.shape().back() == in2 &&
                  Shape(x1.shape().begin(), x1.shape().end() - 1) == Shape(x2.shape().begin(), x2.shape().end() - 1);
  if (!ok) {
    throw std::invalid_argument(detail::msg("[nn::Bilinear] expected x1 (..., ", in1, ") and x2 (..., ", in2,
                                            ") with the same leading axes, got shapes ", detail::shape_str(x1.shape()),
                                            " and ", detail::shape_str(x2.shape())));
  }
  Shape out_shape(x1.shape().begin(), x1.shape().end() - 1);
  int batch = 1;
  for (int d : out_shape) batch *= d;
  out_shape.push_back(out);
  // (B, in1) @ (in1, out * in2) -> (B, out, in2), then a batched (B, out, in2) @ (B, in2, 1).
  array t = matmul(reshape(x1, {batch, in1}), transpose(reshape(weight, {out * in2, in1})));
  array y = matmul(reshape(t, {batch, out, in2}), reshape(x2, {batch, in2, 1}));
  y = reshape(y, out_shape);
  return bias ? y + *bias : y;
}

Embedding::Embedding(int num_embeddings, int dims) : weight(embedding_weight(num_embeddings, dims)) {
  register_parameter("weight", weight);
}

array Embedding::operator()(const array& indices) const {
  if (!is_integral(indices.dtype())) {
    throw std::invalid_argument(detail::msg("[nn::Embedding] indices must have an integer dtype, got ",
                                            indices.dtype()));
  }
  return take(weight, indices, 0);
}

array Embedding::as_linear(const array& x) const {
  const int dims = weight.shape(1);
  if (x.ndim() < 1 || x.shape().back() != dims) {
    throw std::invalid_argument(detail::msg("[nn::Embedding::as_linear] expected input with last axis ", dims,
                                            ", got shape ", detail::shape_str(x.shape())));
  }
  return matmul(x, transpose(weight));
}

}  // namespace loom::nn
