#include "loom/nn/conv.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "loom/nn/init.h"
#include "loom/ops/conv.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::nn {

using loom::detail::msg;
using loom::detail::shape_str;

namespace {

void check_conv_args(const char* layer, int in_channels, int out_channels, const std::vector<int>& kernel,
                     const std::vector<int>& stride, const std::vector<int>& padding, const std::vector<int>& dilation,
                     int groups) {
  auto list = [](const std::vector<int>& v) {
    std::string s;
    for (int x : v) s += (s.empty() ? "" : ", ") + std::to_string(x);
    return v.size() == 1 ? s : "(" + s + ")";
  };
  if (in_channels <= 0 || out_channels <= 0) {
    throw std::invalid_argument(msg("[nn::", layer, "] in_channels and out_channels must be positive, got ", in_channels,
                                    " and ", out_channels));
  }
  for (size_t d = 0; d < kernel.size(); ++d) {
    if (kernel[d] < 1 || stride[d] < 1 || padding[d] < 0 || dilation[d] < 1) {
      throw std::invalid_argument(msg("[nn::", layer, "] need kernel_size >= 1, stride >= 1, padding >= 0 and dilation >= 1, got kernel_size ",
                                      list(kernel), ", stride ", list(stride), ", padding ", list(padding),
                                      ", dilation ", list(dilation)));
    }
  }
  if (groups < 1 || in_channels % groups != 0 || out_channels % groups != 0) {
    throw std::invalid_argument(msg("[nn::", layer, "] groups ", groups, " must be positive and divide in_channels ",
                                    in_channels, " and out_channels ", out_channels));
  }
}

// U(-k, k) with k = 1/sqrt(fan_in), fan_in = in_channels / groups * prod(kernel).
array conv_weight(const Shape& shape) {
  double fan_in = 1;
  for (size_t i = 1; i < shape.size(); ++i) fan_in *= shape[i];
  double k = 1.0 / std::sqrt(fan_in);
  return init::uniform(shape, -k, k);
}

array make_conv1d_weight(int in, int out, int k, int stride, int padding, int dilation, int groups) {
  check_conv_args("Conv1d", in, out, {k}, {stride}, {padding}, {dilation}, groups);
  return conv_weight({out, k, in / groups});
}

array make_conv2d_weight(int in, int out, IntOrPair k, IntOrPair stride, IntOrPair padding, IntOrPair dilation,
                         int groups) {
  check_conv_args("Conv2d", in, out, {k.first, k.second}, {stride.first, stride.second},
                  {padding.first, padding.second}, {dilation.first, dilation.second}, groups);
  return conv_weight({out, k.first, k.second, in / groups});
}

// Throws unless the padded, dilated kernel fits in the padded input along every spatial axis.
void check_fits(const char* layer, const array& x, const std::vector<int>& kernel, const std::vector<int>& padding,
                const std::vector<int>& dilation) {
  for (size_t d = 0; d < kernel.size(); ++d) {
    int64_t span = static_cast<int64_t>(dilation[d]) * (kernel[d] - 1) + 1;
    if (x.shape(static_cast<int>(d) + 1) + 2 * static_cast<int64_t>(padding[d]) < span) {
      throw std::invalid_argument(msg("[nn::", layer, "] input of shape ", shape_str(x.shape()),
                                      " is smaller than the kernel: spatial axis ", d + 1, " has size ",
                                      x.shape(static_cast<int>(d) + 1), " with padding ", padding[d],
                                      " but the kernel spans ", span));
    }
  }
}

void check_pool_args(const char* layer, const std::vector<int>& kernel, const std::vector<int>& stride,
                     const std::vector<int>& padding) {
  for (size_t d = 0; d < kernel.size(); ++d) {
    if (kernel[d] < 1 || stride[d] < 1 || padding[d] < 0 || padding[d] > kernel[d] / 2) {
      throw std::invalid_argument(msg("[nn::", layer,
                                      "] need kernel_size >= 1, stride >= 1 and 0 <= padding <= kernel_size / 2, got kernel_size ",
                                      kernel[d], ", stride ", stride[d], ", padding ", padding[d]));
    }
  }
}

void check_pool_input(const char* layer, const array& x, size_t ndim, const char* layout,
                      const std::vector<int>& kernel, const std::vector<int>& padding) {
  if (x.ndim() != ndim) {
    throw std::invalid_argument(msg("[nn::", layer, "] expected input ", layout, ", got shape ", shape_str(x.shape())));
  }
  check_fits(layer, x, kernel, padding, std::vector<int>(kernel.size(), 1));
}

std::vector<int> vec(const IntOrTriple& t) { return {t.first, t.second, t.third}; }
std::vector<int> vec(const IntOrPair& p) { return {p.first, p.second}; }
std::vector<int> vec(const std::tuple<int, int, int>& t) { return {std::get<0>(t), std::get<1>(t), std::get<2>(t)}; }

array make_conv3d_weight(int in, int out, const IntOrTriple& k, const IntOrTriple& stride, const IntOrTriple& padding,
                         const IntOrTriple& dilation) {
  check_conv_args("Conv3d", in, out, vec(k), vec(stride), vec(padding), vec(dilation), 1);
  return conv_weight({out, k.first, k.second, k.third, in});
}

// The transposed layers' arguments: the convolution's checks, and output_padding in [0, max(stride,
// dilation)) as PyTorch requires.
array make_transpose_weight(const char* layer, int in, int out, const std::vector<int>& k,
                            const std::vector<int>& stride, const std::vector<int>& padding,
                            const std::vector<int>& dilation, const std::vector<int>& output_padding) {
  check_conv_args(layer, in, out, k, stride, padding, dilation, 1);
  for (size_t d = 0; d < k.size(); ++d) {
    if (output_padding[d] < 0 || (output_padding[d] >= stride[d] && output_padding[d] >= dilation[d])) {
      throw std::invalid_argument(msg("[nn::", layer, "] output_padding must be >= 0 and smaller than stride or ",
                                      "dilation, got output_padding ", shape_str(output_padding), ", stride ",
                                      shape_str(stride), ", dilation ", shape_str(dilation)));
    }
  }
  Shape shape{out};
  for (int v : k) shape.push_back(v);
  shape.push_back(in);
  return conv_weight(shape);
}

// x must be (N, spatial..., in) with `spatial` spatial axes.
void check_input(const char* layer, const array& x, int spatial, const char* layout, int in) {
  if (static_cast<int>(x.ndim()) != spatial + 2 || x.shape(-1) != in) {
    throw std::invalid_argument(msg("[nn::", layer, "] expected input (N, ", layout, ", ", in, "), got shape ",
                                    shape_str(x.shape())));
  }
}

}  // namespace

