// Parameter initializers, drawn from the global random state (reproducible from random::seed).
// Fans follow the weight layouts of nn: Linear (out, in), Conv (out, kernel..., in):
// fan_in = product of every axis but the first, fan_out = shape[0] * product of the kernel axes.
#pragma once

#include <utility>

#include "loom/core/array.h"

namespace loom::nn::init {

/// (fan_in, fan_out) of a weight shape with at least 2 axes.
std::pair<double, double> fans(const Shape& shape);

array constant(const Shape& shape, double value, Dtype dtype = float32);
array normal(const Shape& shape, double mean = 0.0, double std = 1.0, Dtype dtype = float32);
array uniform(const Shape& shape, double low = 0.0, double high = 1.0, Dtype dtype = float32);
/// U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).
array glorot_uniform(const Shape& shape, double gain = 1.0, Dtype dtype = float32);
/// N(0, s) with s = gain * sqrt(2 / (fan_in + fan_out)).
array glorot_normal(const Shape& shape, double gain = 1.0, Dtype dtype = float32);
/// U(-a, a) with a = gain * sqrt(3 / fan) and fan = fan_in (or fan_out); gain sqrt(2) suits ReLU.
array he_uniform(const Shape& shape, double gain = 1.4142135623730951, bool fan_in = true, Dtype dtype = float32);
/// N(0, s) with s = gain / sqrt(fan).
array he_normal(const Shape& shape, double gain = 1.4142135623730951, bool fan_in = true, Dtype dtype = float32);

}  // namespace loom::nn::init
