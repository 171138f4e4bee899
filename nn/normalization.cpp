#include "loom/nn/normalization.h"

#include <numeric>
#include <stdexcept>

#include "loom/fast/fast.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::nn {

using loom::detail::msg;
using loom::detail::shape_str;

namespace {

void check_positive(const char* layer, const char* what, int v) {
  if (v <= 0) throw std::invalid_argument(msg("[nn::", layer, "] ", what, " must be positive, got ", v));
}

void check_eps(const char* layer, double eps) {
  if (!(eps >= 0)) throw std::invalid_argument(msg("[nn::", layer, "] eps must be >= 0, got ", eps));
}

void check_last_axis(const char* layer, const array& x, int dims, size_t min_ndim, const char* layout) {
  if (x.ndim() < min_ndim || x.shape(-1) != dims) {
    throw std::invalid_argument(msg("[nn::", layer, "] expected input ", layout, dims, "), got shape ",
                                    shape_str(x.shape())));
  }
}

// Statistics are computed in float32 (float64 for float64 inputs): a half-precision input is cast up
// first, so squares cannot overflow, and the result is cast back to its dtype (integers give float32).
array upcast(const array& x) {
  const Dtype d = x.dtype() == float64 ? float64 : float32;
  return x.dtype() == d ? x : astype(x, d);
}
array cast_back(const array& y, Dtype input_dtype) {
  const Dtype d = is_floating_point(input_dtype) ? input_dtype : float32;
  return y.dtype() == d ? y : astype(y, d);
}

// y * weight + bias, each optional.
array affine(array y, const std::optional<array>& weight, const std::optional<array>& bias) {
  if (weight) y = y * *weight;
  if (bias) y = y + *bias;
  return y;
}

// (x - mean) / sqrt(var + eps) over `axes` (kept as size 1), reusing x - mean for the variance.
array normalize(const array& x, const std::vector<int>& axes, double eps) {
  array centered = x - mean(x, axes, true);
  return centered * rsqrt(mean(square(centered), axes, true) + eps);
}

}  // namespace

// ---- LayerNorm ----

LayerNorm::LayerNorm(int dims, double eps, bool affine, bool with_bias) : dims(dims), eps(eps) {
  check_positive("LayerNorm", "dims", dims);
  check_eps("LayerNorm", eps);
  if (affine) {
    weight = ones({dims});
    register_parameter("weight", *weight);
    if (with_bias) {
      bias = zeros({dims});
      register_parameter("bias", *bias);
    }
  }
}

array LayerNorm::operator()(const array& x) const {
  check_last_axis("LayerNorm", x, dims, 1, "(..., ");
  return cast_back(fast::layer_norm(upcast(x), weight, bias, eps), x.dtype());
}

// ---- RMSNorm ----

RMSNorm::RMSNorm(int dims, double eps) : weight(ones({dims > 0 ? dims : 1})), eps(eps) {
  check_positive("RMSNorm", "dims", dims);
  check_eps("RMSNorm", eps);
  register_parameter("weight", weight);
}

array RMSNorm::operator()(const array& x) const {
  check_last_axis("RMSNorm", x, weight.shape(0), 1, "(..., ");
  return cast_back(fast::rms_norm(upcast(x), weight, eps), x.dtype());
}

// ---- BatchNorm ----

BatchNorm::BatchNorm(int num_features, double eps, double momentum, bool affine, bool track_running_stats)
    : num_features(num_features), eps(eps), momentum(momentum) {
  check_positive("BatchNorm", "num_features", num_features);
  check_eps("BatchNorm", eps);
  if (!(momentum >= 0 && momentum <= 1)) {
    throw std::invalid_argument(msg("[nn::BatchNorm] momentum must be in [0, 1], got ", momentum));
  }
  if (affine) {
    weight = ones({num_features});
    bias = zeros({num_features});
    register_parameter("weight", *weight);
    register_parameter("bias", *bias);
  }
  if (track_running_stats) {
    running_mean = zeros({num_features});
    running_var = ones({num_features});
    register_buffer("running_mean", *running_mean);
    register_buffer("running_var", *running_var);
  }
}

array BatchNorm::operator()(const array& x_in) {
  check_last_axis("BatchNorm", x_in, num_features, 2, "(N, ..., ");
  const array x = upcast(x_in);
  array y = x;
  if (training() || !running_mean) {
    if (x.size() == 0) {
      throw std::invalid_argument(msg("[nn::BatchNorm] batch statistics need at least one sample, got shape ",
                                      shape_str(x.shape())));
    }
    std::vector<int> axes(x.ndim() - 1);
    std::iota(axes.begin(), axes.end(), 0);
    array mu = mean(x, axes, true);
    array centered = x - mu;
    array var = mean(square(centered), axes, true);
    y = centered * rsqrt(var + eps);
    if (training() && running_mean) {
      auto stat = [&](const array& s, const array& running) {
        return astype(stop_gradient(reshape(s, {num_features})), running.dtype());
      };
      *running_mean = *running_mean * (1.0 - momentum) + stat(mu, *running_mean) * momentum;
      *running_var = *running_var * (1.0 - momentum) + stat(var, *running_var) * momentum;
    }
  } else {
    y = (x - *running_mean) * rsqrt(*running_var + eps);
  }
  return cast_back(affine(y, weight, bias), x_in.dtype());
}

// ---- GroupNorm ----

GroupNorm::GroupNorm(int num_groups, int dims, double eps, bool affine, bool pytorch_compatible)
    : num_groups(num_groups), dims(dims), eps(eps), pytorch_compatible(pytorch_compatible) {
  check_positive("GroupNorm", "num_groups", num_groups);
  check_positive("GroupNorm", "dims", dims);
  check_eps("GroupNorm", eps);
  if (dims % num_groups != 0) {
    throw std::invalid_argument(msg("[nn::GroupNorm] num_groups ", num_groups, " must divide dims ", dims));
  }
  if (affine) {
    weight = ones({dims});
    bias = zeros({dims});
    register_parameter("weight", *weight);
    register_parameter("bias", *bias);
  }
}

array GroupNorm::operator()(const array& x) const {
  check_last_axis("GroupNorm", x, dims, 2, "(N, ..., ");
  const int group_size = dims / num_groups;
  int spatial = 1;
  for (size_t i = 1; i + 1 < x.ndim(); ++i) spatial *= x.shape(static_cast<int>(i));
  // Channel c = g * group_size + j (PyTorch) or j * num_groups + g (MLX): split the channel axis so the
  // group index g is its own axis and reduce over the spatial positions and j.
  const array xc = upcast(x);
  array grouped = pytorch_compatible ? reshape(xc, {x.shape(0), spatial, num_groups, group_size})
                                     : reshape(xc, {x.shape(0), spatial, group_size, num_groups});
  std::vector<int> axes = pytorch_compatible ? std::vector<int>{1, 3} : std::vector<int>{1, 2};
  return cast_back(affine(reshape(normalize(grouped, axes, eps), x.shape()), weight, bias), x.dtype());
}

}  // namespace loom::nn
