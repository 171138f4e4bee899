#include "loom/nn/quantized.h"

#include <cmath>
#include <stdexcept>

#include "loom/nn/init.h"
#include "loom/ops/indexing.h"
#include "loom/ops/ops.h"
#include "loom/ops/quantized.h"
#include "loom/ops/utils.h"

namespace loom::nn {

using detail::msg;

// MLX's _defaults_for_mode (quantize checks the values themselves).
std::pair<int, int> quantization_defaults(const std::string& mode, std::optional<int> gs, std::optional<int> bits,
                                          const char* op) {
  int dg, db = 4;
  if (mode == "affine") {
    dg = 64;
  } else if (mode == "mxfp4") {
    dg = 32;
  } else if (mode == "nvfp4") {
    dg = 16;
  } else if (mode == "mxfp8") {
    dg = 32, db = 8;
  } else {
    throw std::invalid_argument(
        msg("[", op, "] invalid quantization mode '", mode, "'; valid modes are affine, mxfp4, nvfp4, mxfp8"));
  }
  return {gs.value_or(dg), bits.value_or(db)};
}

namespace {

void check_dims(int a, int b, const char* op, const char* na, const char* nb) {
  if (a <= 0 || b <= 0) throw std::invalid_argument(msg("[", op, "] ", na, " and ", nb, " must be positive, got ", a, " and ", b));
}

}  // namespace

QuantizedLinear::QuantizedLinear(int input_dims, int output_dims, bool with_bias, std::optional<int> gs,
                                 std::optional<int> nbits, const std::string& mode_)
    : weight(zeros({0})), scales(zeros({0})), mode(mode_) {
  check_dims(input_dims, output_dims, "nn::QuantizedLinear", "input_dims", "output_dims");
  std::tie(group_size, bits) = quantization_defaults(mode, gs, nbits, "nn::QuantizedLinear");
  const double k = 1.0 / std::sqrt(static_cast<double>(input_dims));
  auto q = loom::quantize(init::uniform({output_dims, input_dims}, -k, k), group_size, bits, mode);
  weight = q[0];
  scales = q[1];
  register_parameter("weight", weight);
  register_parameter("scales", scales);
  if (q.size() > 2) {
    biases = q[2];
    register_parameter("biases", *biases);
  }
  if (with_bias) {
    bias = zeros({output_dims});
    register_parameter("bias", *bias);
  }
  freeze();
}

int QuantizedLinear::input_dims() const { return int(int64_t(weight.shape(1)) * 32 / bits); }

array QuantizedLinear::operator()(const array& x) const {
  if (x.ndim() < 1 || x.shape().back() != input_dims()) {
    throw std::invalid_argument(msg("[nn::QuantizedLinear] expected input with last axis ", input_dims(), ", got shape ",
                                    detail::shape_str(x.shape())));
  }
  array y = quantized_matmul(x, weight, scales, biases, true, group_size, bits, mode);
  return bias ? add(y, *bias) : y;
}

std::shared_ptr<QuantizedLinear> QuantizedLinear::from_linear(const Linear& linear, std::optional<int> gs,
                                                              std::optional<int> nbits, const std::string& mode) {
  const int out = linear.weight.shape(0), in = linear.weight.shape(1);
  auto ql = std::make_shared<QuantizedLinear>(in, out, false, gs, nbits, mode);
  auto q = loom::quantize(linear.weight, ql->group_size, ql->bits, mode);
  ql->weight = q[0];
  ql->scales = q[1];
  if (q.size() > 2) *ql->biases = q[2];
  if (linear.bias) {
    ql->bias = *linear.bias;
    ql->register_parameter("bias", *ql->bias);  // registered after the constructor froze the rest: trainable (MLX)
  }
  return ql;
}

QuantizedEmbedding::QuantizedEmbedding(int num_embeddings, int dims, std::optional<int> gs, std::optional<int> nbits,
                                       const std::string& mode_)
    : weight(zeros({0})), scales(zeros({0})), mode(mode_) {
  check_dims(num_embeddings, dims, "nn::QuantizedEmbedding", "num_embeddings", "dims");
  std::tie(group_size, bits) = quantization_defaults(mode, gs, nbits, "nn::QuantizedEmbedding");
  auto q = loom::quantize(init::normal({num_embeddings, dims}, 0.0, std::sqrt(1.0 / dims)), group_size, bits, mode);
  weight = q[0];
  scales = q[1];
  register_parameter("weight", weight);
  register_parameter("scales", scales);
  if (q.size() > 2) {
    biases = q[2];
    register_parameter("biases", *biases);
  }
  freeze();
}

array QuantizedEmbedding::operator()(const array& indices) const {
  if (!is_integral(indices.dtype())) {
    throw std::invalid_argument(msg("[nn::QuantizedEmbedding] indices must have an integer dtype, got ", indices.dtype()));
  }
  std::optional<array> b;
  if (biases) b = take(*biases, indices, 0);
  return dequantize(take(weight, indices, 0), take(scales, indices, 0), b, group_size, bits, mode);
}

array QuantizedEmbedding::as_linear(const array& x) const {
  return quantized_matmul(x, weight, scales, biases, true, group_size, bits, mode);
}

std::shared_ptr<QuantizedEmbedding> QuantizedEmbedding::from_embedding(const Embedding& embedding, std::optional<int> gs,
                                                                       std::optional<int> nbits, const std::string& mode) {
  auto qe = std::make_shared<QuantizedEmbedding>(embedding.weight.shape(0), embedding.weight.shape(1), gs, nbits, mode);
  auto q = loom::quantize(embedding.weight, qe->group_size, qe->bits, mode);
  qe->weight = q[0];
  qe->scales = q[1];
  if (q.size() > 2) *qe->biases = q[2];
  return qe;
}

std::shared_ptr<Module> to_quantized(const Module& layer, std::optional<int> gs, std::optional<int> bits,
                                     const std::string& mode) {
  if (auto* l = dynamic_cast<const Linear*>(&layer)) return QuantizedLinear::from_linear(*l, gs, bits, mode);
  if (auto* e = dynamic_cast<const Embedding*>(&layer)) return QuantizedEmbedding::from_embedding(*e, gs, bits, mode);
  throw std::invalid_argument("[nn::to_quantized] only Linear and Embedding layers can be quantized");
}

ParamTree quantize(Module& model, std::optional<int> gs, std::optional<int> bits, const std::string& mode,
                   const QuantizePredicate& class_predicate) {
  const auto [group_size, nbits] = quantization_defaults(mode, gs, bits, "nn::quantize");
  ParamTree params = model.parameters();
  ParamTree out;
  // The quantized entries of each converted layer, by its path.
  std::vector<std::pair<std::string, std::vector<array>>> converted;
  for (auto& [path, m] : model.modules()) {
    const bool quantizable = dynamic_cast<const Linear*>(m) || dynamic_cast<const Embedding*>(m);
    if (class_predicate ? !class_predicate(path, *m) : !quantizable) continue;
    if (!quantizable) {
      throw std::invalid_argument(msg("[nn::quantize] the predicate chose '", path,
                                      "', which is not a Linear or an Embedding and cannot be quantized"));
    }
    converted.emplace_back(path, loom::quantize(params.at(path + ".weight"), group_size, nbits, mode));
  }
  for (const auto& [name, value] : params) {
    bool done = false;
    for (const auto& [path, q] : converted) {
      if (name == path + ".weight") {
        out.insert(name, q[0]);
        out.insert(path + ".scales", q[1]);
        if (q.size() > 2) out.insert(path + ".biases", q[2]);
        done = true;
      }
    }
    if (!done) out.insert(name, value);
  }
  return out;
}

}  // namespace loom::nn
