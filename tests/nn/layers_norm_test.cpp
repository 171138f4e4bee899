#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "loom/nn/linear.h"
#include "loom/nn/normalization.h"
#include "../test_utils.h"

using namespace loom;
using loom::testing::joined;
using loom::testing::expect_array;

namespace {
constexpr double kEps = 1e-5;
}  // namespace

TEST(LayerNorm, HandComputedRows) {
  nn::LayerNorm ln(3);
  EXPECT_EQ(joined(ln.parameters().names()), "weight bias");
  expect_array(ln.weight.value(), {3}, {1, 1, 1});
  expect_array(ln.bias.value(), {3}, {0, 0, 0});
  // Row 0: mean 2, var 2/3; row 1: mean 4, var 8/3.
  array x({1.0f, 2.0f, 3.0f, 2.0f, 4.0f, 6.0f}, {2, 3});
  double a = 1 / std::sqrt(2.0 / 3 + kEps), b = 2 / std::sqrt(8.0 / 3 + kEps);
  expect_array(ln(x), {2, 3}, {-a, 0, a, -b, 0, b}, 1e-5);
  ln.update({{"weight", array({1.0f, 2.0f, 3.0f})}, {"bias", array({0.0f, 1.0f, 0.0f})}});
  expect_array(ln(x), {2, 3}, {-a, 1, 3 * a, -b, 1, 3 * b}, 1e-5);
  // A strided (transposed) input with leading axes.
  array xt = transpose(array({1.0f, 2.0f, 2.0f, 4.0f, 3.0f, 6.0f}, {1, 3, 2}), {0, 2, 1});
  expect_array(ln(xt), {1, 2, 3}, {-a, 1, 3 * a, -b, 1, 3 * b}, 1e-5);
}

TEST(LayerNorm, RowsHaveMeanZeroAndVarianceOne) {
  random::seed(7);
  nn::LayerNorm ln(64, 0.0);
  array x = random::normal({8, 64}) * 3.0f + 5.0f;
  array y = ln(x);
  expect_array(mean(y, -1), {8}, std::vector<double>(8, 0.0), 1e-5);
  expect_array(var(y, -1), {8}, std::vector<double>(8, 1.0), 1e-4);
  // float16 and float64 inputs keep their dtype; float16 statistics do not overflow (squares of
  // 1000 exceed float16's range).
  EXPECT_EQ(ln(astype(x, float16)).dtype(), float16);
  expect_array(nn::LayerNorm(4, 0.0)(astype(array({1000.0f, 1002.0f, 998.0f, 1000.0f}, {1, 4}), float16)), {1, 4},
               {0, std::sqrt(2.0), -std::sqrt(2.0), 0}, 2e-3);
  array y64 = nn::LayerNorm(64, 0.0)(astype(x, float64));
  EXPECT_EQ(y64.dtype(), float64);
  expect_array(var(y64, -1), {8}, std::vector<double>(8, 1.0), 1e-10);
}

