#include "loom/nn/transformer.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "loom/nn/activations.h"
#include "loom/nn/distributed.h"
#include "loom/fast/fast.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/ops/utils.h"

namespace loom::nn {

using loom::detail::msg;
using loom::detail::shape_str;

namespace {

// Validates MultiHeadAttention's sizes before any projection is built; returns num_heads.
int checked_heads(int dims, int num_heads, std::initializer_list<std::optional<int>> optional_dims,
                  std::optional<int> value_dims) {
  if (dims <= 0 || num_heads <= 0) {
    throw std::invalid_argument(msg("[nn::MultiHeadAttention] dims and num_heads must be positive, got dims ", dims,
                                    " and num_heads ", num_heads));
  }
  for (const auto& d : optional_dims) {
    if (d && *d <= 0) {
      throw std::invalid_argument(msg("[nn::MultiHeadAttention] input and output dims must be positive, got ", *d));
    }
  }
  if (dims % num_heads != 0) {
    throw std::invalid_argument(msg("[nn::MultiHeadAttention] num_heads ", num_heads, " must divide dims ", dims));
  }
  if (value_dims && *value_dims % num_heads != 0) {
    throw std::invalid_argument(msg("[nn::MultiHeadAttention] num_heads ", num_heads, " must divide value_dims ",
                                    *value_dims));
  }
  return num_heads;
}

// The most negative finite value of a floating dtype, as a double (exactly representable in it).
double lowest_finite(Dtype dtype) {
  if (dtype == float16) return -65504.0;
  if (dtype == bfloat16) return -3.3895313892515355e38;
  if (dtype == float32) return -static_cast<double>(std::numeric_limits<float>::max());
  return std::numeric_limits<double>::lowest();
}

// x[..., start:stop:step] along the last axis.
array slice_last(const array& x, int start, int stop, int step = 1) {
  Shape lo(x.ndim(), 0), hi = x.shape(), steps(x.ndim(), 1);
  lo.back() = start;
  hi.back() = stop;
  steps.back() = step;
  return slice(x, lo, hi, steps);
}

array make_sigmas(int dims, double min_freq, double max_freq, bool full_turns) {
  if (dims < 4 || dims % 2 != 0) {
    throw std::invalid_argument(msg("[nn::SinusoidalPositionalEncoding] dims must be even and at least 4, got ", dims));
  }
  if (!(min_freq > 0) || !(max_freq > 0)) {
    throw std::invalid_argument(msg("[nn::SinusoidalPositionalEncoding] min_freq and max_freq must be positive, got ",
                                    min_freq, " and ", max_freq));
  }
  const int half = dims / 2;
  const double lo = std::log(min_freq), hi = std::log(max_freq);
  std::vector<double> sig(half);
  for (int i = 0; i < half; ++i) {
    double one_zero = 1.0 - static_cast<double>(i) / (half - 1);
    sig[i] = std::exp(one_zero * (hi - lo) + lo) * (full_turns ? 2 * M_PI : 1.0);
  }
  return array(sig, {half}, float32);
}

}  // namespace

// ---- MultiHeadAttention ----

MultiHeadAttention::MultiHeadAttention(int dims, int num_heads, std::optional<int> query_input_dims,
                                       std::optional<int> key_input_dims, std::optional<int> value_input_dims,
                                       std::optional<int> value_dims, std::optional<int> value_output_dims, bool bias)
    : num_heads(checked_heads(dims, num_heads,
                              {query_input_dims, key_input_dims, value_input_dims, value_dims, value_output_dims},
                              value_dims)),
      query_proj(query_input_dims.value_or(dims), dims, bias),
      key_proj(key_input_dims.value_or(dims), dims, bias),
      value_proj(value_input_dims.value_or(key_input_dims.value_or(dims)), value_dims.value_or(dims), bias),
      out_proj(value_dims.value_or(dims), value_output_dims.value_or(dims), bias) {
  register_module("query_proj", query_proj);
  register_module("key_proj", key_proj);
  register_module("value_proj", value_proj);
  register_module("out_proj", out_proj);
}

array MultiHeadAttention::operator()(const array& queries, const array& keys, const array& values,
                                     const std::optional<array>& mask) const {
  const int qin = query_proj.weight.shape(1), kin = key_proj.weight.shape(1), vin = value_proj.weight.shape(1);
  const bool ok = queries.ndim() == 3 && keys.ndim() == 3 && values.ndim() == 3 && queries.shape(2) == qin &&
                  keys.shape(2) == kin && values.shape(2) == vin && keys.shape(0) == queries.shape(0) &&
                  values.shape(0) == queries.shape(0) && keys.shape(1) == values.shape(1);
  if (!ok) {
    throw std::invalid_argument(msg("[nn::MultiHeadAttention] expected queries (B, L, ", qin, "), keys (B, S, ", kin,
                                    ") and values (B, S, ", vin, "), got queries ", shape_str(queries.shape()),
                                    ", keys ", shape_str(keys.shape()), " and values ", shape_str(values.shape())));
  }
  const int B = queries.shape(0), L = queries.shape(1), S = keys.shape(1), H = num_heads;
  const int dk = query_proj.weight.shape(0) / H, dv = value_proj.weight.shape(0) / H;
  if (mask) {
    const Shape scores_shape{B, H, L, S};
    if (!loom::detail::broadcasts_to(mask->shape(), scores_shape)) {
      throw std::invalid_argument(msg("[nn::MultiHeadAttention] the mask of shape ", shape_str(mask->shape()),
                                      " does not broadcast to the scores (B, num_heads, L, S) = ",
                                      shape_str(scores_shape)));
    }
  }
  // Self-attention projects one input three ways: one GEMM as wide as the three projections together
  // (its weight is the three weights stacked), whose column blocks are q, k and v. Split across a
  // group, each rank projects to its own heads, and the inputs' gradients are summed over the ranks.
  array qp = group ? sum_gradients(queries, group) : queries;
  array kp = keys.id() == queries.id() ? qp : group ? sum_gradients(keys, group) : keys;
  array vp = values.id() == queries.id() ? qp : values.id() == keys.id() ? kp : group ? sum_gradients(values, group) : values;
  const bool biases = query_proj.bias.has_value() == key_proj.bias.has_value() &&
                      key_proj.bias.has_value() == value_proj.bias.has_value();
  if (queries.id() == keys.id() && keys.id() == values.id() && qin == kin && kin == vin && biases) {
    array w = concatenate({query_proj.weight, key_proj.weight, value_proj.weight}, 0);
    array y = query_proj.bias ? addmm(concatenate({*query_proj.bias, *key_proj.bias, *value_proj.bias}, 0), qp,
                                      transpose(w))
                              : matmul(qp, transpose(w));
    auto parts = split(y, {H * dk, 2 * H * dk}, 2);
    qp = parts[0], kp = parts[1], vp = parts[2];
  } else {
    qp = query_proj(qp), kp = key_proj(kp), vp = value_proj(vp);
  }
  // Heads as a batch axis: q (B, H, L, dk), k (B, H, S, dk), v (B, H, S, dv), all views of the projections.
  array q = transpose(reshape(qp, {B, L, H, dk}), {0, 2, 1, 3});
  array k = transpose(reshape(kp, {B, S, H, dk}), {0, 2, 1, 3});
  array v = transpose(reshape(vp, {B, S, H, dv}), {0, 2, 1, 3});
  // One fused kernel: softmax(q k^T / sqrt(dk) + mask) v, (B, H, L, dv) laid out as (B, L, H, dv).
  array out = fast::scaled_dot_product_attention(q, k, v, 1.0 / std::sqrt(static_cast<double>(dk)), mask);
  array heads = reshape(transpose(out, {0, 2, 1, 3}), {B, L, H * dv});
  return group ? sharded_to_all_linear(heads, out_proj.weight, out_proj.bias, group) : out_proj(heads);
}

namespace {
distributed::Group shard_group(const std::optional<distributed::Group>& requested, bool split_already,
                               const char* op) {
  distributed::Group g = requested ? *requested : distributed::init();
  if (split_already) throw std::invalid_argument(msg("[", op, "] the layer is split already"));
  return g;
}

void check_split(int n, const distributed::Group& g, const char* op, const char* what) {
  if (n % g.size() != 0) {
    throw std::invalid_argument(msg("[", op, "] cannot split ", what, " ", n, " among a group of ", g.size()));
  }
}
}  // namespace

void MultiHeadAttention::shard(std::optional<distributed::Group> requested) {
  const distributed::Group g = shard_group(requested, group.has_value(), "nn::MultiHeadAttention::shard");
  if (g.size() == 1) return;
  check_split(num_heads, g, "nn::MultiHeadAttention::shard", "num_heads");
  // Head h owns rows h * head_dim ... of the projections, so rank r's rows are its heads'.
  for (Linear* proj : {&query_proj, &key_proj, &value_proj}) shard_inplace(*proj, "all-to-sharded", 1, g);
  shard_inplace(out_proj, "sharded-to-all", 1, g);
  num_heads /= g.size();
  group = g;
}

array MultiHeadAttention::create_additive_causal_mask(int N, Dtype dtype) {
  if (N < 0) throw std::invalid_argument(msg("[nn::MultiHeadAttention::create_additive_causal_mask] N must be >= 0, got ", N));
  if (!is_floating_point(dtype)) {
    throw std::invalid_argument(msg("[nn::MultiHeadAttention::create_additive_causal_mask] dtype must be floating point, got ",
                                    dtype));
  }
  const double low = lowest_finite(dtype);
  std::vector<double> m(static_cast<size_t>(N) * N, 0.0);
  for (int i = 0; i < N; ++i) {
    for (int j = i + 1; j < N; ++j) m[static_cast<size_t>(i) * N + j] = low;
  }
  return array(m, {N, N}, dtype);
}

// ---- TransformerEncoderLayer ----

namespace {
int checked_mlp_dims(int dims, std::optional<int> mlp_dims) {
  int m = mlp_dims.value_or(4 * dims);
  if (m <= 0) throw std::invalid_argument(msg("[nn::TransformerEncoderLayer] mlp_dims must be positive, got ", m));
  return m;
}
}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int dims, int num_heads, std::optional<int> mlp_dims, double dropout,
                                                 std::function<array(const array&)> activation, bool norm_first)
    : attention(dims, num_heads),
      ln1(dims),
      ln2(dims),
      linear1(dims, checked_mlp_dims(dims, mlp_dims)),
      linear2(checked_mlp_dims(dims, mlp_dims), dims),
      dropout1(dropout),
      dropout2(dropout),
      activation(activation ? std::move(activation) : std::function<array(const array&)>(relu)),
      norm_first(norm_first) {
  register_module("attention", attention);
  register_module("ln1", ln1);
  register_module("ln2", ln2);
  register_module("linear1", linear1);
  register_module("linear2", linear2);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
}

