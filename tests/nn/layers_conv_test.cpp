#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "loom/nn/conv.h"
#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;

namespace {
void expect_close(const array& a, array b, double tol = 1e-5) {
  expect_array(a, b.shape(), b.to_vector<double>(), tol);
}
}  // namespace

TEST(Conv1d, HandComputedAndPadded) {
  nn::Conv1d conv(1, 1, 3);
  EXPECT_EQ(conv.parameters().names(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(conv.weight.shape(), (Shape{1, 3, 1}));
  conv.update({{"weight", array({1.0f, 0.0f, -1.0f}, {1, 3, 1})}, {"bias", array({0.5f})}});
  array x({1.0f, 2.0f, 3.0f, 4.0f}, {1, 4, 1});
  expect_array(conv(x), {1, 2, 1}, {-1.5, -1.5});
  nn::Conv1d padded(1, 1, 3, 1, 1);
  padded.update({{"weight", array({1.0f, 0.0f, -1.0f}, {1, 3, 1})}, {"bias", array({0.5f})}});
  expect_array(padded(x), {1, 4, 1}, {-1.5, -1.5, -1.5, 3.5});
  // Strided, dilated, grouped: the same as the op plus the bias.
  random::seed(2);
  nn::Conv1d g(4, 6, 2, 2, 1, 2, 2);
  EXPECT_EQ(g.weight.shape(), (Shape{6, 2, 2}));
  g.update({{"bias", arange(6.0, float32)}});
  array xs = random::normal({2, 9, 4});
  expect_close(g(xs), conv1d(xs, g.weight, 2, 1, 2, 2) + arange(6.0, float32));
}

TEST(Conv2d, MatchesTheOpWithTheSameWeights) {
  nn::Conv2d small(1, 1, 2);
  small.update({{"weight", ones({1, 2, 2, 1})}});
  expect_array(small(array({1.0f, 2.0f, 3.0f, 4.0f}, {1, 2, 2, 1})), {1, 1, 1, 1}, {10});

  random::seed(4);
  nn::Conv2d conv(3, 4, {3, 2}, {2, 1}, 1);
  EXPECT_EQ(conv.weight.shape(), (Shape{4, 3, 2, 3}));
  conv.update({{"bias", array({1.0f, -1.0f, 0.5f, 2.0f})}});
  array x = random::normal({2, 5, 6, 3});
  array want = conv2d(x, conv.weight, {2, 1}, {1, 1}) + array({1.0f, -1.0f, 0.5f, 2.0f});
  EXPECT_EQ(conv(x).shape(), (Shape{2, 3, 7, 4}));
  expect_close(conv(x), want);
  // Dilation and groups; a strided (transposed) input.
  nn::Conv2d grouped(4, 6, 2, 1, 0, {1, 2}, 2, false);
  EXPECT_EQ(grouped.parameters().size(), 1u);
  EXPECT_EQ(grouped.weight.shape(), (Shape{6, 2, 2, 2}));
  array xt = transpose(random::normal({2, 6, 5, 4}), {0, 2, 1, 3});
  expect_close(grouped(xt), conv2d(xt, grouped.weight, {1, 1}, {0, 0}, {1, 2}, 2));
}

TEST(Conv2d, DefaultInit) {
  random::seed(8);
  nn::Conv2d conv(8, 16, 3);
  const float k = 1.0f / std::sqrt(72.0f);
  auto w = conv.weight.to_vector<float>();
  float lo = 1, hi = -1;
  for (float v : w) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_GE(lo, -k);
  EXPECT_LT(hi, k);
  EXPECT_GT(hi, 0.95f * k);
  EXPECT_LT(lo, -0.95f * k);
  expect_array(*conv.bias, {16}, std::vector<double>(16, 0.0));
  random::seed(8);
  nn::Conv2d again(8, 16, 3);
  EXPECT_EQ(again.weight.to_vector<float>(), w);
  // With groups the fan-in is in_channels / groups * kernel area.
  nn::Conv1d g(8, 4, 3, 1, 0, 1, 4);
  const float kg = 1.0f / std::sqrt(6.0f);
  float ghi = 0;
  for (float v : g.weight.to_vector<float>()) ghi = std::max(ghi, std::abs(v));
  EXPECT_LE(ghi, kg);
  EXPECT_GT(ghi, 0.6f * kg);
}

TEST(Conv, ErrorsNameTheLayerAndShapes) {
  nn::Conv1d c1(3, 2, 3);
  EXPECT_THROW_MSG(c1(ones({2, 5, 4})), std::invalid_argument, "[nn::Conv1d] expected input (N, L, 3), got shape (2,5,4)");
  EXPECT_THROW_MSG(c1(ones({5, 3})), std::invalid_argument, "got shape (5,3)");
  EXPECT_THROW_MSG(c1(ones({1, 2, 3})), std::invalid_argument, "is smaller than the kernel");
  nn::Conv2d c2(3, 2, 3);
  EXPECT_THROW_MSG(c2(ones({1, 4, 4, 2})), std::invalid_argument, "[nn::Conv2d] expected input (N, H, W, 3), got shape (1,4,4,2)");
  EXPECT_THROW_MSG(nn::Conv2d(4, 6, 3, 1, 0, 1, 3), std::invalid_argument, "groups 3 must be positive and divide in_channels 4");
  EXPECT_THROW_MSG(nn::Conv2d(4, 6, {3, 0}), std::invalid_argument, "kernel_size (3, 0)");
  EXPECT_THROW_MSG(nn::Conv1d(0, 6, 3), std::invalid_argument, "in_channels and out_channels must be positive");
  EXPECT_THROW_MSG(nn::Conv1d(2, 2, 3, 0), std::invalid_argument, "stride 0");
}

// Largest |w| over the weight: U(-k, k) must stay inside k and come near it.
void expect_uniform_bound(array w, double k) {
  double hi = 0;
  for (float v : w.to_vector<float>()) hi = std::max(hi, double(std::abs(v)));
  EXPECT_LE(hi, k);
  EXPECT_GT(hi, 0.8 * k);
}

TEST(Conv3d, ShapeParametersValueAndInit) {
  random::seed(11);
  nn::Conv3d conv(3, 4, {2, 3, 1}, {1, 2, 1}, {1, 0, 1}, {2, 1, 1});
  EXPECT_EQ(conv.parameters().names(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(conv.weight.shape(), (Shape{4, 2, 3, 1, 3}));
  expect_uniform_bound(conv.weight, 1.0 / std::sqrt(3.0 * 2 * 3 * 1));  // MLX: sqrt(1 / (in * KD * KH * KW))
  expect_array(*conv.bias, {4}, std::vector<double>(4, 0.0));
  conv.update({{"bias", array({1.0f, -1.0f, 0.5f, 2.0f})}});
  array x = random::normal({2, 5, 7, 3, 3});
  array y = conv(x);
  // D: (5 + 2 - 3) / 1 + 1 = 5, H: (7 - 3) / 2 + 1 = 3, W: 3 + 2 = 5.
  EXPECT_EQ(y.shape(), (Shape{2, 5, 3, 5, 4}));
  expect_close(y, conv3d(x, conv.weight, {1, 2, 1}, {1, 0, 1}, {2, 1, 1}) + array({1.0f, -1.0f, 0.5f, 2.0f}));
  nn::Conv3d plain(2, 1, 1, 1, 0, 1, false);
  EXPECT_EQ(plain.parameters().names(), (std::vector<std::string>{"weight"}));
  plain.update({{"weight", array({2.0f, -1.0f}, {1, 1, 1, 1, 2})}});
  expect_array(plain(array({1.0f, 3.0f, 5.0f, 4.0f}, {1, 2, 1, 1, 2})), {1, 2, 1, 1, 1}, {-1, 6});
}

TEST(ConvTranspose1d, HandComputedAndMatchesTheOp) {
  nn::ConvTranspose1d up(1, 1, 3, 2);
  EXPECT_EQ(up.parameters().names(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(up.weight.shape(), (Shape{1, 3, 1}));
  up.update({{"weight", array({1.0f, 2.0f, 3.0f}, {1, 3, 1})}, {"bias", array({0.5f})}});
  // Each input element scatters the kernel at stride 2: [1 2 3 . .] + [. . 1 2 3], plus the bias.
  expect_array(up(array({1.0f, 1.0f}, {1, 2, 1})), {1, 5, 1}, {1.5, 2.5, 4.5, 2.5, 3.5});
  random::seed(3);
  nn::ConvTranspose1d t(4, 6, 3, 2, 1, 2, 1);
  EXPECT_EQ(t.weight.shape(), (Shape{6, 3, 4}));  // MLX's layout (out, K, in)
  expect_uniform_bound(t.weight, 1.0 / std::sqrt(4.0 * 3));
  t.update({{"bias", arange(6.0, float32)}});
  array x = random::normal({2, 5, 4});
  array y = t(x);
  EXPECT_EQ(y.shape(), (Shape{2, 12, 6}));  // (5 - 1) * 2 - 2 + 2 * 2 + 1 + 1
  expect_close(y, conv_transpose1d(x, t.weight, 2, 1, 2, 1) + arange(6.0, float32));
}

TEST(ConvTranspose2d, ShapeParametersAndValue) {
  random::seed(5);
  nn::ConvTranspose2d t(3, 2, {3, 2}, {2, 1}, {1, 0}, 1, {1, 0}, false);
  EXPECT_EQ(t.parameters().names(), (std::vector<std::string>{"weight"}));
  EXPECT_EQ(t.weight.shape(), (Shape{2, 3, 2, 3}));
  expect_uniform_bound(t.weight, 1.0 / std::sqrt(3.0 * 3 * 2));
  array x = random::normal({2, 4, 5, 3});
  array y = t(x);
  EXPECT_EQ(y.shape(), (Shape{2, 8, 6, 2}));  // H: 3 * 2 - 2 + 3 + 1, W: 4 + 2
  expect_close(y, conv_transpose2d(x, t.weight, {2, 1}, {1, 0}, {1, 1}, {1, 0}));
  // A strided (transposed) input gives the same as a contiguous one.
  array xt = transpose(random::normal({2, 5, 4, 3}), {0, 2, 1, 3});
  expect_close(t(xt), t(xt * 1.0f));
}

TEST(ConvTranspose3d, ShapeParametersAndValue) {
  random::seed(7);
  nn::ConvTranspose3d t(2, 3, {2, 1, 3}, {1, 2, 2}, {0, 0, 1}, {2, 1, 1}, {1, 1, 0});
  EXPECT_EQ(t.parameters().names(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(t.weight.shape(), (Shape{3, 2, 1, 3, 2}));
  expect_uniform_bound(t.weight, 1.0 / std::sqrt(2.0 * 2 * 1 * 3));
  t.update({{"bias", array({1.0f, 2.0f, 3.0f})}});
  array x = random::normal({1, 3, 2, 2, 2});
  array y = t(x);
  EXPECT_EQ(y.shape(), (Shape{1, 6, 4, 3, 3}));  // D: 2 + 2 + 1 + 1, H: 2 + 1 + 1, W: 2 - 2 + 3
  expect_close(y, conv_transpose3d(x, t.weight, {1, 2, 2}, {0, 0, 1}, {2, 1, 1}, {1, 1, 0}) + array({1.0f, 2.0f, 3.0f}));
}

TEST(ConvTranspose, LayerErrorsNameTheLayerAndShapes) {
  using E = std::invalid_argument;
  EXPECT_THROW_MSG(nn::ConvTranspose1d(2, 2, 3, 2, 0, 1, 2), E,
                   "[nn::ConvTranspose1d] output_padding must be >= 0 and smaller than stride or dilation, got "
                   "output_padding (2), stride (2), dilation (1)");
  EXPECT_NO_THROW(nn::ConvTranspose1d(2, 2, 3, 1, 0, 2, 1));  // below the dilation
  EXPECT_THROW_MSG(nn::ConvTranspose2d(2, 2, 3, 1, 0, 1, {0, 1}), E, "[nn::ConvTranspose2d] output_padding must be");
  EXPECT_THROW_MSG(nn::ConvTranspose3d(2, 2, 3, 1, 0, 1, -1), E, "[nn::ConvTranspose3d] output_padding must be >= 0");
  EXPECT_THROW_MSG(nn::ConvTranspose2d(2, 2, {3, 0}), E, "[nn::ConvTranspose2d] need kernel_size >= 1");
  EXPECT_THROW_MSG(nn::ConvTranspose1d(2, 2, 3, 1, -1), E, "padding -1");
  EXPECT_THROW_MSG(nn::ConvTranspose3d(0, 2, 3), E, "[nn::ConvTranspose3d] in_channels and out_channels must be positive");
  EXPECT_THROW_MSG(nn::Conv3d(2, 2, {1, 2, 0}), E, "[nn::Conv3d] need kernel_size >= 1");
  EXPECT_THROW_MSG(nn::Conv3d(2, 2, 1, {1, 0, 1}), E, "stride (1, 0, 1)");
  nn::Conv3d c3(3, 2, 2);
  EXPECT_THROW_MSG(c3(ones({1, 4, 4, 4, 2})), E, "[nn::Conv3d] expected input (N, D, H, W, 3), got shape (1,4,4,4,2)");
  EXPECT_THROW_MSG(c3(ones({1, 4, 4, 3})), E, "got shape (1,4,4,3)");
  EXPECT_THROW_MSG(c3(ones({1, 4, 1, 4, 3})), E, "is smaller than the kernel");
  EXPECT_THROW_MSG(nn::ConvTranspose1d(3, 2, 2)(ones({1, 4, 2})), E,
                   "[nn::ConvTranspose1d] expected input (N, L, 3), got shape (1,4,2)");
  EXPECT_THROW_MSG(nn::ConvTranspose2d(3, 2, 2)(ones({4, 4, 3})), E,
                   "[nn::ConvTranspose2d] expected input (N, H, W, 3), got shape (4,4,3)");
  EXPECT_THROW_MSG(nn::ConvTranspose3d(1, 2, 2)(ones({1, 2, 2, 2, 2})), E,
                   "[nn::ConvTranspose3d] expected input (N, D, H, W, 1)");
}

TEST(Pooling, HandComputed) {
  array img = reshape(arange(16.0, float32), {1, 4, 4, 1});
  expect_array(nn::MaxPool2d(2)(img), {1, 2, 2, 1}, {5, 7, 13, 15});
  expect_array(nn::AvgPool2d(2)(img), {1, 2, 2, 1}, {2.5, 4.5, 10.5, 12.5});
  expect_array(nn::MaxPool2d({2, 1}, {2, 1})(img), {1, 2, 4, 1}, {4, 5, 6, 7, 12, 13, 14, 15});
  // 3x3 windows, stride 2, padding 1: max pads with -inf, avg pads with zeros and divides by 9.
  expect_array(nn::MaxPool2d(3, 2, 1)(img), {1, 2, 2, 1}, {5, 7, 13, 15});
  expect_array(nn::AvgPool2d(3, 2, 1)(img), {1, 2, 2, 1}, {10.0 / 9, 24.0 / 9, 51.0 / 9, 90.0 / 9});
  array seq({1.0f, 3.0f, 2.0f, 5.0f}, {1, 4, 1});
  expect_array(nn::MaxPool1d(2, 1)(seq), {1, 3, 1}, {3, 3, 5});
  expect_array(nn::MaxPool1d(2)(seq), {1, 2, 1}, {3, 5});
  expect_array(nn::AvgPool1d(3, 1, 1)(array({1.0f, 2.0f, 3.0f, 4.0f}, {1, 4, 1})), {1, 4, 1}, {1, 2, 3, 7.0 / 3});
  // Channels pool independently.
  expect_array(nn::MaxPool1d(2)(array({1.0f, -1.0f, 0.0f, -3.0f}, {1, 2, 2})), {1, 1, 2}, {1, -1});
  EXPECT_TRUE(nn::MaxPool2d(2).parameters().empty());
}

TEST(Pooling, Errors) {
  EXPECT_THROW_MSG(nn::MaxPool2d(2)(ones({4, 4, 1})), std::invalid_argument,
                   "[nn::MaxPool2d] expected input (N, H, W, C), got shape (4,4,1)");
  EXPECT_THROW_MSG(nn::AvgPool1d(2)(ones({1, 4})), std::invalid_argument, "[nn::AvgPool1d] expected input (N, L, C)");
  EXPECT_THROW_MSG(nn::MaxPool1d(3, 1, 2), std::invalid_argument, "0 <= padding <= kernel_size / 2, got kernel_size 3, stride 1, padding 2");
  EXPECT_THROW_MSG(nn::AvgPool2d(0), std::invalid_argument, "[nn::AvgPool2d]");
  EXPECT_THROW_MSG(nn::MaxPool1d(3)(ones({1, 2, 1})), std::invalid_argument, "smaller than the kernel");
}