// ---- Conv1d ----

Conv1d::Conv1d(int in_channels, int out_channels, int kernel_size, int stride, int padding, int dilation, int groups,
               bool with_bias)
    : weight(make_conv1d_weight(in_channels, out_channels, kernel_size, stride, padding, dilation, groups)),
      stride(stride),
      padding(padding),
      dilation(dilation),
      groups(groups) {
  register_parameter("weight", weight);
  if (with_bias) {
    bias = zeros({out_channels});
    register_parameter("bias", *bias);
  }
}

array Conv1d::operator()(const array& x) const {
  const int in = weight.shape(2) * groups;
  if (x.ndim() != 3 || x.shape(2) != in) {
    throw std::invalid_argument(msg("[nn::Conv1d] expected input (N, L, ", in, "), got shape ", shape_str(x.shape())));
  }
  check_fits("Conv1d", x, {weight.shape(1)}, {padding}, {dilation});
  array y = conv1d(x, weight, stride, padding, dilation, groups);
  return bias ? y + *bias : y;
}

// ---- Conv2d ----

Conv2d::Conv2d(int in_channels, int out_channels, IntOrPair kernel_size, IntOrPair stride, IntOrPair padding,
               IntOrPair dilation, int groups, bool with_bias)
    : weight(make_conv2d_weight(in_channels, out_channels, kernel_size, stride, padding, dilation, groups)),
      stride(stride.pair()),
      padding(padding.pair()),
      dilation(dilation.pair()),
      groups(groups) {
  register_parameter("weight", weight);
  if (with_bias) {
    bias = zeros({out_channels});
    register_parameter("bias", *bias);
  }
}