array TransformerEncoderLayer::operator()(const array& x, const std::optional<array>& mask) const {
  const int dims = ln1.dims;
  if (x.ndim() != 3 || x.shape(2) != dims) {
    throw std::invalid_argument(msg("[nn::TransformerEncoderLayer] expected input (B, L, ", dims, "), got shape ",
                                    shape_str(x.shape())));
  }
  auto mlp = [&](const array& h) {
    if (!group) return linear2(dropout2(activation(linear1(h))));
    array a = activation(all_to_sharded_linear(h, linear1.weight, linear1.bias, group));
    if (dropout2.training() && dropout2.p > 0) {
      // The whole mask, as the unsplit layer draws it, and this rank's columns of it.
      Shape whole = a.shape();
      whole.back() *= group->size();
      const int last = static_cast<int>(whole.size()) - 1;
      array keep = split(random::bernoulli(1.0 - dropout2.p, whole), group->size(), last)[group->rank()];
      a = where(keep, a * (1.0 / (1.0 - dropout2.p)), array(0, a.dtype()));
    }
    return sharded_to_all_linear(a, linear2.weight, linear2.bias, group);
  };
  if (norm_first) {
    array h = ln1(x);
    array y = x + dropout1(attention(h, h, h, mask));
    return y + mlp(ln2(y));
  }
  array y = ln1(x + dropout1(attention(x, x, x, mask)));
  return ln2(y + mlp(y));
}

