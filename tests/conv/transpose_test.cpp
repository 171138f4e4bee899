// conv3d and the transposed convolutions (conv_transpose1d/2d/3d), against PyTorch: the expected values were
// computed by tests/conv/ (this file's generator, kept in the comment below) with
// torch.nn.functional.conv3d / conv_transpose{1,2,3}d in float64 on the same inputs, permuted to
// channels-last, with PyTorch's transposed weight (C_in, C_out / groups, K...) built from Loom's
// (C_out, K..., C_in / groups) as w_torch[g*Cin/G + i, o, k...] = w_loom[g*Cout/G + o, k..., i].
// Inputs: v_i = ((37 i + salt) mod 17 - 8) / 8, exact in float64.
#include "../test_utils.h"
#include "loom/autograd/check.h"
#include "loom/ops/conv.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

array vals(const Shape& shape, int salt) {
  size_t n = 1;
  for (int d : shape) n *= d;
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (double((i * 37 + salt) % 17) - 8.0) / 8.0;
  return array(v, shape, float64);
}

TEST(ConvTranspose, Conv1dMatchesPyTorch) {
  array x = vals({2, 4, 3}, 1), w = vals({2, 3, 3}, 2);
  array y = conv_transpose1d(x, w, /*stride=*/2, /*padding=*/1, /*dilation=*/1, /*output_padding=*/1);
  expect_array(y, {2,8,2}, {-0.578125, 0.46875, 0.234375, -1.15625, -0.4375, 0.046875, 0.515625, -0.671875, -0.5625, 0.421875, 0.0, 0.875, 1.703125, -0.53125, -0.546875, 1.734375, -0.546875, 0.375, -0.234375, 1.046875, 1.71875, -0.578125, -0.21875, 1.265625, -0.53125, 0.328125, -0.46875, 1.21875, 1.734375, -0.625, -0.734375, 1.953125}, 1e-12);
}

TEST(ConvTranspose, Conv2dWithGroupsDilationAndOutputPaddingMatchesPyTorch) {
  array x = vals({1, 3, 2, 4}, 3), w = vals({2, 2, 3, 2}, 4);
  array y = conv_transpose2d(x, w, {2, 1}, {1, 0}, {2, 1}, {1, 0}, /*groups=*/2);
  expect_array(y, {1,6,4,2}, {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.03125, -0.234375, -0.109375, 0.453125, 0.140625, -0.375, -0.703125, -0.28125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.484375, -0.234375, -0.296875, 0.15625, -0.640625, -0.203125, 0.21875, 0.453125, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.375, 0.0625, -1.03125, -0.046875, 2.234375, -0.90625, -1.046875, 0.84375}, 1e-12);
}

TEST(ConvTranspose, Conv3dMatchesPyTorch) {
  array x = vals({1, 2, 3, 2, 2}, 5), w = vals({3, 2, 2, 2, 2}, 6);
  array y = conv_transpose3d(x, w, {1, 2, 1}, {0, 1, 0});
  expect_array(y, {1,3,4,3,3}, {0.328125, -0.328125, -0.1875, -0.65625, -0.140625, 1.171875, 0.140625, -0.28125, -0.703125, 0.171875, 0.78125, 1.390625, -0.96875, -0.3125, 0.34375, -0.015625, 0.03125, 0.078125, 1.1875, -0.328125, -1.046875, 0.125, 0.25, 1.171875, 0.0625, 0.109375, 0.15625, -0.015625, -0.53125, -1.046875, 1.171875, 1.171875, 1.171875, -0.875, -0.359375, 0.15625, -0.015625, -0.1875, 0.4375, -0.96875, -0.578125, 0.609375, -0.296875, 0.265625, -0.765625, -1.109375, -0.078125, 0.953125, 0.296875, -0.890625, -1.28125, 0.46875, -0.15625, 0.015625, 0.609375, 0.046875, 0.28125, -0.265625, -0.65625, 1.078125, -0.21875, -0.046875, -0.140625, 0.875, 0.453125, 0.03125, -2.125, -0.640625, 1.640625, 0.3125, -0.703125, -0.921875, 0.09375, 0.046875, 0.0, 0.03125, -0.09375, -0.75, -0.53125, 0.984375, 0.375, -0.84375, -0.421875, 0.0, 1.078125, -0.234375, -0.75, -0.140625, -0.28125, 0.375, -0.140625, 0.28125, 0.703125, -0.046875, -0.5625, -0.28125, -0.375, 0.28125, 0.140625, -0.53125, -0.4375, -0.34375, -0.828125, 1.1875, -0.515625, 0.5625, -0.4375, -0.640625}, 1e-12);
}