TEST(LayerNorm, OptionsAndErrors) {
  nn::LayerNorm plain(3, 1e-5, false);
  EXPECT_TRUE(plain.parameters().empty());
  nn::LayerNorm nobias(3, 1e-5, true, false);
  EXPECT_EQ(joined(nobias.parameters().names()), "weight");
  EXPECT_THROW_MSG(plain(ones({2, 4})), std::invalid_argument, "[nn::LayerNorm] expected input (..., 3), got shape (2,4)");
  EXPECT_THROW_MSG(plain(array(1.0f)), std::invalid_argument, "got shape ()");
  EXPECT_THROW_MSG(nn::LayerNorm(0), std::invalid_argument, "dims must be positive, got 0");
  EXPECT_THROW_MSG(nn::LayerNorm(3, -1.0), std::invalid_argument, "eps must be >= 0");
  EXPECT_EQ(plain(zeros({0, 3})).shape(), (Shape{0, 3}));
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  nn::LayerNorm ln(4);
  auto fn = [&](const std::vector<array>& v) {
    ln.update({{"weight", v[1]}, {"bias", v[2]}});
    return std::vector<array>{ln(v[0])};
  };
  random::seed(1);
  auto r = check_grads(fn, {random::normal({3, 4}, float64), random::normal({4}, float64), random::normal({4}, float64)});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(RMSNorm, HandComputedAndGradients) {
  nn::RMSNorm rms(2);
  EXPECT_EQ(joined(rms.parameters().names()), "weight");
  // mean(x^2) = 12.5 for (3, 4).
  double s = 1 / std::sqrt(12.5 + kEps);
  expect_array(rms(array({3.0f, 4.0f})), {2}, {3 * s, 4 * s}, 1e-6);
  rms.update({{"weight", array({2.0f, 0.5f})}});
  expect_array(rms(array({3.0f, 4.0f, 0.0f, 1.0f}, {2, 2})), {2, 2}, {6 * s, 2 * s, 0, 0.5 / std::sqrt(0.5 + kEps)},
               1e-6);
  array big = astype(array({300.0f, 400.0f}), float16);  // 300^2 overflows float16
  array rh = nn::RMSNorm(2)(big);
  EXPECT_EQ(rh.dtype(), float16);
  expect_array(rh, {2}, {300 / std::sqrt(125000.0), 400 / std::sqrt(125000.0)}, 2e-3);
  EXPECT_THROW_MSG(rms(ones({2, 3})), std::invalid_argument, "[nn::RMSNorm] expected input (..., 2), got shape (2,3)");
  EXPECT_THROW_MSG(nn::RMSNorm(-2), std::invalid_argument, "dims must be positive, got -2");
  auto fn = [&](const std::vector<array>& v) {
    rms.update({{"weight", v[1]}});
    return std::vector<array>{rms(v[0])};
  };
  random::seed(2);
  auto r = check_grads(fn, {random::normal({3, 2}, float64), random::normal({2}, float64)});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(BatchNorm, RunningStatisticsAfterKnownBatches) {
  nn::BatchNorm bn(2);
  EXPECT_EQ(joined(bn.parameters().names()), "weight bias running_mean running_var");
  EXPECT_EQ(joined(bn.trainable_parameters().names()), "weight bias");
  EXPECT_EQ(joined(bn.buffers().names()), "running_mean running_var");
  // Batch 1: mean (2, 15), population variance (1, 25).
  array y1 = bn(array({1.0f, 10.0f, 3.0f, 20.0f}, {2, 2}));
  double a = 1 / std::sqrt(1 + kEps), b = 5 / std::sqrt(25 + kEps);
  expect_array(y1, {2, 2}, {-a, -b, a, b}, 1e-6);
  expect_array(*bn.running_mean, {2}, {0.2, 1.5}, 1e-6);
  expect_array(*bn.running_var, {2}, {1.0, 3.4}, 1e-6);
  // Batch 2: mean (2, 2), variance (8/3, 8).
  bn(array({0.0f, 0.0f, 4.0f, 0.0f, 2.0f, 6.0f}, {3, 2}));
  expect_array(*bn.running_mean, {2}, {0.38, 1.55}, 1e-6);
  expect_array(*bn.running_var, {2}, {0.9 + 0.8 / 3, 3.86}, 1e-6);
  // Evaluation mode normalizes with the running statistics and leaves them alone.
  bn.eval();
  bn.update({{"weight", array({2.0f, 1.0f})}, {"bias", array({0.0f, -1.0f})}});
  array y = bn(array({1.0f, 2.0f, 0.38f, 1.55f}, {2, 2}));
  expect_array(y, {2, 2},
               {2 * (1 - 0.38) / std::sqrt(0.9 + 0.8 / 3 + kEps), (2 - 1.55) / std::sqrt(3.86 + kEps) - 1, 0, -1}, 1e-5);
  expect_array(*bn.running_mean, {2}, {0.38, 1.55}, 1e-6);
  // Momentum 0.5.
  nn::BatchNorm half(1, 1e-5, 0.5);
  half(array({2.0f, 4.0f}, {2, 1}));
  expect_array(*half.running_mean, {1}, {1.5});
  expect_array(*half.running_var, {1}, {1.0});
}

TEST(BatchNorm, SpatialInputsAndNoRunningStats) {
  random::seed(3);
  nn::BatchNorm bn(3, 0.0);
  array x = random::normal({4, 5, 6, 3}) * array({1.0f, 2.0f, 3.0f}) + array({0.0f, -1.0f, 5.0f});
  array y = bn(x);
  expect_array(mean(y, {0, 1, 2}), {3}, {0, 0, 0}, 1e-5);
  expect_array(var(y, {0, 1, 2}), {3}, {1, 1, 1}, 1e-4);
  // The running mean moved a tenth of the way to the batch mean.
  expect_array(*bn.running_mean, {3}, (mean(x, {0, 1, 2}) * 0.1f).to_vector<double>(), 1e-6);

  EXPECT_EQ(bn(astype(x, float16)).dtype(), float16);
  bn.eval();
  EXPECT_EQ(bn(astype(x, bfloat16)).dtype(), bfloat16);
  EXPECT_EQ(nn::GroupNorm(1, 3)(astype(x, float16)).dtype(), float16);

  nn::BatchNorm stateless(2, kEps, 0.1, false, false);
  EXPECT_TRUE(stateless.parameters().empty());
  stateless.eval();
  double a = 1 / std::sqrt(1 + kEps);
  expect_array(stateless(array({1.0f, 5.0f, 3.0f, 5.0f}, {2, 2})), {2, 2}, {-a, 0, a, 0}, 1e-6);
}

TEST(BatchNorm, TrainsThroughValueAndGradAndUpdatesStats) {
  nn::BatchNorm bn(2);
  array x({1.0f, 10.0f, 3.0f, 20.0f}, {2, 2});
  array c({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
  auto loss_fn = [&](const array& in) { return sum(bn(in) * c); };
  auto [loss, grads] = nn::value_and_grad(bn, loss_fn)(x);
  eval(loss, grads, bn.parameters());
  // y = xhat * w + b with xhat = (-a, -b; a, b): dL/dw = sum(xhat * c), dL/db = sum(c) per feature.
  double a = 1 / std::sqrt(1 + kEps), b = 5 / std::sqrt(25 + kEps);
  expect_array(grads["weight"], {2}, {-a * 1 + a * 3, -b * 2 + b * 4}, 1e-5);
  expect_array(grads["bias"], {2}, {4, 6});
  expect_array(*bn.running_mean, {2}, {0.2, 1.5}, 1e-6);
  expect_array(*bn.running_var, {2}, {1.0, 3.4}, 1e-6);
}

TEST(BatchNorm, RunningStatsOfTracedInputsEvaluateAfterTheStep) {
  // The batch statistics depend on a traced parameter (the Linear before the BatchNorm); the
  // running mean built during value_and_grad must still evaluate afterwards.
  struct Net : nn::Module {
    nn::Linear lin{2, 2};
    nn::BatchNorm bn{2};
    Net() {
      register_module("lin", lin);
      register_module("bn", bn);
    }
  } net;
  net.lin.update({{"weight", array({1.0f, 0.0f, 1.0f, 1.0f}, {2, 2})}, {"bias", array({0.0f, 1.0f})}});
  array x({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});  // lin(x) = (1, 4; 3, 8): batch mean (2, 6)
  auto [loss, grads] = nn::value_and_grad(net, [&](const array& in) { return sum(square(net.bn(net.lin(in)))); })(x);
  eval(loss, grads, net.parameters());
  expect_array(*net.bn.running_mean, {2}, {0.2, 0.6}, 1e-6);
  expect_array(*net.bn.running_var, {2}, {0.9 + 0.1, 0.9 + 0.4}, 1e-6);
  EXPECT_EQ(grads.size(), 4u);
}

TEST(BatchNorm, Errors) {
  nn::BatchNorm bn(3);
  EXPECT_THROW_MSG(bn(ones({4, 2})), std::invalid_argument, "[nn::BatchNorm] expected input (N, ..., 3), got shape (4,2)");
  EXPECT_THROW_MSG(bn(ones({3})), std::invalid_argument, "got shape (3)");
  EXPECT_THROW_MSG(bn(zeros({0, 3})), std::invalid_argument, "at least one sample");
  EXPECT_THROW_MSG(nn::BatchNorm(3, 1e-5, 1.5), std::invalid_argument, "momentum must be in [0, 1], got 1.5");
  EXPECT_THROW_MSG(nn::BatchNorm(0), std::invalid_argument, "num_features must be positive, got 0");
}

TEST(GroupNorm, HandComputedGroupings) {
  // One sample, two positions, four channels: x = arange(8) as (1, 2, 4).
  array x = reshape(arange(8.0, float32), {1, 2, 4});
  // MLX grouping (c % 2): group 0 = channels 0, 2 = {0, 2, 4, 6} (mean 3), group 1 = {1, 3, 5, 7}
  // (mean 4); both have variance 5.
  nn::GroupNorm gn(2, 4);
  EXPECT_EQ(joined(gn.parameters().names()), "weight bias");
  double s = 1 / std::sqrt(5 + kEps);
  expect_array(gn(x), {1, 2, 4}, {-3 * s, -3 * s, -s, -s, s, s, 3 * s, 3 * s}, 1e-5);
  // PyTorch grouping (c / 2): group 0 = {0, 1, 4, 5} (mean 2.5), group 1 = {2, 3, 6, 7} (mean 4.5);
  // variance 4.25.
  nn::GroupNorm pt(2, 4, kEps, true, true);
  double t = 1 / std::sqrt(4.25 + kEps);
  expect_array(pt(x), {1, 2, 4}, {-2.5 * t, -1.5 * t, -2.5 * t, -1.5 * t, 1.5 * t, 2.5 * t, 1.5 * t, 2.5 * t}, 1e-5);
  // Samples are normalized independently; weight and bias apply per channel.
  pt.update({{"weight", array({1.0f, 1.0f, 2.0f, 2.0f})}, {"bias", array({0.0f, 0.0f, 0.0f, 1.0f})}});
  array two = concatenate({x, x * 10.0f + 3.0f}, 0);
  std::vector<double> want = {-2.5 * t, -1.5 * t, -5 * t, -3 * t + 1, 1.5 * t, 2.5 * t, 3 * t, 5 * t + 1};
  std::vector<double> both = want;
  both.insert(both.end(), want.begin(), want.end());
  expect_array(pt(two), {2, 2, 4}, both, 1e-5);
  // A (N, C) input: groups over channels only.
  expect_array(nn::GroupNorm(1, 2, 0.0, false)(array({1.0f, 3.0f}, {1, 2})), {1, 2}, {-1, 1}, 1e-6);
}

TEST(GroupNorm, ErrorsAndGradients) {
  EXPECT_THROW_MSG(nn::GroupNorm(3, 4), std::invalid_argument, "num_groups 3 must divide dims 4");
  nn::GroupNorm gn(2, 4);
  EXPECT_THROW_MSG(gn(ones({2, 3, 5})), std::invalid_argument, "[nn::GroupNorm] expected input (N, ..., 4), got shape (2,3,5)");
  auto fn = [&](const std::vector<array>& v) {
    gn.update({{"weight", v[1]}, {"bias", v[2]}});
    return std::vector<array>{gn(v[0])};
  };
  random::seed(4);
  auto r = check_grads(fn, {random::normal({2, 3, 4}, float64), random::normal({4}, float64),
                            random::normal({4}, float64)});
  EXPECT_TRUE(r.ok) << r.report;
}