void TransformerEncoderLayer::shard(std::optional<distributed::Group> requested) {
  const char* op = "nn::TransformerEncoderLayer::shard";
  const distributed::Group g = shard_group(requested, group.has_value() || attention.group.has_value(), op);
  if (g.size() == 1) return;
  check_split(attention.num_heads, g, op, "num_heads");
  check_split(linear1.weight.shape(0), g, op, "mlp_dims");
  attention.shard(g);
  shard_inplace(linear1, "all-to-sharded", 1, g);
  shard_inplace(linear2, "sharded-to-all", 1, g);
  group = g;
}

// ---- TransformerEncoder ----

TransformerEncoder::TransformerEncoder(int num_layers, int dims, int num_heads, std::optional<int> mlp_dims,
                                       double dropout, std::function<array(const array&)> activation, bool norm_first)
    : ln(dims) {
  if (num_layers < 0) {
    throw std::invalid_argument(msg("[nn::TransformerEncoder] num_layers must be >= 0, got ", num_layers));
  }
  for (int i = 0; i < num_layers; ++i) {
    layers.push_back(
        std::make_unique<TransformerEncoderLayer>(dims, num_heads, mlp_dims, dropout, activation, norm_first));
    register_module("layers." + std::to_string(i), *layers.back());
  }
  register_module("ln", ln);
}