array Conv2d::operator()(const array& x) const {
  const int in = weight.shape(3) * groups;
  if (x.ndim() != 4 || x.shape(3) != in) {
    throw std::invalid_argument(msg("[nn::Conv2d] expected input (N, H, W, ", in, "), got shape ",
                                    shape_str(x.shape())));
  }
  check_fits("Conv2d", x, {weight.shape(1), weight.shape(2)}, {padding.first, padding.second},
             {dilation.first, dilation.second});
  array y = conv2d(x, weight, stride, padding, dilation, groups);
  return bias ? y + *bias : y;
}

// ---- Conv3d ----

Conv3d::Conv3d(int in_channels, int out_channels, IntOrTriple kernel_size, IntOrTriple stride, IntOrTriple padding,
               IntOrTriple dilation, bool with_bias)
    : weight(make_conv3d_weight(in_channels, out_channels, kernel_size, stride, padding, dilation)),
      stride(stride.tuple()),
      padding(padding.tuple()),
      dilation(dilation.tuple()) {
  register_parameter("weight", weight);
  if (with_bias) {
    bias = zeros({out_channels});
    register_parameter("bias", *bias);
  }
}

array Conv3d::operator()(const array& x) const {
  check_input("Conv3d", x, 3, "D, H, W", weight.shape(4));
  check_fits("Conv3d", x, {weight.shape(1), weight.shape(2), weight.shape(3)}, vec(padding), vec(dilation));
  array y = conv3d(x, weight, stride, padding, dilation);
  return bias ? y + *bias : y;
}

// ---- transposed convolutions ----

ConvTranspose1d::ConvTranspose1d(int in_channels, int out_channels, int kernel_size, int stride, int padding,
                                 int dilation, int output_padding, bool with_bias)
    : weight(make_transpose_weight("ConvTranspose1d", in_channels, out_channels, {kernel_size}, {stride}, {padding},
                                   {dilation}, {output_padding})),
      stride(stride),
      padding(padding),
      dilation(dilation),
      output_padding(output_padding) {
  register_parameter("weight", weight);
  if (with_bias) {
    bias = zeros({out_channels});
    register_parameter("bias", *bias);
  }
}

array ConvTranspose1d::operator()(const array& x) const {
  check_input("ConvTranspose1d", x, 1, "L", weight.shape(2));
  array y = conv_transpose1d(x, weight, stride, padding, dilation, output_padding);
  return bias ? y + *bias : y;
}

ConvTranspose2d::ConvTranspose2d(int in_channels, int out_channels, IntOrPair kernel_size, IntOrPair stride,
                                 IntOrPair padding, IntOrPair dilation, IntOrPair output_padding, bool with_bias)
    : weight(make_transpose_weight("ConvTranspose2d", in_channels, out_channels, vec(kernel_size), vec(stride),
                                   vec(padding), vec(dilation), vec(output_padding))),
      stride(stride.pair()),
      padding(padding.pair()),
      dilation(dilation.pair()),
      output_padding(output_padding.pair()) {
  register_parameter("weight", weight);
  if (with_bias) {
    bias = zeros({out_channels});
    register_parameter("bias", *bias);
  }
}

