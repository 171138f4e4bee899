#include "loom/nn/init.h"

#include <cmath>
#include <stdexcept>

#include "loom/ops/ops.h"
#include "loom/ops/random.h"

namespace loom::nn::init {

std::pair<double, double> fans(const Shape& shape) {
  if (shape.size() < 2) {
    throw std::invalid_argument("[nn::init] fans need a weight with at least 2 axes, got shape " +
                                detail::shape_str(shape));
  }
  double receptive = 1;
  for (size_t i = 1; i + 1 < shape.size(); ++i) receptive *= shape[i];
  return {receptive * shape.back(), receptive * shape[0]};
}

array constant(const Shape& shape, double value, Dtype dtype) { return full(shape, value, dtype); }

array normal(const Shape& shape, double mean, double std, Dtype dtype) {
  if (!(std >= 0)) throw std::invalid_argument("[nn::init::normal] std must be >= 0, got " + std::to_string(std));
  return random::normal(shape, dtype, static_cast<float>(mean), static_cast<float>(std));
}

array uniform(const Shape& shape, double low, double high, Dtype dtype) {
  if (!(low <= high)) {
    throw std::invalid_argument("[nn::init::uniform] low " + std::to_string(low) + " > high " + std::to_string(high));
  }
  return random::uniform(low, high, shape, dtype);
}

array glorot_uniform(const Shape& shape, double gain, Dtype dtype) {
  auto [fi, fo] = fans(shape);
  double a = gain * std::sqrt(6.0 / (fi + fo));
  return uniform(shape, -a, a, dtype);
}

array glorot_normal(const Shape& shape, double gain, Dtype dtype) {
  auto [fi, fo] = fans(shape);
  return normal(shape, 0.0, gain * std::sqrt(2.0 / (fi + fo)), dtype);
}

array he_uniform(const Shape& shape, double gain, bool fan_in, Dtype dtype) {
  auto [fi, fo] = fans(shape);
  double a = gain * std::sqrt(3.0 / (fan_in ? fi : fo));
  return uniform(shape, -a, a, dtype);
}

array he_normal(const Shape& shape, double gain, bool fan_in, Dtype dtype) {
  auto [fi, fo] = fans(shape);
  return normal(shape, 0.0, gain / std::sqrt(fan_in ? fi : fo), dtype);
}

}  // namespace loom::nn::init