array TransformerEncoder::operator()(const array& x, const std::optional<array>& mask) const {
  array y = x;
  for (const auto& layer : layers) y = (*layer)(y, mask);
  return ln(y);
}

void TransformerEncoder::shard(std::optional<distributed::Group> group) {
  for (auto& layer : layers) layer->shard(group);
}

// ---- RoPE ----

RoPE::RoPE(int dims, bool traditional, double base, double scale)
    : dims(dims), traditional(traditional), base(base), scale(scale) {
  if (dims <= 0 || dims % 2 != 0) {
    throw std::invalid_argument(msg("[nn::RoPE] dims must be positive and even, got ", dims));
  }
  if (!(base > 0)) throw std::invalid_argument(msg("[nn::RoPE] base must be positive, got ", base));
}

array RoPE::operator()(const array& x_in, int offset) const {
  if (x_in.ndim() < 2 || x_in.shape(-1) < dims) {
    throw std::invalid_argument(msg("[nn::RoPE] expected input (..., L, D) with D >= dims = ", dims, ", got shape ",
                                    shape_str(x_in.shape())));
  }
  const array x = is_floating_point(x_in.dtype()) ? x_in : astype(x_in, float32);
  const int L = x.shape(-2), D = x.shape(-1), half = dims / 2;
  // cos and sin of the angles, (L, dims / 2), computed on the host in double.
  std::vector<double> inv_freq(half), c(static_cast<size_t>(L) * half), s(c.size());
  for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(base, -2.0 * i / dims);
  for (int l = 0; l < L; ++l) {
    const double pos = (static_cast<double>(offset) + l) * scale;
    for (int i = 0; i < half; ++i) {
      const double theta = pos * inv_freq[i];
      c[static_cast<size_t>(l) * half + i] = std::cos(theta);
      s[static_cast<size_t>(l) * half + i] = std::sin(theta);
    }
  }
  const array cos_t(c, {L, half}, x.dtype()), sin_t(s, {L, half}, x.dtype());
  const array x1 = traditional ? slice_last(x, 0, dims, 2) : slice_last(x, 0, half);
  const array x2 = traditional ? slice_last(x, 1, dims, 2) : slice_last(x, half, dims);
  const array r1 = x1 * cos_t - x2 * sin_t;
  const array r2 = x1 * sin_t + x2 * cos_t;
  array rotated = r1;
  if (traditional) {
    Shape shape = x.shape();
    shape.back() = dims;
    rotated = reshape(stack({r1, r2}, -1), shape);
  } else {
    rotated = concatenate({r1, r2}, -1);
  }
  if (dims == D) return rotated;
  return concatenate({rotated, slice_last(x, dims, D)}, -1);
}

// ---- SinusoidalPositionalEncoding ----

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(int dims, double min_freq, double max_freq,
                                                           std::optional<double> scale, bool cos_first, bool full_turns)
    : sigmas(make_sigmas(dims, min_freq, max_freq, full_turns)),
      scale(scale.value_or(std::sqrt(2.0 / dims))),
      cos_first(cos_first) {}

array SinusoidalPositionalEncoding::operator()(const array& x) const {
  const array xf = is_floating_point(x.dtype()) ? x : astype(x, float32);
  const array y = expand_dims(xf, -1) * sigmas;
  const array sn = sin(y), cs = cos(y);
  array out = cos_first ? concatenate({cs, sn}, -1) : concatenate({sn, cs}, -1);
  return scale == 1.0 ? out : out * scale;
}

}  // namespace loom::nn