array ConvTranspose2d::operator()(const array& x) const {
  check_input("ConvTranspose2d", x, 2, "H, W", weight.shape(3));
  array y = conv_transpose2d(x, weight, stride, padding, dilation, output_padding);
  return bias ? y + *bias : y;
}

ConvTranspose3d::ConvTranspose3d(int in_channels, int out_channels, IntOrTriple kernel_size, IntOrTriple stride,
                                 IntOrTriple padding, IntOrTriple dilation, IntOrTriple output_padding, bool with_bias)
    : weight(make_transpose_weight("ConvTranspose3d", in_channels, out_channels, vec(kernel_size), vec(stride),
                                   vec(padding), vec(dilation), vec(output_padding))),
      stride(stride.tuple()),
      padding(padding.tuple()),
      dilation(dilation.tuple()),
      output_padding(output_padding.tuple()) {
  register_parameter("weight", weight);
  if (with_bias) {
    bias = zeros({out_channels});
    register_parameter("bias", *bias);
  }
}

array ConvTranspose3d::operator()(const array& x) const {
  check_input("ConvTranspose3d", x, 3, "D, H, W", weight.shape(4));
  array y = conv_transpose3d(x, weight, stride, padding, dilation, output_padding);
  return bias ? y + *bias : y;
}

// ---- pooling ----

MaxPool1d::MaxPool1d(int kernel_size, std::optional<int> stride, int padding)
    : kernel_size(kernel_size), stride(stride.value_or(kernel_size)), padding(padding) {
  check_pool_args("MaxPool1d", {kernel_size}, {this->stride}, {padding});
}
array MaxPool1d::operator()(const array& x) const {
  check_pool_input("MaxPool1d", x, 3, "(N, L, C)", {kernel_size}, {padding});
  return max_pool1d(x, kernel_size, stride, padding);
}

AvgPool1d::AvgPool1d(int kernel_size, std::optional<int> stride, int padding)
    : kernel_size(kernel_size), stride(stride.value_or(kernel_size)), padding(padding) {
  check_pool_args("AvgPool1d", {kernel_size}, {this->stride}, {padding});
}
array AvgPool1d::operator()(const array& x) const {
  check_pool_input("AvgPool1d", x, 3, "(N, L, C)", {kernel_size}, {padding});
  return avg_pool1d(x, kernel_size, stride, padding);
}

MaxPool2d::MaxPool2d(IntOrPair kernel_size) : MaxPool2d(kernel_size, kernel_size, 0) {}
MaxPool2d::MaxPool2d(IntOrPair kernel_size, IntOrPair stride, IntOrPair padding)
    : kernel_size(kernel_size.pair()), stride(stride.pair()), padding(padding.pair()) {
  check_pool_args("MaxPool2d", {kernel_size.first, kernel_size.second}, {stride.first, stride.second},
                  {padding.first, padding.second});
}
array MaxPool2d::operator()(const array& x) const {
  check_pool_input("MaxPool2d", x, 4, "(N, H, W, C)", {kernel_size.first, kernel_size.second},
                   {padding.first, padding.second});
  return max_pool2d(x, kernel_size, stride, padding);
}

AvgPool2d::AvgPool2d(IntOrPair kernel_size) : AvgPool2d(kernel_size, kernel_size, 0) {}
AvgPool2d::AvgPool2d(IntOrPair kernel_size, IntOrPair stride, IntOrPair padding)
    : kernel_size(kernel_size.pair()), stride(stride.pair()), padding(padding.pair()) {
  check_pool_args("AvgPool2d", {kernel_size.first, kernel_size.second}, {stride.first, stride.second},
                  {padding.first, padding.second});
}
array AvgPool2d::operator()(const array& x) const {
  check_pool_input("AvgPool2d", x, 4, "(N, H, W, C)", {kernel_size.first, kernel_size.second},
                   {padding.first, padding.second});
  return avg_pool2d(x, kernel_size, stride, padding);
}

}  // namespace loom::nn
