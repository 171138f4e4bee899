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