TEST(Conv3d, MatchesPyTorch) {
  array x = vals({1, 3, 4, 3, 2}, 7), w = vals({2, 2, 2, 2, 2}, 8);
  array y = conv3d(x, w, {1, 2, 1}, {1, 0, 1}, {1, 1, 2});
  expect_array(y, {1,4,2,3,2}, {1.0625, -1.578125, -0.109375, 0.453125, -0.765625, 0.84375, 1.234375, -0.453125, 0.015625, 0.890625, 1.3125, -0.640625, -0.859375, 0.8125, -0.25, 0.703125, -0.703125, -1.421875, 1.265625, -0.46875, -1.484375, 0.359375, -1.40625, -1.546875, -0.59375, -0.421875, 0.46875, -1.3125, 0.015625, 1.25, -0.59375, -0.109375, -1.296875, -0.59375, 0.109375, 1.125, -0.296875, -0.1875, -0.78125, -0.296875, 0.1875, 0.5625, -0.203125, 0.0625, 0.515625, 2.375, 0.0625, 0.0625}, 1e-12);
  // The same as conv_general with three spatial dimensions.
  expect_array(y, {1, 4, 2, 3, 2}, conv_general(x, w, {1, 2, 1}, {1, 0, 1}, {1, 0, 1}, {1, 1, 2}).to_vector<double>(), 0);
}

// A transposed convolution is the adjoint of the convolution with the same weight: for every x, y,
// <conv(x, w), y> = <x, conv_transpose(y, w^T)>, where w^T swaps C_out and C_in.
TEST(ConvTranspose, IsTheAdjointOfConvolution) {
  array x = vals({2, 7, 3}, 9), w = vals({4, 3, 3}, 10);
  array cx = conv1d(x, w, /*stride=*/2, /*padding=*/1);  // (2, 4, 4)
  array y = vals(cx.shape(), 11);
  array wt = transpose(w, {2, 1, 0});  // (C_in=3, K, C_out=4)
  // output_padding makes the transposed output as long as x again (7 = (4 - 1) * 2 - 2 + 3 + 0).
  array back = conv_transpose1d(y, wt, 2, 1, 1, 0);
  ASSERT_EQ(back.shape(), x.shape());
  EXPECT_NEAR(sum(cx * y).item<double>(), sum(x * back).item<double>(), 1e-12);
}

TEST(ConvTranspose, GradientsByFiniteDifferences) {
  auto f = [](const std::vector<array>& a) { return std::vector<array>{conv_transpose1d(a[0], a[1], 2, 1, 1, 1)}; };
  auto r = check_grads(f, {vals({1, 3, 2}, 12), vals({2, 2, 2}, 13)});
  EXPECT_TRUE(r.ok) << r.report;
  auto f2 = [](const std::vector<array>& a) {
    return std::vector<array>{conv_transpose2d(a[0], a[1], {2, 1}, {1, 0}, {1, 1}, {1, 0})};
  };
  auto r2 = check_grads(f2, {vals({1, 2, 2, 2}, 14), vals({2, 2, 2, 2}, 15)});
  EXPECT_TRUE(r2.ok) << r2.report;
  auto f3 = [](const std::vector<array>& a) { return std::vector<array>{conv3d(a[0], a[1], {1, 2, 1}, {1, 0, 0})}; };
  auto r3 = check_grads(f3, {vals({1, 2, 3, 2, 2}, 16), vals({2, 2, 2, 1, 2}, 17)});
  EXPECT_TRUE(r3.ok) << r3.report;
}

TEST(ConvTranspose, BadInputs) {
  using E = std::invalid_argument;
  array x = vals({1, 4, 3}, 1), w = vals({2, 3, 3}, 2);
  EXPECT_THROW_MSG(conv_transpose1d(x, w, 1, 3), E, "[conv_transpose1d] padding 3 of spatial axis 0 exceeds the kernel's extent minus one (2)");
  EXPECT_THROW_MSG(conv_transpose1d(x, w, 0), E, "[conv_transpose1d] stride and dilation must be positive");
  EXPECT_THROW_MSG(conv_transpose1d(x, w, 1, 0, 1, -1), E, "[conv_transpose1d] padding and output_padding must be non-negative");
  EXPECT_THROW_MSG(conv_transpose2d(x, w), E, "[conv_transpose2d] input and weight must have 4 dimensions");
  EXPECT_THROW_MSG(conv_transpose1d(x, vals({2, 3, 2}, 2)), E, "[conv_transpose1d] channel mismatch");
  EXPECT_THROW_MSG(conv3d(x, w), E, "[conv3d] input must have 5 dimensions (N, D, H, W, C_in)");
}

}  // namespace
